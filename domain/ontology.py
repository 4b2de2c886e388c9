"""A tenant's ontology: the state folded from its log (`apply`), and the rules that turn commands into events
(`decide`). Pure: the caller supplies the clock and persists what `decide` returns."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from domain.consolidation import (
    CompactionState,
    ConsolidationCompleted,
    ConsolidationFailed,
    ConsolidationStarted,
    ConsolidationStatus,
    compaction_id_for,
)
from domain.dispatch import ByType
from domain.entities import EntitiesMerged, EntityRegistered, EntityState, EntityUpdated
from domain.errors import (
    SubjectWasForgotten,
    UnknownEntity,
    UnknownFact,
    UnknownSession,
)
from domain.events import DomainEvent
from domain.facts import (
    FactArchived,
    FactAsserted,
    FactCorrected,
    FactCorroborated,
    FactInvalidated,
    FactPromoted,
    FactRestored,
    FactState,
    FactStatus,
)
from domain.forgetting import SubjectForgotten, has_own_label_key
from domain.recalls import FactsRecalled, RecallsCoalesced
from domain.relations import BUILTIN_RELATIONS, RelationType, RelationTypeDefined, default_relation
from domain.sessions import (
    MAX_TURNS_KEPT,
    MessageAppended,
    SessionCompacted,
    SessionEnded,
    SessionKind,
    SessionStarted,
    SessionState,
    WorkerDispatched,
    WorkerReported,
    WorkerStatus,
    message_fingerprint,
)
from domain.tenants import TenantCreated

FactKey = tuple[str, str, str, str]
_SET, _POP, _ATTR, _DISCARD, _LISTPOP, _ADD = range(6)


SERVES = "serves"
"""The relation that says an agent serves a person (with main sessions: whom it may read about, domain/access.py)."""


def fact_id_for(tenant: str, key: FactKey, generation: int) -> str:
    """Deterministic: the n-th fact ever asserted anew for a key in a tenant has the same id on every replay."""
    text = f"{tenant}|{key[0]}|{key[1]}|{key[2]}|{key[3]}|{generation}"
    return hashlib.blake2b(text.encode(), digest_size=16, person=b"noumena-fact").hexdigest()


@dataclass
class Ontology:
    """Everything the rules need to know about one tenant, folded from its events in log order.

    The big maps and the set of seen event ids may be any mutable mapping or set: a state loaded from a snapshot
    has ones that read their entries from it on demand (infra/adapters/lazy_state.py), so the rules look keys up and
    iterate a whole map only where they must."""

    tenant: str
    exists: bool = False
    version: int = 0
    entities: dict[str, EntityState] = field(default_factory=dict)
    facts: dict[str, FactState] = field(default_factory=dict)
    current_by_key: dict[FactKey, str] = field(default_factory=dict)
    functional_current: dict[tuple[str, str, str], str] = field(default_factory=dict)
    slots: dict[tuple[str, str, str], list[str]] = field(default_factory=dict)
    """(subject, relation, scope) -> every fact asserted there, in log order: a functional relation's timeline."""
    generations: dict[FactKey, int] = field(default_factory=dict)
    facts_by_scope: dict[str, set[str]] = field(default_factory=dict)
    """Person or session scope -> the facts asserted in it (not the org scope)."""
    sessions: dict[str, SessionState] = field(default_factory=dict)
    relation_types: dict[str, RelationType] = field(default_factory=lambda: dict(BUILTIN_RELATIONS))
    seen_event_ids: set[str] = field(default_factory=set)
    compactions: dict[str, CompactionState] = field(default_factory=dict)
    person_scopes: dict[tuple[str, str, str], set[str]] = field(default_factory=dict)
    """(subject, relation, object) -> the person scopes in which it is currently believed (for promotion)."""
    entity_links: dict[str, set[str]] = field(default_factory=dict)
    """`person:` ref -> the entities with labels of their own (`has_own_label_key`) a fact links to it: the fact
    names the person as its subject, object or scope, or was scoped to or drawn from a session serving them. What
    forgetting the person may erase with it (`linked_entities` in domain/forgetting.py), found without a pass
    over every fact."""
    linked_people: dict[str, set[str]] = field(default_factory=dict)
    """The other way round: entity ref -> the people facts link it to (is it linked to anyone but the forgotten?)."""
    served_by: dict[str, dict[str, set[str]]] = field(default_factory=dict)
    """agent ref -> person ref -> why the agent serves them: its main sessions serving them and its current
    `serves` facts to them (ids; an empty set: no longer). What a key scoped to agents may read about
    (`domain.access.persons_served`), found in O(persons of those agents), not by a pass over every fact."""
    forgotten_people: dict[str, str] = field(default_factory=dict)
    """`person:` refs forgotten and not registered anew since, with their forget receipt's id."""
    recall_count: int = 0
    recall_uses: dict[str, dict[str, list[datetime]]] = field(default_factory=dict)
    """fact id -> agent -> when that agent recalled it (each recall is a use that strengthens it for that agent)."""
    _journal: list[tuple[int, Any, Any, Any]] | None = field(default=None, repr=False)
    _trim_on_commit: list[list[Any]] = field(default_factory=list, repr=False)

    # ------------------------------------------------------------------ tentative changes

    def begin(self) -> None:
        """Start recording how to undo every change, so a batch that cannot be written can be rolled back."""
        self._journal = []

    def commit(self) -> None:
        self._journal = None
        for turns in self._trim_on_commit:
            del turns[: max(0, len(turns) - MAX_TURNS_KEPT)]
        self._trim_on_commit.clear()

    def rollback(self) -> None:
        journal, self._journal = self._journal or [], None
        self._trim_on_commit.clear()
        for op, target, key, old in reversed(journal):
            if op == _SET:
                target[key] = old
            elif op == _POP:
                target.pop(key, None)
            elif op == _ATTR:
                setattr(target, key, old)
            elif op == _DISCARD:
                target.discard(key)
            elif op == _ADD:
                target.add(key)
            else:
                target.pop()

    # Each helper changes one thing and, inside begin()/commit(), records how to undo it as a plain tuple.

    def _set(self, mapping: dict, key: object, value: object) -> None:  # type: ignore[type-arg]
        if self._journal is not None:
            self._journal.append((_SET, mapping, key, mapping[key]) if key in mapping else (_POP, mapping, key, None))
        mapping[key] = value

    def _delete(self, mapping: dict, key: object) -> None:  # type: ignore[type-arg]
        old = mapping.pop(key)
        if self._journal is not None:
            self._journal.append((_SET, mapping, key, old))

    def _attrs(self, obj: object, **values: object) -> None:
        journal = self._journal
        for name, value in values.items():
            if journal is not None:
                journal.append((_ATTR, obj, name, getattr(obj, name)))
            setattr(obj, name, value)

    def _attr(self, obj: object, name: str, value: object) -> None:
        """`_attrs` for one attribute, without building keyword arguments (a corroboration's only change)."""
        if self._journal is not None:
            self._journal.append((_ATTR, obj, name, getattr(obj, name)))
        setattr(obj, name, value)

    def _add(self, container: set, value: object) -> None:  # type: ignore[type-arg]
        if value not in container:
            container.add(value)
            if self._journal is not None:
                self._journal.append((_DISCARD, container, value, None))

    def _discard(self, container: set, value: object) -> None:  # type: ignore[type-arg]
        if value in container:
            container.discard(value)
            if self._journal is not None:
                self._journal.append((_ADD, container, value, None))

    def _append(self, items: list, value: object) -> None:  # type: ignore[type-arg]
        items.append(value)
        if self._journal is not None:
            self._journal.append((_LISTPOP, items, None, None))

    def _link_entities(self, e: FactAsserted, refs: tuple[str, ...]) -> None:
        """Record which people the fact links `refs` (its ends with labels of their own) to."""
        people: list[str] = []
        for end in (e.subject, e.object):
            if end.startswith("person:"):
                people.append(end)
        scope = e.scope
        if scope != "org":
            if scope.startswith("person:"):
                people.append(scope)
            elif scope.startswith("session:"):
                self._link_session_person(scope[8:], people)
        if e.provenance.session_id is not None:
            self._link_session_person(e.provenance.session_id, people)
        if not people:
            return
        fast = self._journal is None  # (a fold: nothing to undo, so the sets are changed directly)
        for person in people:
            self._link(self.entity_links, person, refs, fast)
        for ref in refs:
            self._link(self.linked_people, ref, people, fast)

    def _link(self, index: dict[str, set[str]], key: str, values: Sequence[str], fast: bool) -> None:
        """Add `values` to `index[key]` (one side of a two-way link), journalled unless `fast`."""
        linked = index.get(key)
        if linked is None:
            linked = set()
            self._set(index, key, linked)
        for value in values:
            if value in linked:
                continue
            if fast:
                linked.add(value)
            else:
                self._add(linked, value)

    def _link_session_person(self, session_id: str, people: list[str]) -> None:
        session = self.sessions.get(session_id)
        if session is not None:
            served = self.person_served_by(session)
            if served is not None and served.startswith("person:"):
                people.append(served)

    def _serve(self, agent: str, person: str, why: str, serves: bool) -> None:
        """Record (or, `serves` false, drop) one reason `agent` serves `person` in `served_by`."""
        persons = self.served_by.get(agent)
        if persons is None:
            if not serves:
                return
            persons = {}
            self._set(self.served_by, agent, persons)
        reasons = persons.get(person)
        if reasons is None:
            if not serves:
                return
            reasons = set()
            self._set(persons, person, reasons)
        if serves:
            self._add(reasons, why)
        else:
            self._discard(reasons, why)

    def _serves_fact(self, fact: FactState, current: bool) -> None:
        if fact.relation == SERVES:
            self._serve(fact.subject, fact.object, fact.fact_id, current)

    # ------------------------------------------------------------------ queries used by the rules

    def relation(self, name: str) -> RelationType:
        return self.relation_types.get(name) or default_relation(name)


    def key_for(self, subject: str, relation: str, obj: str, scope: str,
                known: RelationType | None = None) -> FactKey:
        if (known or self.relation(relation)).symmetric and obj < subject:
            subject, obj = obj, subject
        return (subject, relation, obj, scope)

    def current_facts(self) -> Iterable[FactState]:
        return (f for f in self.facts.values() if f.status is FactStatus.CURRENT)

    def require_entity(self, ref: str, field_name: str) -> EntityState:
        entity = self.entities.get(ref)
        if entity is None:
            raise UnknownEntity(ref, self.tenant, field=field_name)
        return entity

    def require_not_forgotten(self, ref: str | None, field_name: str) -> None:
        """Writes about a forgotten person are refused until the person is registered anew."""
        if ref is not None and ref in self.forgotten_people:
            raise SubjectWasForgotten(ref, self.forgotten_people[ref], field_name)

    def person_served_by(self, session: SessionState) -> str | None:
        """The person a session serves: its own `serving`, else (a worker) its main session's."""
        if session.serving is None and session.parent_session_id in self.sessions:
            return self.sessions[session.parent_session_id].serving
        return session.serving

    def require_session_not_forgotten(self, session_id: str | None, field_name: str) -> None:
        """Writes into a session that served a forgotten person (its content was erased with them) are refused
        like writes about the person: the session's key would be made anew, and what is written would read."""
        if session_id is None or not self.forgotten_people:
            return
        session = self.sessions.get(session_id)
        if session is not None:
            self.require_not_forgotten(self.person_served_by(session), field_name)

    def require_session(self, session_id: str, field_name: str = "session_id") -> SessionState:
        session = self.sessions.get(session_id)
        if session is None:
            raise UnknownSession(session_id, field=field_name)
        return session

    def require_fact(self, fact_id: str) -> FactState:
        fact = self.facts.get(fact_id)
        if fact is None:
            raise UnknownFact(fact_id)
        return fact

    # ------------------------------------------------------------------ evolving state from events

    def apply(self, event: DomainEvent) -> None:
        evolve(event, self)
        if self._journal is not None:
            self._journal.append((_ATTR, self, "version", self.version))
        self.version += 1
        if event.event_id is not None:
            self._add(self.seen_event_ids, event.event_id)

    def _track_person_scope(self, fact: FactState, current: bool) -> None:
        if not fact.scope.startswith("person:"):
            return
        key = self.key_for(fact.subject, fact.relation, fact.object, "")[:3]
        if current:
            if key not in self.person_scopes:
                self._set(self.person_scopes, key, set())
            self._add(self.person_scopes[key], fact.scope)
        elif key in self.person_scopes:
            self._discard(self.person_scopes[key], fact.scope)

    def _forget_current(self, fact: FactState) -> None:
        key = self.key_for(*fact.key)
        if self.current_by_key.get(key) == fact.fact_id:
            self._delete(self.current_by_key, key)
            self._track_person_scope(fact, current=False)
        fkey = (fact.subject, fact.relation, fact.scope)
        if self.functional_current.get(fkey) == fact.fact_id:
            self._delete(self.functional_current, fkey)


evolve: ByType[None] = ByType("evolve", "no rule to apply {name}")
"""Change a state by one event: one function below per event type, as `decide` has one rule per command."""


@evolve.register
def _(e: TenantCreated, state: Ontology) -> None:
    state._attrs(state, exists=True)


@evolve.register
def _(e: EntityRegistered, state: Ontology) -> None:
    state._set(state.entities, e.ref, EntityState(
        ref=e.ref, label=e.label, aliases=e.aliases, hub=e.hub, needs_review=e.needs_review,
        registered_at=e.recorded_at,
    ))


@evolve.register
def _(e: EntityUpdated, state: Ontology) -> None:
    if e.ref in state.forgotten_people:  # registered anew after it was forgotten
        state._delete(state.forgotten_people, e.ref)
    entity = state.entities[e.ref]
    state._attrs(entity, label=e.label, aliases=e.aliases, hub=e.hub,
                needs_review=entity.needs_review if e.needs_review is None else e.needs_review)


@evolve.register
def _(e: EntitiesMerged, state: Ontology) -> None:
    state._attrs(state.entities[e.merged_ref], merged_into=e.into_ref)


@evolve.register
def _(e: RelationTypeDefined, state: Ontology) -> None:
    state._set(state.relation_types, e.name, RelationType(
        name=e.name, functional=e.functional, symmetric=e.symmetric, weight=e.weight
    ))


@evolve.register
def _(e: FactAsserted, state: Ontology) -> None:
    fact = FactState(
        fact_id=e.fact_id, subject=e.subject, relation=e.relation, object=e.object, scope=e.scope,
        reason=e.reason, confidence=e.confidence, valid_from=e.valid_from, valid_to=e.valid_to,
        status=FactStatus.CURRENT, asserted_at=e.recorded_at, provenance=[e.provenance],
        supersedes=e.supersedes, ranges=[(e.valid_from, e.valid_to)],
    )
    relation = state.relation(e.relation)
    key = state.key_for(e.subject, e.relation, e.object, e.scope, relation)
    state._set(state.facts, e.fact_id, fact)
    # A value placed before the current one is asserted and then invalidated in the same write: whatever is
    # current stays so, also when the new fact continues its own value (the remainder of a split).
    holder = state.current_by_key.get(key)
    holds_key = holder is None or state.facts[holder].status is not FactStatus.CURRENT
    if holds_key:
        state._set(state.current_by_key, key, e.fact_id)
    state._set(state.generations, key, state.generations.get(key, 0) + 1)
    if e.scope != "org":  # (nothing asks for the org scope's facts: it would be one record of them all)
        if e.scope not in state.facts_by_scope:
            state._set(state.facts_by_scope, e.scope, set())
        state._add(state.facts_by_scope[e.scope], e.fact_id)
    slot = (e.subject, e.relation, e.scope)
    in_slot = state.slots.get(slot)
    if in_slot is None:
        state._set(state.slots, slot, [e.fact_id])
    else:
        state._append(in_slot, e.fact_id)
    if relation.functional:  # (rules place values so that one is current per slot: domain/timelines.py)
        holder = state.functional_current.get(slot)
        if holder is None or state.facts[holder].status is not FactStatus.CURRENT:
            state._set(state.functional_current, slot, e.fact_id)
    if holds_key and e.scope != "org":
        state._track_person_scope(fact, current=True)
    state._serves_fact(fact, current=True)
    if has_own_label_key(e.subject):
        state._link_entities(e, (e.subject, e.object) if has_own_label_key(e.object) else (e.subject,))
    elif has_own_label_key(e.object):
        state._link_entities(e, (e.object,))


@evolve.register
def _(e: FactCorroborated, state: Ontology) -> None:
    fact = state.facts[e.fact_id]
    state._attr(fact, "confidence", e.confidence)
    state._append(fact.provenance, e.provenance)
    state._append(fact.ranges, (e.valid_from, e.valid_to))


@evolve.register
def _(e: FactCorrected, state: Ontology) -> None:
    fact = state.facts[e.fact_id]
    state._attrs(fact, valid_from=fact.valid_from if e.valid_from is None else e.valid_from,
                valid_to=fact.valid_to if e.valid_to is None else e.valid_to,
                superseded_by=fact.superseded_by if e.superseded_by is None else e.superseded_by)


@evolve.register
def _(e: FactInvalidated, state: Ontology) -> None:
    fact = state.facts[e.fact_id]
    state._attrs(fact, status=FactStatus.INVALIDATED, superseded_by=e.superseded_by, ended_reason=e.reason,
                valid_to=fact.valid_to if e.valid_to is None else e.valid_to)
    state._forget_current(fact)
    state._serves_fact(fact, current=False)


@evolve.register
def _(e: FactArchived, state: Ontology) -> None:
    fact = state.facts[e.fact_id]
    state._attrs(fact, status=FactStatus.ARCHIVED, ended_reason=e.cause)
    state._forget_current(fact)
    state._serves_fact(fact, current=False)


@evolve.register
def _(e: FactRestored, state: Ontology) -> None:
    fact = state.facts[e.fact_id]
    state._attrs(fact, status=FactStatus.CURRENT, ended_reason=None)
    state._serves_fact(fact, current=True)
    state._set(state.current_by_key, state.key_for(*fact.key), fact.fact_id)
    if state.relation(fact.relation).functional:
        slot = (fact.subject, fact.relation, fact.scope)
        holder = state.functional_current.get(slot)
        if holder is None or state.facts[holder].status is not FactStatus.CURRENT:
            state._set(state.functional_current, slot, fact.fact_id)
    state._track_person_scope(fact, current=True)


@evolve.register
def _(e: FactPromoted, state: Ontology) -> None:
    pass  # the promoted fact arrives as its own FactAsserted; this event records why


@evolve.register
def _(e: SessionStarted, state: Ontology) -> None:
    state._set(state.sessions, e.session_id, SessionState(
        session_id=e.session_id, agent=e.agent, kind=e.kind, serving=e.serving,
        parent_session_id=e.parent_session_id, task=e.task, started_at=e.recorded_at,
    ))
    if e.kind == SessionKind.MAIN and e.serving is not None:
        state._serve(e.agent, e.serving, f"session:{e.session_id}", serves=True)


@evolve.register
def _(e: MessageAppended, state: Ontology) -> None:
    session = state.sessions[e.session_id]
    state._set(session.message_ids, e.message_id, (e.event_id, message_fingerprint(e.role, e.content)))
    state._append(session.turns, (e.message_id, e.role, e.content))
    if len(session.turns) > MAX_TURNS_KEPT:
        if state._journal is None:
            del session.turns[: len(session.turns) - MAX_TURNS_KEPT]
        else:
            state._trim_on_commit.append(session.turns)


@evolve.register
def _(e: WorkerDispatched, state: Ontology) -> None:
    main = state.sessions[e.session_id]
    if e.worker_session_id not in main.workers:
        state._append(main.workers, e.worker_session_id)
    worker = state.sessions.get(e.worker_session_id)
    if worker is None:
        worker = SessionState(
            session_id=e.worker_session_id, agent=main.agent, kind=SessionKind.WORKER,
            serving=main.serving, parent_session_id=main.session_id, task=e.task,
            started_at=e.recorded_at,
        )
        state._set(state.sessions, e.worker_session_id, worker)
    state._attrs(worker, task=e.task, about=e.about, status=WorkerStatus.DISPATCHED)


@evolve.register
def _(e: WorkerReported, state: Ontology) -> None:
    worker = state.sessions[e.session_id]
    state._attrs(worker, status=e.status, last_summary=e.summary,
                about=tuple(dict.fromkeys(worker.about + e.about)))


@evolve.register
def _(e: SessionCompacted, state: Ontology) -> None:
    session = state.sessions[e.session_id]
    state._attrs(session, compactions=session.compactions + 1)
    compaction_id = compaction_id_for(e.session_id, session.compactions)
    state._set(state.compactions, compaction_id, CompactionState(
        compaction_id=compaction_id, session_id=e.session_id, through_message_id=e.through_message_id,
        summary=e.summary, mentions=e.mentions, facts=e.facts, invalidations=e.invalidations,
        recorded_at=e.recorded_at,
    ))
    if e.summary:
        state._append(session.summaries, (compaction_id, e.summary))


@evolve.register
def _(e: ConsolidationStarted, state: Ontology) -> None:
    compaction = state.compactions[e.compaction_id]
    state._attrs(compaction, status=ConsolidationStatus.RUNNING, attempts=e.attempt, reason=None)


@evolve.register
def _(e: ConsolidationCompleted, state: Ontology) -> None:
    state._attrs(state.compactions[e.compaction_id], status=ConsolidationStatus.COMPLETED, counts=e.counts)


@evolve.register
def _(e: ConsolidationFailed, state: Ontology) -> None:
    state._attrs(state.compactions[e.compaction_id], status=ConsolidationStatus.FAILED, reason=e.reason)


@evolve.register
def _(e: SessionEnded, state: Ontology) -> None:
    state._attrs(state.sessions[e.session_id], ended=True)


@evolve.register
def _(e: FactsRecalled, state: Ontology) -> None:
    state._attrs(state, recall_count=state.recall_count + 1)
    for fact_id in e.fact_ids:
        by_agent = state.recall_uses.get(fact_id)
        if by_agent is None:
            by_agent = {}
            state._set(state.recall_uses, fact_id, by_agent)
        if e.agent not in by_agent:
            state._set(by_agent, e.agent, [])
        state._append(by_agent[e.agent], e.recorded_at)


@evolve.register
def _(e: RecallsCoalesced, state: Ontology) -> None:
    state._attrs(state, recall_count=state.recall_count + 1)
    for agent, _mode, fact_id, at in e.used():
        by_agent = state.recall_uses.get(fact_id)
        if by_agent is None:
            by_agent = {}
            state._set(state.recall_uses, fact_id, by_agent)
        if agent not in by_agent:
            state._set(by_agent, agent, [])
        state._append(by_agent[agent], at)


@evolve.register
def _(e: SubjectForgotten, state: Ontology) -> None:
    # the content is gone from the log's point of view; services reload their folded state. A person stays
    # closed to writes until registered anew.
    if e.subject.startswith("person:"):
        state._set(state.forgotten_people, e.subject, e.receipt_id or "")
