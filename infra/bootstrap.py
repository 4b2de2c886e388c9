"""The composition root: builds everything from settings. Nothing connects to anything at import time."""

from __future__ import annotations

import gc
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from consumers.compaction_hook import CompactionSignal
from consumers.consolidation import ConsolidationWorker, extractor_from
from consumers.ingest import Ingestor
from domain.errors import InvalidInput
from domain.service import OntologyService
from domain.workflows import ForgetReport, forget
from infra.eventlog import EventsourcingLog
from infra.private import make_private
from infra.settings import Settings


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass
class Noumena:
    """Everything a process needs, wired once."""

    settings: Settings
    log: EventsourcingLog
    service: OntologyService
    consolidation: ConsolidationWorker
    _signal: CompactionSignal | None = field(default=None, repr=False)
    _resuming: threading.Thread | None = field(default=None, repr=False)

    @property
    def on_stored(self) -> CompactionSignal:
        """The callback every ingestion path passes on: stored `session.compacted` commands start consolidation
        on a background thread (started on first use), so ingestion never waits for it."""
        if self._signal is None:
            self._signal = CompactionSignal(self.consolidation.handle)
            self._resuming = threading.Thread(target=self.resume_consolidation, name="noumena-consolidation-resume",
                                              daemon=True)
            self._resuming.start()
        return self._signal

    def resume_consolidation(self) -> int:
        """Consolidate what a previous process left pending (the log is the source of truth). Returns how many."""
        done = 0
        for tenant in self.log.tenants():
            try:
                done += len(self.consolidation.run_pending(tenant))
            except Exception:  # a bad tenant must not stop the others; it stays pending, visible in `list`
                logging.getLogger(__name__).exception("resuming consolidation for %s failed", tenant)
        return done

    def forget(self, tenant: str, subject: str) -> ForgetReport:
        """Forget a subject for real (crypto-shredding; see domain/forgetting.py), then rewrite the copies of
        content outside the log that this process knows of: perspective, context and search evidence files and
        lines of import rejects files. The report is the forget's receipt: keys deleted, stored events affected,
        files rewritten, and the receipt id recorded in the `subject.forgotten` event."""
        if self.log.keys is None:
            raise InvalidInput("content is not encrypted here (NOUMENA_ENCRYPT_CONTENT=false): nothing can be "
                               "forgotten for real", field="subject")
        report = forget(self.service, self.log.keys, tenant, subject)
        report.events_affected = self.log.count_sealed_with(getattr(self.log.keys, "deleted", ()))
        from consumers.file_import import redact_rejects
        from projections.contexts import erase_context_evidence
        from projections.perspectives import erase_evidence
        from projections.searches import erase_search_evidence

        home = self.settings.home
        rewritten = {"perspective evidence": erase_evidence(home, tenant),  # copies outside the log
                     "context evidence": erase_context_evidence(home, tenant),
                     "search evidence": erase_search_evidence(home, tenant),
                     "import rejects": redact_rejects(home, tenant, (subject, *report.erased_with))}
        report.files_rewritten = [f"{what}: {count}" for what, count in rewritten.items()]
        return report

    def purge_projections(self) -> int | None:
        """Rebuild projections, snapshot and exports without forgotten content (see projections/purge.py)."""
        from projections.purge import purge_projections

        return purge_projections(self.log, self.settings.home)

    def ingestor(self) -> Ingestor:
        return Ingestor(self.service, on_stored=self.on_stored)

    def close(self, drain_seconds: float = 30.0) -> None:
        """Finish queued consolidations (bounded), then close the store."""
        if self._resuming is not None:
            # it reads the store: let it finish before the connections close under it
            self._resuming.join(drain_seconds)
        if self._signal is not None:
            self._signal.drain(drain_seconds)
            self._signal.close()
        self.log.close()


def bootstrap(settings: Settings | None = None, clock: Callable[[], datetime] = utc_now) -> Noumena:
    """Build a Noumena from settings (the environment by default). `clock` is transaction time's source."""
    settings = settings or Settings()
    make_private(settings.home)
    # The folded ontology is a large, long-lived heap of small objects: the default GC thresholds would
    # rescan it every few hundred allocations. Collect young objects far less often.
    gc.set_threshold(50_000, 20, 100)
    keys = settings.key_store()
    log = EventsourcingLog(settings.event_store_env(), keys)
    service = OntologyService(log, clock=clock, seal_content=keys is not None, backoff=_backoff)
    return Noumena(settings=settings, log=log, service=service,
                   consolidation=ConsolidationWorker(service, extractor_from(settings)))


def _backoff(attempt: int) -> None:
    """After a version conflict: retry at once the first time, then after a random pause that grows with each
    attempt (up to about 50 ms), so two processes writing one tenant in tight loops both make progress."""
    if attempt:
        time.sleep(random.uniform(0, min(0.05, 0.001 * 2 ** attempt)))
