"""Consolidation ("sleep"): fold a compacted session's extraction into the ontology, atomically, and the worker
that runs it in the background when `session.compacted` arrives (from Kafka, HTTP or a file).

The log is the source of truth: the worker consolidates every pending compaction of the signalled tenant, so a
signal lost in a crash is made up by the next one, or by `noumena consolidation run`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from pydantic import ValidationError

from domain import commands as c
from domain.application.compaction_signal import CompactionSignal
from domain.application.ontology_service import BatchResult, OntologyService, Outcome
from domain.commands import CompactSession
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
from domain.errors import InvalidInput, SubjectWasForgotten
from domain.facts import FactAsserted, FactCorroborated, FactInvalidated
from domain.ontology import Ontology
from domain.resolution import NameIndex, Resolution, ResolvedBy, resolve
from domain.sessions import SessionState

log = logging.getLogger(__name__)


@dataclass
class ConsolidationReport:
    compaction_id: str
    status: ConsolidationStatus
    counts: dict[str, int] = field(default_factory=dict)
    rejections: list[str] = field(default_factory=list)
    resolutions: list[Resolution] = field(default_factory=list)
    reason: str | None = None


def pending_compactions(state: Ontology) -> list[CompactionState]:
    """Compactions not yet consolidated: pending, or left running by a process that died. Not those of sessions
    that served a forgotten person: their content was erased with the person, and nothing drawn from it is
    written any more."""
    return [k for k in state.compactions.values()
            if k.status in (ConsolidationStatus.PENDING, ConsolidationStatus.RUNNING)
            and not _erased(state, k.session_id)]


def _erased(state: Ontology, session_id: str) -> bool:
    try:
        state.require_session_not_forgotten(session_id, "session_id")
    except SubjectWasForgotten:
        return True
    return False


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
                                             needs_review=resolution.needs_review, session_id=session.session_id))
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

    The state is read under the service's lock (`reading`: the input, then the plan together with its write),
    never while the extractor runs (an LLM may take seconds).
    """
    with service.reading(tenant) as state:  # (the input only: never while the extractor runs)
        compaction = state.compactions.get(compaction_id)
        if compaction is None:
            raise InvalidInput(f"no compaction {compaction_id!r} in tenant {tenant!r}", field="compaction_id")
        if compaction.status is ConsolidationStatus.COMPLETED:
            raise InvalidInput(f"compaction {compaction_id} is already consolidated", field="compaction_id")
        work = compaction_input(state, compaction)
    start = StartConsolidation(tenant=tenant, compaction_id=compaction_id, extractor=extractor.name)
    try:
        extraction = extractor.extract(work)
    except (ExtractionFailed, ValidationError, ValueError) as error:
        reason = f"{extractor.name} extractor failed: {error}"
        _raise_first(service.execute_batch(
            [start, FailConsolidation(tenant=tenant, compaction_id=compaction_id, reason=reason[:5000])],
            all_or_nothing=True))
        return ConsolidationReport(compaction_id, ConsolidationStatus.FAILED, reason=reason)
    counts: dict[str, int] = {}
    rejections: list[str] = []

    def complete(outcomes: list[Outcome]) -> c.Command:
        rejections.clear()  # (called again if a concurrent writer forces a retry)
        counts.update(_count(outcomes[1:], rejections))
        return CompleteConsolidation(tenant=tenant, compaction_id=compaction_id, counts=counts,
                                     rejections=tuple(r[:1000] for r in rejections[:100]))

    with service.writing(tenant) as state:  # (the plan and its write together)
        commands, resolutions = plan_consolidation(state, state.compactions[compaction_id], extraction,
                                                   extractor.name)
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


class ConsolidationWorker:
    """Runs consolidations, one at a time per process: on request, for what is pending, and in the background
    for `session.compacted` commands that ingestion signals (`signal`, started on first use)."""

    def __init__(self, service: OntologyService, extractor: Extractor, tenants: Callable[[], Iterable[str]]
                 ) -> None:
        self.service = service
        self.extractor = extractor
        self._tenants = tenants
        self._lock = threading.Lock()
        self._signal: CompactionSignal | None = None
        self._resuming: threading.Thread | None = None

    def run_pending(self, tenant: str) -> list[ConsolidationReport]:
        """Consolidate every pending compaction of the tenant, oldest first."""
        with self._lock:
            with self.service.reading(tenant) as state:
                pending = [k.compaction_id for k in pending_compactions(state)]
            reports = []
            for compaction_id in pending:
                try:
                    reports.append(consolidate(self.service, tenant, compaction_id, self.extractor))
                except SubjectWasForgotten as error:  # its person was forgotten meanwhile: refused, and done
                    log.info("consolidation %s not written: %s", compaction_id, error)
            return reports

    def retry(self, tenant: str, compaction_id: str) -> ConsolidationReport:
        with self._lock:
            return consolidate(self.service, tenant, compaction_id, self.extractor)

    def handle(self, command: CompactSession) -> None:
        """The CompactionSignal handler (runs on its background thread)."""
        for report in self.run_pending(command.tenant):
            if report.reason:
                log.warning("consolidation %s failed: %s", report.compaction_id, report.reason)

    def start(self) -> CompactionSignal:
        """Start the background thread (once; later calls return it): a pass over what a previous process left
        pending, then whatever ingestion signals."""
        if self._signal is None:
            self._signal = CompactionSignal(self.handle)
            self._resuming = threading.Thread(target=self.resume, name="noumena-consolidation-resume", daemon=True)
            self._resuming.start()
        return self._signal

    @property
    def signal(self) -> CompactionSignal:
        """The callback every ingestion path passes on: stored `session.compacted` commands start consolidation
        on a background thread (started on first use), so ingestion never waits for it."""
        return self.start()

    def resume(self) -> int:
        """Consolidate what a previous process left pending (the log is the source of truth). Returns how many."""
        done = 0
        for tenant in self._tenants():
            try:
                done += len(self.run_pending(tenant))
            except Exception:  # a bad tenant must not stop the others; it stays pending, visible in `list`
                log.exception("resuming consolidation for %s failed", tenant)
        return done

    def close(self, drain_seconds: float = 30.0) -> None:
        """Finish queued consolidations (bounded) and stop the background thread."""
        if self._resuming is not None:
            self._resuming.join(drain_seconds)  # it reads the store: let it finish before the store closes
        if self._signal is not None:
            self._signal.drain(drain_seconds)
            self._signal.close()
