"""Tier-aware recall: facts about a subject from the nearest memory tier that has any (session, then the
person served, then the organization), recorded as recalled."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from domain import commands as c
from domain.application.disuse import DISUSE_CAUSE
from domain.application.ontology_service import OntologyService
from domain.facts import FactState, FactStatus
from domain.ontology import Ontology
from domain.recalls import RecallMode
from domain.rules import restore_blocker
from domain.sessions import SessionKind
from domain.values import check_identifier, check_ref, check_relation, checked


class MemoryTier(StrEnum):
    SESSION = "session"
    EPISODIC = "episodic"
    SEMANTIC = "semantic"


@dataclass
class RecallAnswer:
    tier: MemoryTier | None
    facts: list[FactState]
    restored: list[str] = field(default_factory=list)


def _tier_scopes(state: Ontology, agent: str, serving: str | None, session_id: str | None
                 ) -> list[tuple[MemoryTier, set[str]]]:
    sessions: set[str] = set()
    if session_id is not None:
        sessions.add(f"session:{session_id}")
    else:
        sessions |= {f"session:{s.session_id}" for s in state.sessions.values()
                     if s.agent == agent and s.serving == serving and not s.ended and s.kind is SessionKind.MAIN}
    tiers = [(MemoryTier.SESSION, sessions)]
    if serving is not None:
        tiers.append((MemoryTier.EPISODIC, {serving}))
    tiers.append((MemoryTier.SEMANTIC, {"org"}))
    return tiers


def recall(service: OntologyService, tenant: str, agent: str, serving: str | None, subject: str,
           relation: str | None = None, session_id: str | None = None, deeper: bool = False) -> RecallAnswer:
    """Answer from the nearest tier — session, then episodic (the person served), then semantic (org) — and
    say which tier answered. The facts found are recorded as recalled (mode looked_up, or deepened).
    A deeper recall also looks at archived facts, and brings back those archived for disuse."""
    for name, value, check in (("agent", agent, check_ref), ("subject", subject, check_ref),
                               ("serving", serving, check_ref), ("relation", relation, check_relation),
                               ("session_id", session_id, check_identifier)):
        if value is not None:
            checked(check, value, name)
    wanted = {FactStatus.CURRENT, FactStatus.ARCHIVED} if deeper else {FactStatus.CURRENT}
    # (the search and the recall it records in one hold of the lock: what is recorded is what was found)
    with service.writing(tenant) as state:
        state.require_entity(agent, "agent")
        for tier, scopes in _tier_scopes(state, agent, serving, session_id):
            found = [f for f in state.facts.values()
                     if f.scope in scopes and f.status in wanted and (f.subject == subject or f.object == subject)
                     and (relation is None or f.relation == relation)
                     and (f.status is FactStatus.CURRENT or f.ended_reason == DISUSE_CAUSE)]
            if not found:
                continue
            found.sort(key=lambda f: f.asserted_at, reverse=True)
            # (an archived value of a functional relation whose timeline moved on stays archived: restore_blocker)
            restored = [f.fact_id for f in found
                        if f.status is FactStatus.ARCHIVED and restore_blocker(state, f) is None]
            commands: list[c.Command] = [c.RestoreFact(tenant=tenant, fact_id=fid, cause="recalled by a deeper look")
                                         for fid in restored]
            commands.append(c.RecordRecall(tenant=tenant, agent=agent, fact_ids=tuple(f.fact_id for f in found),
                                           mode=RecallMode.DEEPENED if deeper else RecallMode.LOOKED_UP))
            service.execute_batch(commands, all_or_nothing=True)
            return RecallAnswer(tier, found, restored)
    return RecallAnswer(None, [])
