"""What goes into a context: the scopes a session may see, the hard constraints (current constraint facts
touching the anchors) and the focus (mentions in the message, live workers' subjects, recent turns)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from domain.context.model import ContextParameters
from domain.facts import FactState, FactStatus
from domain.ontology import Ontology
from domain.sessions import SessionState


def visible_scopes(session: SessionState) -> set[str]:
    """org, the served person's scope, and this session's scope: nothing of other sessions or persons."""
    scopes = {"org", f"session:{session.session_id}"}
    if session.serving and session.serving.startswith("person:"):
        scopes.add(session.serving)
    return scopes


def holds_at(fact: FactState, moment: datetime) -> bool:
    """Current in the log and, where the source gave valid time, valid at `moment`."""
    if fact.status is not FactStatus.CURRENT:
        return False
    if fact.valid_from is not None and fact.valid_from > moment:
        return False
    return fact.valid_to is None or fact.valid_to > moment


@dataclass
class ConstraintIndex:
    """Entity ref -> ids of facts with a constraint relation touching it (any status: filtered when read)."""

    relations: frozenset[str]
    by_entity: dict[str, set[str]] = field(default_factory=dict)

    @classmethod
    def from_ontology(cls, state: Ontology, relations: Iterable[str]) -> ConstraintIndex:
        index = cls(frozenset(relations))
        for fact in state.facts.values():
            index.add(fact.fact_id, fact.subject, fact.relation, fact.object)
        return index

    def add(self, fact_id: str, subject: str, relation: str, obj: str) -> None:
        if relation in self.relations:
            self.by_entity.setdefault(subject, set()).add(fact_id)
            self.by_entity.setdefault(obj, set()).add(fact_id)

    def candidates(self, anchors: Iterable[str]) -> set[str]:
        found: set[str] = set()
        for ref in anchors:
            found |= self.by_entity.get(ref, set())
        return found


def select_constraints(state: Ontology, session: SessionState, anchors: Iterable[str], moment: datetime,
                       index: ConstraintIndex) -> list[FactState]:
    """The hard constraints: current constraint facts touching an anchor, in a scope this session may see.
    Nearest scope first (session, person, org), then oldest first."""
    scopes = visible_scopes(session)
    facts = [state.facts[i] for i in index.candidates(anchors) if i in state.facts]
    chosen = [f for f in facts if f.scope in scopes and holds_at(f, moment)]
    nearness = {"session": 0, "person": 1, "org": 2}
    return sorted(chosen, key=lambda f: (nearness.get(f.scope.split(":", 1)[0], 3), f.asserted_at, f.fact_id))


def choose_focus(message_refs: Sequence[tuple[str, str]], worker_refs: Sequence[tuple[str, str]],
                 turn_refs: Sequence[tuple[str, str]], exclude: Iterable[str], parameters: ContextParameters
                 ) -> list[tuple[str, str]]:
    """(ref, where found) in priority order, without repeats or the viewer itself, at most `max_focus`."""
    skip = set(exclude)
    chosen: dict[str, str] = {}
    workers = worker_refs if parameters.focus_from_live_workers else ()
    for ref, where in (*message_refs, *workers, *turn_refs):
        if ref and ref not in skip and ref not in chosen and len(chosen) < parameters.max_focus:
            chosen[ref] = where
    return list(chosen.items())
