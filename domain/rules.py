"""The rules: `decide(ontology, command, now)` returns the events a command causes, or raises a DomainError.

`decide` never mutates the ontology. A command whose `event_id` was seen before decides nothing.
"""

from __future__ import annotations

from datetime import datetime

from domain import commands as c
from domain import timelines
from domain.consolidation import (
    CompactionState,
    CompleteConsolidation,
    ConsolidationCompleted,
    ConsolidationFailed,
    ConsolidationStarted,
    ConsolidationStatus,
    FailConsolidation,
    StartConsolidation,
)
from domain.dispatch import ByType
from domain.entities import EntitiesMerged, EntityRegistered, EntityUpdated
from domain.errors import (
    FactNotCurrent,
    InvalidInput,
    SessionAlreadyEnded,
    SessionConflict,
    TenantAlreadyExists,
    UnknownFact,
    UnknownTenant,
)
from domain.events import DomainEvent, validated
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
from domain.forgetting import SubjectForgotten
from domain.ontology import Ontology, fact_id_for
from domain.recalls import AgentUses, FactsRecalled, RecallMode, RecallsCoalesced, hour_bucket
from domain.relations import RelationTypeDefined, default_relation
from domain.sessions import (
    MessageAppended,
    SessionCompacted,
    SessionEnded,
    SessionKind,
    SessionStarted,
    WorkerDispatched,
    WorkerReported,
    message_fingerprint,
)
from domain.tenants import TenantCreated
from domain.values import DEFAULT_CONFIDENCE, Provenance, corroborated_confidence

PROMOTION_MIN_PERSONS = 3
"""A person-scoped fact seen independently for this many persons is promoted to the org scope."""


def decide(state: Ontology, command: c.Command, now: datetime) -> list[DomainEvent]:
    if now.tzinfo is None:
        raise InvalidInput("the clock must carry a time zone", field="recorded_at")
    if command.event_id is not None and command.event_id in state.seen_event_ids:
        return []
    if not isinstance(command, c.CreateTenant) and not state.exists:
        raise UnknownTenant(command.tenant)
    return _decide(command, state, now)


def _base(command: c.Command, now: datetime) -> dict[str, object]:
    return {"tenant": command.tenant, "recorded_at": now, "event_id": command.event_id}


_decide: ByType[list[DomainEvent]] = ByType("decide", "no rule for {name}")


@_decide.register
def create_tenant(cmd: c.CreateTenant, state: Ontology, now: datetime) -> list[DomainEvent]:
    if state.exists:
        raise TenantAlreadyExists(cmd.tenant)
    return [TenantCreated(**_base(cmd, now), display_name=cmd.display_name)]


@_decide.register
def register_entity(cmd: c.RegisterEntity, state: Ontology, now: datetime) -> list[DomainEvent]:
    if cmd.session_id is not None:
        state.require_session(cmd.session_id)
        state.require_session_not_forgotten(cmd.session_id, "session_id")
    existing = state.entities.get(cmd.ref)
    if existing is None:
        return [EntityRegistered(**_base(cmd, now), ref=cmd.ref, label=cmd.label, aliases=cmd.aliases,
                                 hub=cmd.hub, needs_review=cmd.needs_review, session_id=cmd.session_id)]
    aliases = tuple(dict.fromkeys(existing.aliases + cmd.aliases + (
        (existing.label,) if existing.label != cmd.label else ())))
    aliases = tuple(a for a in aliases if a != cmd.label)
    if (cmd.label, cmd.hub) == (existing.label, existing.hub) and set(cmd.aliases) <= set(existing.aliases):
        return []  # registering the same entity again is idempotent
    return [EntityUpdated(**_base(cmd, now), ref=cmd.ref, label=cmd.label, aliases=aliases, hub=cmd.hub,
                          session_id=cmd.session_id)]


@_decide.register
def define_relation(cmd: c.DefineRelation, state: Ontology, now: datetime) -> list[DomainEvent]:
    current = state.relation(cmd.name)
    if (current.functional, current.symmetric, current.weight) == (cmd.functional, cmd.symmetric, cmd.weight):
        return []
    return [RelationTypeDefined(**_base(cmd, now), name=cmd.name, functional=cmd.functional,
                                symmetric=cmd.symmetric, weight=cmd.weight)]


def _provenance(cmd: c.Command, source: c.Source | None) -> Provenance:
    if source is None:
        return validated(Provenance, {"event_id": cmd.event_id, "occurred_at": cmd.occurred_at})
    return validated(Provenance, {"session_id": source.session_id, "message_ids": source.message_ids,
                             "actor": source.actor, "event_id": cmd.event_id, "occurred_at": cmd.occurred_at})


def _not_forgotten(state: Ontology, *refs: tuple[str | None, str]) -> None:
    for ref, field_name in refs:
        state.require_not_forgotten(ref, field_name)


def _not_from_forgotten_sessions(state: Ontology, scope: str, source: c.Source | None) -> None:
    """A write scoped to, or drawn from, a session that served a forgotten person is refused: its words are that
    person's (a consolidation, compaction or worker started before the forget and writing after it included)."""
    if scope.startswith("session:"):
        state.require_session_not_forgotten(scope.removeprefix("session:"), "scope")
    if source is not None:
        state.require_session_not_forgotten(source.session_id, "source.session_id")


def _check_scope(state: Ontology, scope: str) -> None:
    if scope.startswith("person:"):
        state.require_entity(scope, "scope")
    elif scope.startswith("session:"):
        state.require_session(scope.removeprefix("session:"), "scope")


@_decide.register
def assert_fact(cmd: c.AssertFact, state: Ontology, now: datetime) -> list[DomainEvent]:
    entities = state.entities
    if cmd.subject not in entities:
        state.require_entity(cmd.subject, "subject")  # (raises, naming the field)
    if cmd.object not in entities:
        state.require_entity(cmd.object, "object")
    if cmd.scope != "org":
        _check_scope(state, cmd.scope)
    source = cmd.source
    if source is not None and source.session_id is not None:
        state.require_session(source.session_id, "source.session_id")
    if state.forgotten_people:
        _not_forgotten(state, (cmd.subject, "subject"), (cmd.object, "object"), (cmd.scope, "scope"))
        _not_from_forgotten_sessions(state, cmd.scope, source)
    start = cmd.valid_from or cmd.occurred_at or now
    if cmd.valid_to is not None and cmd.valid_to <= start:
        said = "valid_from" if cmd.valid_from else "occurred_at, the default valid_from" if cmd.occurred_at else (
            "the recorded time, the default valid_from")
        raise InvalidInput(f"valid_to {cmd.valid_to.isoformat()} is not after {said} {start.isoformat()}",
                           field="valid_to")
    provenance = _provenance(cmd, source)
    confidence = DEFAULT_CONFIDENCE if cmd.confidence is None else cmd.confidence
    relation = state.relation_types.get(cmd.relation) or default_relation(cmd.relation)
    key = state.key_for(cmd.subject, cmd.relation, cmd.object, cmd.scope, relation)

    existing_id = state.current_by_key.get(key)
    reachable = None
    if existing_id is None and relation.functional:
        reachable = _reachable(state, (cmd.subject, cmd.relation, cmd.scope), start)
        existing_id = _value_holding(state, reachable, key, start)
    if existing_id is not None:
        existing = state.facts[existing_id]
        return [validated(FactCorroborated, {
            "tenant": cmd.tenant, "recorded_at": now, "event_id": cmd.event_id, "fact_id": existing_id,
            "provenance": provenance, "previous_confidence": existing.confidence,
            "confidence": corroborated_confidence(existing.confidence, confidence), "reason": cmd.reason,
            "valid_from": start, "valid_to": cmd.valid_to,
        })]

    fields = {"tenant": cmd.tenant, "recorded_at": now, "event_id": cmd.event_id, "subject": cmd.subject,
              "relation": cmd.relation, "object": cmd.object, "scope": cmd.scope, "reason": cmd.reason,
              "confidence": confidence, "provenance": provenance}
    events, asserted, current = _assert_value(state, cmd, now, key, relation.functional, fields, start,
                                              cmd.valid_to, provenance, reachable)
    if current and cmd.scope.startswith("person:"):
        persons = state.person_scopes.get(key[:3], set()) | {cmd.scope}
        if len(persons) >= PROMOTION_MIN_PERSONS:
            sources = [state.current_by_key[state.key_for(cmd.subject, cmd.relation, cmd.object, p)]
                       for p in sorted(persons - {cmd.scope})] + [asserted.fact_id]
            events += _promotion(state, cmd, now, asserted, sources,
                                 f"seen independently for {len(persons)} persons")
    return events


def _value_holding(state: Ontology, values: list[FactState], key: tuple[str, str, str, str],
                   instant: datetime) -> str | None:
    """The fact of this key among a functional timeline's `values` whose interval holds `instant`: a value
    asserted again inside its own past interval corroborates it instead of cutting it."""
    for fact in values:
        if state.key_for(*fact.key) == key and timelines.holds_at(fact.valid_from, fact.valid_to, instant):
            return fact.fact_id
    return None


def _reachable(state: Ontology, slot: tuple[str, str, str], start: datetime) -> list[FactState]:
    """The values of a functional timeline a value starting at `start` can reach. The current value is the one
    that starts last, so when it starts at or before `start` it is the only one (every other ends before it
    starts): the common case, a new value after the current one, reads one fact, not the slot's history."""
    current_id = state.functional_current.get(slot)
    if current_id is not None:
        current = state.facts[current_id]
        if current.status is FactStatus.CURRENT and not timelines.starts_before(start, current.valid_from):
            return timelines.timeline(state.facts, [current_id])
    return timelines.timeline(state.facts, state.slots.get(slot, []))


def _assert_value(state: Ontology, cmd: c.Command, now: datetime, key: tuple[str, str, str, str],
                  functional: bool, fields: dict[str, object], start: datetime, end: datetime | None,
                  provenance: Provenance, reachable: list[FactState] | None = None
                  ) -> tuple[list[DomainEvent], FactAsserted, bool]:
    """Assert a new value; under a functional relation, place it into its timeline (domain/timelines.py).
    Returns the events, the new fact's assertion, and whether it is current."""
    new_id = _new_fact_id(state, cmd.tenant, key)
    if not functional:
        asserted = validated(FactAsserted, {**fields, "fact_id": new_id, "valid_from": start, "valid_to": end})
        return [asserted], asserted, True
    slot = (str(fields["subject"]), str(fields["relation"]), str(fields["scope"]))
    if reachable is None:
        reachable = _reachable(state, slot, start)
    plan = timelines.place(reachable, new_id, start, end, placed_is_new=True, placed_current=False)
    remainder_id = _remainder_id(state, cmd, plan, taken=new_id)
    events = _neighbour_events(state, cmd, now, plan, remainder_id, provenance, fields)
    events += _remainder_events(state, cmd, now, plan, remainder_id, new_id, provenance)
    placed = plan.placed
    supersedes = plan.previous_current if placed.current and plan.previous_current else plan.left
    asserted = validated(FactAsserted, {**fields, "fact_id": new_id, "valid_from": start, "valid_to": placed.end,
                                   "supersedes": supersedes})
    events.append(asserted)
    if not placed.current:
        follower = _real(placed.superseded_by, remainder_id)
        events.append(FactInvalidated(
            **_base(cmd, now), fact_id=new_id, superseded_by=follower, provenance=provenance,
            reason=f"placed before the current value: {fields['relation']} -> {fields['object']} holds until "
                   f"{_when(placed.end)}"))
    return events, asserted, placed.current


def _when(moment: datetime | None) -> str:
    return "further notice" if moment is None else moment.isoformat()


def _real(fact_id: str | None, remainder_id: str | None) -> str | None:
    return remainder_id if fact_id == timelines.REMAINDER else fact_id


def _new_fact_id(state: Ontology, tenant: str, key: tuple[str, str, str, str], taken: str | None = None) -> str:
    """The id of the next fact asserted anew for `key`: numbered by how many were asserted for it before, past any
    id the tenant already holds (a log written before remainders of corrections were numbered this way has
    some) and past `taken` (an id the same write asserts first)."""
    generation = state.generations.get(key, 0)
    while (fact_id := fact_id_for(tenant, key, generation)) in state.facts or fact_id == taken:
        generation += 1
    return fact_id


def _remainder_id(state: Ontology, cmd: c.Command, plan: timelines.Plan, taken: str | None = None) -> str | None:
    """The id of the new fact that continues a neighbour split by a placed or corrected value. `taken`: the id of a
    value the same write asserts anew (a corrected fact takes none: it keeps its own)."""
    if plan.remainder is None:
        return None
    split = state.facts[str(plan.remainder.split_from)]
    return _new_fact_id(state, cmd.tenant, state.key_for(*split.key), taken)


def _neighbour_events(state: Ontology, cmd: c.Command, now: datetime, plan: timelines.Plan,
                      remainder_id: str | None, provenance: Provenance, placed: dict[str, object]
                      ) -> list[DomainEvent]:
    """One event per neighbour the placement cut, moved, emptied or took the current place from."""
    events: list[DomainEvent] = []
    what = f"{placed['relation']} -> {placed['object']} holds from {_when(plan.placed.start)}"
    for entry in plan.changed:
        fact = state.facts[entry.fact_id]
        new_from = entry.start if entry.start != fact.valid_from else None
        new_to = entry.end if entry.end != fact.valid_to else None
        follower = _real(entry.superseded_by, remainder_id)
        if fact.status is FactStatus.CURRENT and not entry.current:
            events.append(FactInvalidated(**_base(cmd, now), fact_id=fact.fact_id, reason=f"superseded: {what}",
                                          valid_to=new_to, superseded_by=follower, provenance=provenance))
            if new_from is not None:
                events.append(FactCorrected(**_base(cmd, now), fact_id=fact.fact_id, reason=f"cut: {what}",
                                            valid_from=new_from, provenance=provenance))
            continue
        new_follower = follower if not entry.current and follower != fact.superseded_by else None
        if new_from is not None or new_to is not None or new_follower is not None:
            events.append(FactCorrected(**_base(cmd, now), fact_id=fact.fact_id, reason=f"cut: {what}",
                                        valid_from=new_from, valid_to=new_to, superseded_by=new_follower,
                                        provenance=provenance))
    return events


def _remainder_events(state: Ontology, cmd: c.Command, now: datetime, plan: timelines.Plan,
                      remainder_id: str | None, placed_id: str, provenance: Provenance) -> list[DomainEvent]:
    """A neighbour the placed value splits continues after it as a new fact of the same value (its source's
    claim: the original provenance and confidence; no copy of its reason, which is sealed with that fact)."""
    remainder = plan.remainder
    if remainder is None or remainder_id is None:
        return []
    split = state.facts[str(remainder.split_from)]
    events: list[DomainEvent] = [FactAsserted(
        **_base(cmd, now), fact_id=remainder_id, subject=split.subject, relation=split.relation,
        object=split.object, scope=split.scope, reason=None, confidence=split.confidence,
        valid_from=remainder.start, valid_to=remainder.end, provenance=split.provenance[0], supersedes=placed_id)]
    if not remainder.current:
        events.append(FactInvalidated(**_base(cmd, now), fact_id=remainder_id,
                                      reason=split.ended_reason or f"continues {split.fact_id}",
                                      superseded_by=_real(remainder.superseded_by, remainder_id),
                                      provenance=provenance))
    return events


def _promotion(state: Ontology, cmd: c.Command, now: datetime, fact: FactAsserted | FactState,
               source_ids: list[str], cause: str) -> list[DomainEvent]:
    """Promotion is the only path across scopes: a new org-scoped fact, placed by the same rules as any
    assertion (a functional relation's org value is superseded or cut), and the event that says why."""
    relation = state.relation(fact.relation)
    org_key = state.key_for(fact.subject, fact.relation, fact.object, "org", relation)
    start = fact.valid_from or (fact.asserted_at if isinstance(fact, FactState) else now)
    reachable = _reachable(state, (fact.subject, fact.relation, "org"), start) if relation.functional else None
    if org_key in state.current_by_key or (reachable and _value_holding(state, reachable, org_key, start)):
        return []
    confidence = 0.0
    for source_id in source_ids:
        source_confidence = fact.confidence if source_id == fact.fact_id else state.facts[source_id].confidence
        confidence = corroborated_confidence(confidence, source_confidence)
    provenance = Provenance(actor="promotion", event_id=cmd.event_id)
    fields = {"tenant": cmd.tenant, "recorded_at": now, "event_id": cmd.event_id, "subject": fact.subject,
              "relation": fact.relation, "object": fact.object, "scope": "org", "reason": f"promoted: {cause}",
              "confidence": confidence, "provenance": provenance}
    events, asserted, _current = _assert_value(state, cmd, now, org_key, relation.functional, fields, start,
                                               fact.valid_to, provenance, reachable)
    events.append(FactPromoted(**_base(cmd, now), promoted_fact_id=asserted.fact_id,
                               source_fact_ids=tuple(source_ids), to_scope="org", cause=cause))
    return events


@_decide.register
def promote_fact(cmd: c.PromoteFact, state: Ontology, now: datetime) -> list[DomainEvent]:
    fact = state.require_fact(cmd.fact_id)
    if fact.status is not FactStatus.CURRENT:
        raise FactNotCurrent(fact.fact_id, fact.status.value, fact.superseded_by)
    if fact.scope == "org":
        raise InvalidInput(f"fact {fact.fact_id} is already org-scoped", field="fact_id")
    _fact_not_forgotten(state, fact, None, "fact_id")  # (its org copy would name the person anew)
    events = _promotion(state, cmd, now, fact, [fact.fact_id], f"approved by {cmd.approved_by}")
    if not events:
        raise InvalidInput(f"an org-scoped copy of fact {fact.fact_id} already holds", field="fact_id")
    return events


@_decide.register
def merge_entities(cmd: c.MergeEntities, state: Ontology, now: datetime) -> list[DomainEvent]:
    merged = state.require_entity(cmd.merged_ref, "merged_ref")
    state.require_entity(cmd.into_ref, "into_ref")
    if cmd.merged_ref == cmd.into_ref:
        raise InvalidInput("an entity cannot be merged into itself", field="into_ref")
    if merged.merged_into is not None:
        raise InvalidInput(f"{cmd.merged_ref} was already merged into {merged.merged_into}", field="merged_ref")
    return [EntitiesMerged(**_base(cmd, now), merged_ref=cmd.merged_ref, into_ref=cmd.into_ref, reason=cmd.reason)]


@_decide.register
def keep_entity(cmd: c.KeepEntity, state: Ontology, now: datetime) -> list[DomainEvent]:
    entity = state.require_entity(cmd.ref, "ref")
    if not entity.needs_review:
        return []
    return [EntityUpdated(**_base(cmd, now), ref=entity.ref, label=entity.label, aliases=entity.aliases,
                          hub=entity.hub, needs_review=False)]


@_decide.register
def start_consolidation(cmd: StartConsolidation, state: Ontology, now: datetime) -> list[DomainEvent]:
    compaction = _compaction(state, cmd.compaction_id)
    state.require_session_not_forgotten(compaction.session_id, "compaction_id")
    if compaction.status is ConsolidationStatus.COMPLETED:
        raise InvalidInput(f"compaction {cmd.compaction_id} is already consolidated", field="compaction_id")
    return [ConsolidationStarted(**_base(cmd, now), compaction_id=cmd.compaction_id,
                                 session_id=compaction.session_id, extractor=cmd.extractor,
                                 attempt=compaction.attempts + 1)]


@_decide.register
def complete_consolidation(cmd: CompleteConsolidation, state: Ontology, now: datetime) -> list[DomainEvent]:
    compaction = _compaction(state, cmd.compaction_id)
    state.require_session_not_forgotten(compaction.session_id, "compaction_id")
    if compaction.status is not ConsolidationStatus.RUNNING:
        raise InvalidInput(f"compaction {cmd.compaction_id} is {compaction.status.value}, not running",
                           field="compaction_id")
    return [ConsolidationCompleted(**_base(cmd, now), compaction_id=cmd.compaction_id,
                                   session_id=compaction.session_id, counts=cmd.counts,
                                   rejections=cmd.rejections)]


@_decide.register
def fail_consolidation(cmd: FailConsolidation, state: Ontology, now: datetime) -> list[DomainEvent]:
    compaction = _compaction(state, cmd.compaction_id)
    state.require_session_not_forgotten(compaction.session_id, "compaction_id")
    return [ConsolidationFailed(**_base(cmd, now), compaction_id=cmd.compaction_id,
                                session_id=compaction.session_id, reason=cmd.reason,
                                attempt=compaction.attempts)]


def _compaction(state: Ontology, compaction_id: str) -> CompactionState:
    compaction = state.compactions.get(compaction_id)
    if compaction is None:
        raise InvalidInput(f"no compaction {compaction_id!r}", field="compaction_id")
    return compaction


def _named_fact(state: Ontology, cmd: c.InvalidateFact | c.CorrectFact) -> tuple[FactState, str]:
    """The fact a command names, and the field that named it (what a rejection points at): by `fact_id`, or
    by (subject, relation, object, scope): the current fact with that key, else the one asserted last."""
    if cmd.fact_id is not None:
        return state.require_fact(cmd.fact_id), "fact_id"
    assert cmd.subject and cmd.relation and cmd.object  # guaranteed by the command's validator
    key = state.key_for(cmd.subject, cmd.relation, cmd.object, cmd.scope)
    fact_id = state.current_by_key.get(key)
    if fact_id is not None:
        return state.facts[fact_id], "subject"
    latest = _latest_for_key(state, key)
    if latest is None:
        raise UnknownFact(f"{cmd.subject} -{cmd.relation}-> {cmd.object} in scope {cmd.scope}", field="subject")
    return latest, "subject"


def _fact_not_forgotten(state: Ontology, fact: FactState, source: c.Source | None, named_by: str) -> None:
    """An invalidation or correction carries a reason sealed with the fact's key: refused, like an assertion,
    for a fact about a forgotten person or one of the sessions that served them."""
    if state.forgotten_people:
        _not_forgotten(state, (fact.subject, named_by), (fact.object, named_by), (fact.scope, named_by))
        _not_from_forgotten_sessions(state, fact.scope, source)


@_decide.register
def invalidate_fact(cmd: c.InvalidateFact, state: Ontology, now: datetime) -> list[DomainEvent]:
    fact, named_by = _named_fact(state, cmd)
    _fact_not_forgotten(state, fact, cmd.source, named_by)
    if fact.status is FactStatus.INVALIDATED and cmd.valid_to is not None and timelines.ends_after(
            fact.valid_to, cmd.valid_to):
        # An earlier end for a fact already ended: a correction of its interval (transaction time keeps the old).
        if fact.valid_from is not None and cmd.valid_to <= fact.valid_from:
            raise InvalidInput(f"valid_to {cmd.valid_to.isoformat()} is not after the fact's valid_from "
                               f"{fact.valid_from.isoformat()}", field="valid_to")
        return [FactCorrected(**_base(cmd, now), fact_id=fact.fact_id, reason=cmd.reason, valid_to=cmd.valid_to,
                              provenance=_provenance(cmd, cmd.source))]
    if fact.status is not FactStatus.CURRENT:
        hint = "; name an earlier valid_to to correct its end" if fact.status is FactStatus.INVALIDATED else ""
        raise FactNotCurrent(fact.fact_id, fact.status.value, fact.superseded_by, field=named_by, hint=hint)
    valid_to = cmd.valid_to or cmd.occurred_at or now
    if fact.valid_from is not None and valid_to <= fact.valid_from:
        said = "valid_to" if cmd.valid_to else "occurred_at, the default valid_to," if cmd.occurred_at else (
            "the recorded time, the default valid_to,")
        raise InvalidInput(
            f"{said} {valid_to.isoformat()} is not after the fact's valid_from {fact.valid_from.isoformat()}",
            field="valid_to",
        )
    if fact.valid_to is not None and valid_to > fact.valid_to:
        valid_to = fact.valid_to  # an invalidation ends a fact, it never extends it: a later end is cut back
    return [FactInvalidated(**_base(cmd, now), fact_id=fact.fact_id, reason=cmd.reason, valid_to=valid_to,
                            provenance=_provenance(cmd, cmd.source))]


@_decide.register
def correct_fact(cmd: c.CorrectFact, state: Ontology, now: datetime) -> list[DomainEvent]:
    fact, named_by = _named_fact(state, cmd)
    _fact_not_forgotten(state, fact, cmd.source, named_by)
    if fact.status is FactStatus.ARCHIVED:
        raise FactNotCurrent(fact.fact_id, fact.status.value, field=named_by,
                             hint="; an archived fact is restored before it is corrected")
    start = fact.valid_from if cmd.valid_from is None else cmd.valid_from
    end = fact.valid_to if cmd.valid_to is None else cmd.valid_to
    if start is not None and end is not None and end <= start:
        raise InvalidInput(f"the corrected interval [{_when(start)}, {_when(end)}) is empty: valid_to must be "
                           "after valid_from", field="valid_to" if cmd.valid_to is not None else "valid_from")
    if (start, end) == (fact.valid_from, fact.valid_to):
        return []
    provenance = _provenance(cmd, cmd.source)
    if not state.relation(fact.relation).functional:
        return [FactCorrected(**_base(cmd, now), fact_id=fact.fact_id, reason=cmd.reason, valid_from=cmd.valid_from,
                              valid_to=cmd.valid_to, provenance=provenance)]
    slot = (fact.subject, fact.relation, fact.scope)
    plan = timelines.place(timelines.timeline(state.facts, state.slots.get(slot, []), exclude=fact.fact_id),
                           fact.fact_id, start, end, placed_is_new=False,
                           placed_current=fact.status is FactStatus.CURRENT)
    remainder_id = _remainder_id(state, cmd, plan)
    fields = {"relation": fact.relation, "object": fact.object}
    events = _neighbour_events(state, cmd, now, plan, remainder_id, provenance, fields)
    placed = plan.placed
    events.append(FactCorrected(**_base(cmd, now), fact_id=fact.fact_id, reason=cmd.reason,
                                valid_from=placed.start if placed.start != fact.valid_from else None,
                                valid_to=placed.end if placed.end != fact.valid_to else None, provenance=provenance))
    if fact.status is FactStatus.CURRENT and not placed.current:
        events.append(FactInvalidated(**_base(cmd, now), fact_id=fact.fact_id, reason=cmd.reason,
                                      superseded_by=_real(placed.superseded_by, remainder_id),
                                      provenance=provenance))
    events += _remainder_events(state, cmd, now, plan, remainder_id, fact.fact_id, provenance)
    return events


def _latest_for_key(state: Ontology, key: tuple[str, str, str, str]) -> FactState | None:
    slots = {(key[0], key[1], key[3]), (key[2], key[1], key[3])}  # (a symmetric fact's subject is either end)
    matches = [state.facts[i] for slot in slots for i in state.slots.get(slot, ())
               if state.key_for(*state.facts[i].key) == key]
    return max(matches, key=lambda f: f.asserted_at) if matches else None


@_decide.register
def archive_fact(cmd: c.ArchiveFact, state: Ontology, now: datetime) -> list[DomainEvent]:
    fact = state.require_fact(cmd.fact_id)
    if fact.status is not FactStatus.CURRENT:
        raise FactNotCurrent(fact.fact_id, fact.status.value, fact.superseded_by)
    return [FactArchived(**_base(cmd, now), fact_id=fact.fact_id, cause=cmd.cause)]


@_decide.register
def restore_fact(cmd: c.RestoreFact, state: Ontology, now: datetime) -> list[DomainEvent]:
    fact = state.require_fact(cmd.fact_id)
    if fact.status is not FactStatus.ARCHIVED:
        raise InvalidInput(f"fact {fact.fact_id} is {fact.status.value}, only archived facts are restored",
                           field="fact_id")
    if state.current_by_key.get(state.key_for(*fact.key)) is not None:
        raise InvalidInput(f"fact {fact.fact_id} has a current successor; it cannot be restored", field="fact_id")
    blocker = restore_blocker(state, fact)
    if blocker is not None:
        raise InvalidInput(f"fact {fact.fact_id} cannot be restored: its timeline moved on ({blocker.relation} ->"
                           f" {blocker.object} from {_when(blocker.valid_from)}); assert the value again instead",
                           field="fact_id")
    return [FactRestored(**_base(cmd, now), fact_id=fact.fact_id, cause=cmd.cause)]


def restore_blocker(state: Ontology, fact: FactState) -> FactState | None:
    """For a functional relation: a value of the archived fact's timeline that overlaps it or starts after it
    (restoring it would make two values hold at once, or a past value current). None: it can be restored."""
    if not state.relation(fact.relation).functional:
        return None
    for other in timelines.timeline(state.facts, state.slots.get((fact.subject, fact.relation, fact.scope), []),
                                    exclude=fact.fact_id):
        if timelines.overlaps(other.valid_from, other.valid_to, fact.valid_from, fact.valid_to) or (
                timelines.starts_before(fact.valid_from, other.valid_from)):
            return other
    return None


@_decide.register
def start_session(cmd: c.StartSession, state: Ontology, now: datetime) -> list[DomainEvent]:
    state.require_entity(cmd.agent, "agent")
    if cmd.serving is not None:
        state.require_entity(cmd.serving, "serving")
        state.require_not_forgotten(cmd.serving, "serving")
    if cmd.parent_session_id is not None:
        state.require_session(cmd.parent_session_id, "parent_session_id")
        state.require_session_not_forgotten(cmd.parent_session_id, "parent_session_id")
    existing = state.sessions.get(cmd.session_id)
    if existing is not None:
        same = (existing.agent, existing.kind, existing.serving, existing.parent_session_id) == (
            cmd.agent, cmd.kind, cmd.serving, cmd.parent_session_id)
        if same:
            return []
        raise SessionConflict(f"session {cmd.session_id!r} already exists with other attributes",
                              field="session_id")
    events: list[DomainEvent] = []
    ref = f"session:{cmd.session_id}"
    if ref not in state.entities:
        # A neutral label: the task is content (sealed with the session), a label is structure.
        events.append(EntityRegistered(**_base(cmd, now), ref=ref, label=f"{cmd.kind.value} session "
                                       f"{cmd.session_id}"[:500]))
    events.append(SessionStarted(**_base(cmd, now), session_id=cmd.session_id, agent=cmd.agent, kind=cmd.kind,
                                 serving=cmd.serving, parent_session_id=cmd.parent_session_id, task=cmd.task,
                                 occurred_at=cmd.occurred_at))
    return events


def _live_session(state: Ontology, session_id: str, field_name: str = "session_id"):  # type: ignore[no-untyped-def]
    session = state.require_session(session_id, field_name)
    if session.ended:
        raise SessionAlreadyEnded(session_id)
    state.require_session_not_forgotten(session_id, field_name)
    return session


@_decide.register
def append_message(cmd: c.AppendMessage, state: Ontology, now: datetime) -> list[DomainEvent]:
    session = _live_session(state, cmd.session_id)
    first = session.message_ids.get(cmd.message_id)
    if first is not None:
        # A message is named by its session and message_id. The same message again (same role and content),
        # under any event_id, is a repeat, as a session started again with the same attributes is; another
        # message under a message_id already used is a conflict, never silently dropped.
        if first[1] == message_fingerprint(cmd.role, cmd.content):
            return []
        by = f"event {first[0]!r}" if first[0] is not None else "an input without an event_id"
        raise SessionConflict(f"message_id {cmd.message_id!r} of session {cmd.session_id!r} was appended by {by}; "
                              f"event {cmd.event_id!r} reuses it with another role or content (a new message "
                              "needs a new message_id)", field="message_id")
    return [validated(MessageAppended, {"tenant": cmd.tenant, "recorded_at": now, "event_id": cmd.event_id,
                                   "session_id": cmd.session_id, "message_id": cmd.message_id, "role": cmd.role,
                                   "content": cmd.content, "occurred_at": cmd.occurred_at})]


@_decide.register
def dispatch_worker(cmd: c.DispatchWorker, state: Ontology, now: datetime) -> list[DomainEvent]:
    main = _live_session(state, cmd.session_id)
    for i, ref in enumerate(cmd.about):
        state.require_entity(ref, f"about[{i}]")
        state.require_not_forgotten(ref, f"about[{i}]")
    events: list[DomainEvent] = []
    worker = state.sessions.get(cmd.worker_session_id)
    if worker is not None and worker.parent_session_id not in (None, main.session_id):
        raise SessionConflict(f"worker {cmd.worker_session_id!r} belongs to another main session",
                              field="worker_session_id")
    ref = f"session:{cmd.worker_session_id}"
    if ref not in state.entities:
        events.append(EntityRegistered(**_base(cmd, now), ref=ref,
                                       label=f"worker session {cmd.worker_session_id}"[:500]))
    events.append(WorkerDispatched(**_base(cmd, now), session_id=cmd.session_id,
                                   worker_session_id=cmd.worker_session_id, task=cmd.task, about=cmd.about,
                                   occurred_at=cmd.occurred_at))
    return events


@_decide.register
def report_worker(cmd: c.ReportWorker, state: Ontology, now: datetime) -> list[DomainEvent]:
    worker = _live_session(state, cmd.session_id)
    if worker.kind is not SessionKind.WORKER:
        raise InvalidInput(f"session {cmd.session_id!r} is a main session; only workers report",
                           field="session_id")
    for i, ref in enumerate(cmd.about):
        state.require_entity(ref, f"about[{i}]")
    return [WorkerReported(**_base(cmd, now), session_id=cmd.session_id, status=cmd.status,
                           summary=cmd.summary, about=cmd.about, occurred_at=cmd.occurred_at)]


@_decide.register
def compact_session(cmd: c.CompactSession, state: Ontology, now: datetime) -> list[DomainEvent]:
    state.require_session(cmd.session_id)
    state.require_session_not_forgotten(cmd.session_id, "session_id")
    return [SessionCompacted(**_base(cmd, now), session_id=cmd.session_id,
                             through_message_id=cmd.through_message_id, summary=cmd.summary,
                             mentions=cmd.mentions, facts=cmd.facts, invalidations=cmd.invalidations,
                             occurred_at=cmd.occurred_at)]


@_decide.register
def end_session(cmd: c.EndSession, state: Ontology, now: datetime) -> list[DomainEvent]:
    session = state.require_session(cmd.session_id)
    if session.ended:
        return []
    events: list[DomainEvent] = [SessionEnded(**_base(cmd, now), session_id=cmd.session_id,
                                              occurred_at=cmd.occurred_at)]
    # Session memory dies with the session unless promoted: archived (hidden), never deleted.
    for fact_id in sorted(state.facts_by_scope.get(f"session:{cmd.session_id}", ())):
        if state.facts[fact_id].status is FactStatus.CURRENT:
            events.append(FactArchived(**_base(cmd, now), fact_id=fact_id, cause="session ended"))
    return events


@_decide.register
def record_recall(cmd: c.RecordRecall, state: Ontology, now: datetime) -> list[DomainEvent]:
    state.require_entity(cmd.agent, "agent")
    for i, fact_id in enumerate(cmd.fact_ids):
        if fact_id not in state.facts:
            raise UnknownFact(fact_id, field=f"fact_ids[{i}]")
    return [FactsRecalled(**_base(cmd, now), agent=cmd.agent, fact_ids=tuple(dict.fromkeys(cmd.fact_ids)),
                          mode=cmd.mode, perspective_id=cmd.perspective_id)]


@_decide.register
def record_coalesced_recalls(cmd: c.RecordCoalescedRecalls, state: Ontology, now: datetime) -> list[DomainEvent]:
    kept: dict[tuple[str, str, int], c.ServedUse] = {}
    for i, use in enumerate(cmd.uses):
        state.require_entity(use.agent, f"uses[{i}].agent")
        if use.fact_id not in state.facts:
            raise UnknownFact(use.fact_id, field=f"uses[{i}].fact_id")
        bucket = hour_bucket(use.at.timestamp())
        key = (use.agent, use.fact_id, bucket)
        if key in kept:
            continue
        earlier = state.recall_uses.get(use.fact_id, {}).get(use.agent, ())
        if any(hour_bucket(t.timestamp()) == bucket for t in reversed(earlier)):
            continue  # this hour already holds a use of the fact by the agent
        kept[key] = use
    if not kept:
        return []
    since = min(use.at for use in kept.values()).replace(microsecond=0)
    groups: dict[tuple[str, RecallMode], list[c.ServedUse]] = {}
    for use in kept.values():
        groups.setdefault((use.agent, use.mode), []).append(use)
    uses = tuple(AgentUses(agent=agent, mode=mode, fact_ids=tuple(u.fact_id for u in group),
                           seconds=tuple(int((u.at - since).total_seconds()) for u in group))
                 for (agent, mode), group in groups.items())
    return [RecallsCoalesced(**_base(cmd, now), since=since, uses=uses)]


@_decide.register
def record_forgetting(cmd: c.RecordForgetting, state: Ontology, now: datetime) -> list[DomainEvent]:
    kind, _, rest = cmd.subject.partition(":")
    if kind in ("person", "memory"):
        state.require_entity(cmd.subject, "subject")
    elif kind == "session":
        state.require_session(rest, "subject")
    elif rest not in state.facts:
        raise UnknownFact(rest, field="subject")
    return [SubjectForgotten(**_base(cmd, now), subject=cmd.subject, keys_deleted=cmd.keys_deleted,
                             receipt_id=cmd.receipt_id, erased_with=cmd.erased_with)]
