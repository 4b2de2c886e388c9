"""Archiving by disuse: facts whose activation stayed below the threshold for every agent are hidden from
perspectives (never deleted); a deeper recall brings them back.

With the tiers' salience (the default, docs/perspectives.md), only episodic facts are archived by disuse, and
their disuse is measured in their person's own sessions since the last use: an org fact leaves by supersession
or invalidation, never by time, and a session fact ends with its session."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime, timedelta

from domain import commands as c
from domain.activation import DEFAULT_PARAMETERS, ActivationParameters, base_level, use_weight
from domain.application.ontology_service import OntologyService
from domain.errors import DomainError
from domain.facts import FactState
from domain.ontology import Ontology

DISUSE_CAUSE = "disuse"


def _uses(state: Ontology, fact: FactState, agent: str | None) -> list[float]:
    uses = [fact.asserted_at.timestamp()]
    for who, times in state.recall_uses.get(fact.fact_id, {}).items():
        if agent is None or who == agent:
            uses += [t.timestamp() for t in times]
    return uses


def disused_facts(state: Ontology, now: datetime, period: timedelta,
                  parameters: ActivationParameters = DEFAULT_PARAMETERS) -> list[FactState]:
    """Current facts whose activation stayed at or below tau for every agent throughout the last `period`.

    Bound used: the activation an agent would give the fact if it stood right beside it — its base level from
    that agent's uses, plus ln(confidence), plus S, plus ln(hop factor) (one hop from a sole source). Between
    uses B only falls (with tiers, as the person's sessions go by), so "below tau for the whole period" means: no
    use within the period, and that bound was already <= tau when the period began.
    """
    start = (now - period).timestamp()
    agents = {None} | {a for uses in state.recall_uses.values() for a in uses}
    tiers = parameters.salience == "tiers"
    episodes: dict[str, list[float]] = {}
    if tiers:
        for session in state.sessions.values():
            if session.serving:
                episodes.setdefault(session.serving, []).append(session.started_at.timestamp())
    disused = []
    for fact in state.current_facts():
        if fact.scope.startswith("session:"):
            continue  # session memory ends with its session, not by disuse
        if tiers and not fact.scope.startswith("person:"):
            continue  # semantic memory leaves by supersession or invalidation, never by time
        if any(t > start for t in _uses(state, fact, None)):
            continue
        if tiers:
            person = [e for e in episodes.get(fact.scope, []) if e <= start]
            bound = max(_episodic_base(parameters, person, _uses(state, fact, agent)) for agent in agents)
        else:
            bound = max(base_level(parameters, start, _uses(state, fact, agent)) for agent in agents)
        best_case = (bound + math.log(max(fact.confidence, 1e-9)) + parameters.associative_strength
                     + math.log(parameters.hop_factor))
        if best_case <= parameters.threshold:
            disused.append(fact)
    return disused


def _episodic_base(parameters: ActivationParameters, episodes: list[float], uses: list[float]) -> float:
    """B of an episodic fact (tiers): each use weighs (1 + the person's `episodes` after it)^-d."""
    total = sum(use_weight(parameters, sum(1 for e in episodes if e > t)) for t in uses)
    return math.log(total) if total > 0 else -math.inf


def archive_disused(service: OntologyService, tenant: str, now: datetime, period: timedelta,
                    parameters: ActivationParameters = DEFAULT_PARAMETERS) -> list[str]:
    """Archive (hide, never delete) every disused fact; returns their ids."""
    with service.writing(tenant) as state:  # (the facts found and their archiving in one hold of the lock)
        facts = disused_facts(state, now, period, parameters)
        result = service.execute_batch([c.ArchiveFact(tenant=tenant, fact_id=f.fact_id, cause=DISUSE_CAUSE)
                                        for f in facts], all_or_nothing=True) if facts else None
    if result is not None:
        errors: Sequence[DomainError] = [o.error for o in result.outcomes if o.error is not None]
        if errors:
            raise errors[0]
    return [f.fact_id for f in facts]
