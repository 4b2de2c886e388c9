"""Use cases that span several commands: consolidation, merging entities, tier-aware recall, workers,
and archiving by disuse. Pure orchestration over the service; the extractor is a port."""

from __future__ import annotations

import math
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from pydantic import ValidationError

from domain import commands as c
from domain.activation import DEFAULT_PARAMETERS, ActivationParameters, base_level
from domain.consolidation import (
    CompactionInput,
    CompactionState,
    CompleteConsolidation,
    ConsolidationStatus,
    Extraction,
    ExtractionFailed,
    Extractor,
    FailConsolidation,
    StartConsolidation,
)
from domain.errors import DomainError, InvalidInput, UnknownTenant
from domain.facts import FactAsserted, FactCorroborated, FactInvalidated, FactState, FactStatus
from domain.forgetting import ForgetPlan, check_subject, forget_plan
from domain.ontology import Ontology
from domain.ports import KeyStore
from domain.recalls import RecallMode
from domain.resolution import NameIndex, Resolution, ResolvedBy, resolve
from domain.rules import decide
from domain.service import BatchResult, OntologyService, Outcome
from domain.sessions import LIVE_WORKER_STATUSES, SessionKind, SessionState
from domain.values import check_identifier, check_ref, check_relation, checked

# ------------------------------------------------------------------------------------------ consolidation


@dataclass
class ConsolidationReport:
    compaction_id: str
    status: ConsolidationStatus
    counts: dict[str, int] = field(default_factory=dict)
    rejections: list[str] = field(default_factory=list)
    resolutions: list[Resolution] = field(default_factory=list)
    reason: str | None = None


def pending_compactions(state: Ontology) -> list[CompactionState]:
    """Compactions not yet consolidated: pending, or left running by a process that died."""
    return [k for k in state.compactions.values()
            if k.status in (ConsolidationStatus.PENDING, ConsolidationStatus.RUNNING)]


def _default_scope(session: SessionState) -> str:
    """Where extracted facts live when they say nothing: the person served (episodic), else the session."""
    if session.serving and session.serving.startswith("person:"):
        return session.serving
    return f"session:{session.session_id}"


def plan_consolidation(state: Ontology, compaction: CompactionState, extraction: Extraction, extractor: str
                       ) -> tuple[list[c.Command], list[Resolution]]:
    """The commands that fold an extraction into the ontology: entities for new or ambiguous mentions (never a
    silent merge), then assertions and invalidations with refs resolved and provenance to the messages."""
    session = state.sessions[compaction.session_id]
    names = NameIndex(state)
    commands: list[c.Command] = []
    resolutions: list[Resolution] = []
    refs: dict[str, str] = {}
    base = {"tenant": state.tenant}
    for i, mention in enumerate(extraction.mentions):
        resolution = resolve(state, names, mention.ref, mention.label)
        resolutions.append(resolution)
        refs[mention.ref] = resolution.ref
        if resolution.by in (ResolvedBy.NEW, ResolvedBy.AMBIGUOUS) and mention.ref not in state.entities:
            commands.append(c.RegisterEntity(**base, event_id=f"{compaction.compaction_id}/entity/{i}",
                                             ref=mention.ref, label=mention.label,
                                             needs_review=resolution.needs_review))
            names.add(mention.ref, [mention.label])
    default_scope = _default_scope(session)
    actor = f"consolidation:{extractor}"
    for i, fact in enumerate(extraction.facts):
        scope = fact.scope or default_scope
        if scope == "org" and not extraction.explicit:
            scope = default_scope
        commands.append(c.AssertFact(
            **base, event_id=f"{compaction.compaction_id}/fact/{i}",
            subject=refs.get(fact.subject, fact.subject), relation=fact.relation,
            object=refs.get(fact.object, fact.object), reason=fact.reason, confidence=fact.confidence,
            valid_from=fact.valid_from, valid_to=fact.valid_to, scope=scope,
            source=c.Source(session_id=session.session_id,
                            message_ids=tuple(fact.message_ids) or (compaction.through_message_id,), actor=actor),
        ))
    for i, invalidation in enumerate(extraction.invalidations):
        commands.append(c.InvalidateFact(
            **base, event_id=f"{compaction.compaction_id}/invalidation/{i}",
            subject=refs.get(invalidation.subject, invalidation.subject), relation=invalidation.relation,
            object=refs.get(invalidation.object, invalidation.object),
            scope=invalidation.scope or default_scope, reason=invalidation.reason, valid_to=invalidation.valid_to,
            source=c.Source(session_id=session.session_id, message_ids=(compaction.through_message_id,),
                            actor=actor),
        ))
    return commands, resolutions


def compaction_input(state: Ontology, compaction: CompactionState) -> CompactionInput:
    session = state.sessions[compaction.session_id]
    turns: list[tuple[str, str, str]] = []
    for turn in session.turns:
        turns.append(turn)
        if turn[0] == compaction.through_message_id:
            break
    return CompactionInput(
        tenant=state.tenant, compaction_id=compaction.compaction_id, session_id=session.session_id,
        agent=session.agent, serving=session.serving, summary=compaction.summary, mentions=compaction.mentions,
        facts=compaction.facts, invalidations=compaction.invalidations, turns=tuple(turns),
    )


def consolidate(service: OntologyService, tenant: str, compaction_id: str, extractor: Extractor
                ) -> ConsolidationReport:
    """Run one consolidation and record it atomically: `consolidation.started`, the facts, and
    `consolidation.completed` (with counts) in one write — or `started` and `failed` (with the reason).

    Facts are written only from a valid extraction; an extractor failure stores no facts and never raw chat.
    A crash before the write leaves the compaction pending, to be run again: nothing half-done is ever seen.
    """
    state = service.ontology(tenant)
    compaction = state.compactions.get(compaction_id)
    if compaction is None:
        raise InvalidInput(f"no compaction {compaction_id!r} in tenant {tenant!r}", field="compaction_id")
    if compaction.status is ConsolidationStatus.COMPLETED:
        raise InvalidInput(f"compaction {compaction_id} is already consolidated", field="compaction_id")
    start = StartConsolidation(tenant=tenant, compaction_id=compaction_id, extractor=extractor.name)
    try:
        extraction = extractor.extract(compaction_input(state, compaction))
    except (ExtractionFailed, ValidationError, ValueError) as error:
        reason = f"{extractor.name} extractor failed: {error}"
        _raise_first(service.execute_batch(
            [start, FailConsolidation(tenant=tenant, compaction_id=compaction_id, reason=reason[:5000])],
            all_or_nothing=True))
        return ConsolidationReport(compaction_id, ConsolidationStatus.FAILED, reason=reason)
    state = service.ontology(tenant)
    commands, resolutions = plan_consolidation(state, state.compactions[compaction_id], extraction, extractor.name)
    counts: dict[str, int] = {}
    rejections: list[str] = []

    def complete(outcomes: list[Outcome]) -> c.Command:
        rejections.clear()  # (called again if a concurrent writer forces a retry)
        counts.update(_count(outcomes[1:], rejections))
        return CompleteConsolidation(tenant=tenant, compaction_id=compaction_id, counts=counts,
                                     rejections=tuple(r[:1000] for r in rejections[:100]))

    batch = service.execute_batch([start, *commands], then=complete)
    _raise_first(BatchResult([batch.outcomes[0], batch.outcomes[-1]], batch.positions))
    return ConsolidationReport(compaction_id, ConsolidationStatus.COMPLETED, counts, rejections, resolutions)


def _count(outcomes: list[Outcome], rejections: list[str]) -> dict[str, int]:
    counts = {"entities_created": 0, "needs_review": 0, "asserted": 0, "corroborated": 0, "invalidated": 0,
              "repeats": 0, "rejected": 0}
    for outcome in outcomes:
        if outcome.error is not None:
            counts["rejected"] += 1
            rejections.append(f"{type(outcome.command).__name__}: {outcome.error}")
            continue
        if not outcome.events:
            counts["repeats"] += 1
        for event in outcome.events:
            if isinstance(event, FactAsserted):
                counts["asserted"] += 1
            elif isinstance(event, FactCorroborated):
                counts["corroborated"] += 1
            elif isinstance(event, FactInvalidated):
                counts["invalidated"] += 1
        if isinstance(outcome.command, c.RegisterEntity) and outcome.events:
            counts["entities_created"] += 1
            counts["needs_review"] += int(outcome.command.needs_review)
    return counts


def _raise_first(result: BatchResult) -> None:
    for outcome in result.outcomes:
        if outcome.error is not None:
            raise outcome.error


# ------------------------------------------------------------------------------------------ entities


def merge_entities(service: OntologyService, tenant: str, merged_ref: str, into_ref: str,
                   reason: str = "reviewed: same entity", actor: str = "review") -> int:
    """Merge `merged_ref` into `into_ref` in one atomic write: the merge event, then each current fact of the
    merged entity ended and asserted again on the surviving entity (corroborating where it already holds).
    Returns how many facts moved."""
    state = service.ontology(tenant)
    moving = [f for f in state.current_facts() if merged_ref in (f.subject, f.object)]
    commands: list[c.Command] = [c.MergeEntities(tenant=tenant, merged_ref=merged_ref, into_ref=into_ref,
                                                 reason=reason)]
    for fact in moving:
        subject = into_ref if fact.subject == merged_ref else fact.subject
        obj = into_ref if fact.object == merged_ref else fact.object
        commands.append(c.InvalidateFact(tenant=tenant, fact_id=fact.fact_id, reason=f"moved: {merged_ref} was "
                                         f"merged into {into_ref}"))
        if subject == obj:
            continue  # a relation between the two names of one thing says nothing
        commands.append(c.AssertFact(tenant=tenant, subject=subject, relation=fact.relation, object=obj,
                                     reason=fact.reason, confidence=fact.confidence, valid_from=fact.valid_from,
                                     valid_to=fact.valid_to, scope=into_ref if fact.scope == merged_ref
                                     else fact.scope, source=c.Source(actor=actor)))
    result = service.execute_batch(commands, all_or_nothing=True)
    for outcome in result.outcomes:
        if outcome.error is not None:
            raise outcome.error
    return len(moving)


# ------------------------------------------------------------------------------------------ recall by tier


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
    state = service.ontology(tenant)
    state.require_entity(agent, "agent")
    wanted = {FactStatus.CURRENT, FactStatus.ARCHIVED} if deeper else {FactStatus.CURRENT}
    for tier, scopes in _tier_scopes(state, agent, serving, session_id):
        found = [f for f in state.facts.values()
                 if f.scope in scopes and f.status in wanted and (f.subject == subject or f.object == subject)
                 and (relation is None or f.relation == relation)
                 and (f.status is FactStatus.CURRENT or f.ended_reason == DISUSE_CAUSE)]
        if not found:
            continue
        found.sort(key=lambda f: f.asserted_at, reverse=True)
        restored = [f.fact_id for f in found if f.status is FactStatus.ARCHIVED]
        commands: list[c.Command] = [c.RestoreFact(tenant=tenant, fact_id=fid, cause="recalled by a deeper look")
                                     for fid in restored]
        commands.append(c.RecordRecall(tenant=tenant, agent=agent, fact_ids=tuple(f.fact_id for f in found),
                                       mode=RecallMode.DEEPENED if deeper else RecallMode.LOOKED_UP))
        service.execute_batch(commands, all_or_nothing=True)
        return RecallAnswer(tier, found, restored)
    return RecallAnswer(None, [])


# ------------------------------------------------------------------------------------------ workers


def workers_for(state: Ontology, main_session_id: str, about: str | None = None, live_only: bool = True
                ) -> list[SessionState]:
    """The workers of a main session (the live ones by default), about `about` if given, newest first."""
    main = state.require_session(main_session_id)
    workers = [state.sessions[w] for w in main.workers if w in state.sessions]
    if live_only:
        workers = [w for w in workers if w.status in LIVE_WORKER_STATUSES and not w.ended]
    if about is not None:
        workers = [w for w in workers if about in w.about]
    return list(reversed(workers))


# ------------------------------------------------------------------------------------------ disuse

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
    uses B only falls, so "below tau for the whole period" means: no use within the period, and that bound was
    already <= tau when the period began.
    """
    start = (now - period).timestamp()
    agents = {None} | {a for uses in state.recall_uses.values() for a in uses}
    disused = []
    for fact in state.current_facts():
        if fact.scope.startswith("session:"):
            continue  # session memory ends with its session, not by disuse
        if any(t > start for t in _uses(state, fact, None)):
            continue
        bound = max(base_level(parameters, start, _uses(state, fact, agent)) for agent in agents)
        best_case = (bound + math.log(max(fact.confidence, 1e-9)) + parameters.associative_strength
                     + math.log(parameters.hop_factor))
        if best_case <= parameters.threshold:
            disused.append(fact)
    return disused


def archive_disused(service: OntologyService, tenant: str, now: datetime, period: timedelta,
                    parameters: ActivationParameters = DEFAULT_PARAMETERS) -> list[str]:
    """Archive (hide, never delete) every disused fact; returns their ids."""
    facts = disused_facts(service.ontology(tenant), now, period, parameters)
    if facts:
        result = service.execute_batch([c.ArchiveFact(tenant=tenant, fact_id=f.fact_id, cause=DISUSE_CAUSE)
                                        for f in facts], all_or_nothing=True)
        errors: Sequence[DomainError] = [o.error for o in result.outcomes if o.error is not None]
        if errors:
            raise errors[0]
    return [f.fact_id for f in facts]


# ------------------------------------------------------------------------------------------ forgetting


@dataclass
class ForgetReport:
    subject: str
    keys_deleted: int
    position: int | None
    receipt_id: str = ""
    erased_with: tuple[str, ...] = ()
    recorded_at: datetime | None = None
    events_affected: int | None = None
    """Stored events whose content the deleted keys sealed (counted by the infrastructure, which reads them)."""
    files_rewritten: list[str] = field(default_factory=list)
    """Files outside the log rewritten without the content (evidence, projections, exports): by the caller."""


def forget(service: OntologyService, keys: KeyStore, tenant: str, subject: str) -> ForgetReport:
    """Forget a subject for real: delete its keys (first, and for real), then record `SubjectForgotten` (no
    content; a receipt id and what else was erased) while the key store still holds every sealed write off, so
    no write of any process lands between the deletion and the event; then drop the folded state, which may
    still hold the now-unreadable content."""
    try:
        check_subject(subject)
    except ValueError as error:
        raise InvalidInput(str(error), field="subject") from None
    state = service.ontology(tenant)
    if not state.exists:
        raise UnknownTenant(tenant)
    receipt_id = f"fgt-{uuid.uuid4().hex[:20]}"
    probe = c.RecordForgetting(tenant=tenant, subject=subject, keys_deleted=0, receipt_id=receipt_id)
    decide(state, probe, datetime.now(UTC))  # the subject must exist: checked before any key is deleted
    planned: list[ForgetPlan] = []
    outcomes: list[Outcome] = []

    def plan() -> ForgetPlan:
        planned.append(forget_plan(service.ontology(tenant), subject))
        return planned[-1]

    def record(deleted: int) -> None:
        erased_with = planned[-1].owners if planned else ()
        outcomes.append(service.execute(probe.model_copy(update={"keys_deleted": deleted,
                                                                 "erased_with": erased_with})))

    with service.exclusive():  # (no write of this process meanwhile; other processes' wait for the key store)
        # What to delete besides the subject's own keys comes from the ontology: one fact's group siblings keep
        # their keys, a person takes the memories linked to them along, and the sessions that served them. The
        # key store works the plan out with every sealed write held off, so no fact written meanwhile is missed.
        deleted = keys.forget(tenant, subject, plan, record)
    service.reload(tenant)
    position, recorded_at = None, None
    outcome = outcomes[0] if outcomes else None
    if outcome is not None and outcome.events:
        position, recorded_at = service.last_position, outcome.events[-1].recorded_at
    return ForgetReport(subject, deleted, position, receipt_id, planned[-1].owners if planned else (), recorded_at)
