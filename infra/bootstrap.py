"""The composition root: builds every adapter from settings and wires the application layer to them.

Only entry points (api/: the HTTP app, the CLI, the MCP server) and tests import this module; nothing connects to
anything at import time. `bootstrap()` gives a process its parts (`Noumena`); `serve()` adds what `noumena serve`
runs beside the HTTP API: the projector (and reads by query through it) and the Kafka consumer.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_random_exponential

from consumers.ports import ConsumerPorts
from domain.application.application import Application
from domain.application.compaction_signal import CompactionSignal
from domain.application.consolidation import ConsolidationWorker
from domain.application.ontology_service import OntologyService
from domain.application.recall_buffer import RecallBuffer
from domain.application.use_cases.core import ApplicationSettings
from domain.consolidation import CompositeExtractor, Extractor, StructuredPayloadExtractor
from domain.ports import ApiKeys, BatchResult, PerspectiveEngine, VersionConflict
from infra.adapters.eventlog import EventsourcingLog
from infra.adapters.evidence import EvidenceStore
from infra.adapters.state_snapshots import FileStateSnapshots
from infra.runtime.engines import ReadSide, read_side
from infra.runtime.perspective_engine import build_perspective_engine
from infra.runtime.private import make_private
from infra.runtime.state_snapshotter import SnapshotterProcess
from infra.settings import Settings, for_another_process

if TYPE_CHECKING:  # (the projector and the read side are imported when a process first uses them)
    from domain.events import DomainEvent
    from infra.runtime.readiness import Warmup
    from infra.runtime.serving import FollowedReadModel, KafkaFollower, ProjectionFollower
    from projections.source import RawLog

log = logging.getLogger(__name__)


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass
class Noumena:
    """The parts of one process, wired once: what an entry point holds, uses through `application`, and closes."""

    settings: Settings
    log: EventsourcingLog
    service: OntologyService
    consolidation: ConsolidationWorker
    application: Application
    recalls: RecallBuffer
    evidence: EvidenceStore
    engines: ReadSide
    """The engines `application` serves its reads from."""
    snapshots: FileStateSnapshots
    """The tenants' state snapshots (what is stored, the snapshotter process): for tests, benchmarks, operators."""
    clock: Callable[[], datetime] = field(default=utc_now, repr=False)

    def projection_source(self) -> RawLog:
        """The stored records the read models fold (read only): what projection commands hand to projections/,
        which follow the log itself rather than the application."""
        return self.log

    def events(self) -> list[DomainEvent]:
        """Every event of the log in order, decoded (read only): what an analyst folds, as the demo does to tell
        what was believed when."""
        return [logged.event for logged in self.log.read(0, self.log.max_position())]

    def consumer_ports(self) -> ConsumerPorts:
        """What a Kafka consumer or the dead-letter tools get: the application's ingestor, the positions they
        tracked, the key store that seals their dead letters, the settings, and consolidation's signal."""
        return ConsumerPorts(settings=self.settings, ingestor=self.application.ingestor,
                             tracked_position=self.log.tracked_position, keys=self.log.keys,
                             on_stored=self.on_stored)

    @property
    def on_stored(self) -> CompactionSignal:
        """What ingestion calls after a write: stored compactions start consolidation in the background."""
        return self.consolidation.signal

    def close(self, drain_seconds: float = 30.0) -> None:
        """Finish queued consolidations (bounded), write the uses served reads made, then close the stores."""
        self.consolidation.close(drain_seconds)
        self.recalls.close()  # (before the state snapshots, so they hold the uses)
        self.service.close()  # (snapshots of the tenants' state, for a fast restart)
        self.evidence.close()
        self.log.close()


@dataclass
class ProjectionCopies:
    """The `CopiesOutsideTheLog` port: the evidence store, import rejects files and the DuckDB files of
    projections/ in the home, and the sealed events a forget made unreadable."""

    log: EventsourcingLog
    home: Path
    evidence: EvidenceStore
    def erase(self, tenant: str, subjects: Sequence[str]) -> list[str]:
        from consumers.file_import import redact_rejects

        rewritten = {"evidence": self.evidence.erase(tenant),  # copies outside the log
                     "import rejects": redact_rejects(self.home, tenant, tuple(subjects))}
        return [f"{what}: {count}" for what, count in rewritten.items()]

    def events_affected(self, tenant: str | None = None) -> tuple[int | None, list[int]]:
        # (counted and found by key name in the store, in SQL: this process's interpreter sees each distinct key
        # name once and the positions found, never the events)
        return self.log.sealed_with(sorted(getattr(self.log.keys, "deleted", ())), tenant=tenant, positions=True)

    def purge(self) -> int | None:
        from projections.purge import purge_projections

        return purge_projections(self.log, self.home)


def bootstrap(settings: Settings | None = None, clock: Callable[[], datetime] = utc_now) -> Noumena:
    """Build a process's parts from settings (the environment by default). `clock` is transaction time's source.
    The application reads no read model here (no projector runs): `serve()` adds one."""
    settings = settings or Settings()
    make_private(settings.home)
    keys = settings.key_store()
    log = EventsourcingLog(settings.event_store_env(), keys)
    snapshotter_settings = json.dumps({"settings": for_another_process(settings)})
    snapshots = FileStateSnapshots(settings.home, log, keys, settings.state_snapshot_every,
                                   snapshotter=None if settings.event_store == "popo" else  # (no one else reads it)
                                   partial(SnapshotterProcess, snapshotter_settings))
    service = OntologyService(log, clock=clock, seal_content=keys is not None, retries=retry_conflicts,
                              snapshots=snapshots, writer_locks=settings.tenant_write_locks())
    consolidation = ConsolidationWorker(service, extractor_from(settings), log.tenants)
    perspectives = build_perspective_engine(log, settings.home, clock)
    recalls = RecallBuffer(service, settings.recall_flush_seconds)
    evidence = EvidenceStore(settings.home / "evidence.sqlite", mode=settings.evidence,
                             max_bytes=settings.evidence_max_bytes, max_age_days=settings.evidence_max_age_days,
                             clock=clock)
    engines = read_side(perspectives, service, log, clock, lambda: embedder(settings),
                        settings.api_read_wait_seconds)
    application = _application(settings, log, service, consolidation, engines, recalls, evidence)
    return Noumena(settings=settings, log=log, service=service, consolidation=consolidation, snapshots=snapshots,
                   application=application, recalls=recalls, evidence=evidence, engines=engines, clock=clock)


def _application(settings: Settings, log: EventsourcingLog, service: OntologyService,
                 consolidation: ConsolidationWorker, engines: ReadSide, recalls: RecallBuffer,
                 evidence: EvidenceStore, read_model: FollowedReadModel | None = None) -> Application:
    return Application(
        service, log, consolidation=consolidation, perspectives=engines.perspectives,
        contexts=engines.contexts, searches=engines.searches,  # type: ignore[arg-type]  (None: a benchmark's engine)
        copies=ProjectionCopies(log, settings.home, evidence),
        evidence=evidence, recalls=recalls,
        keys=log.keys, read_model=read_model,
        settings=ApplicationSettings(read_wait_seconds=settings.api_read_wait_seconds,
                                     purge_wait_seconds=max(60.0, settings.api_read_wait_seconds),
                                     disuse_period_days=settings.disuse_period_days))


def application_reading(noumena: Noumena, follower: ProjectionFollower | None,
                        perspectives: PerspectiveEngine | None = None) -> Application:
    """The application of `noumena` with its reads by query and its perspectives following `follower` (started
    by the caller), or over `perspectives` when given."""
    return _reading(noumena, follower, perspectives)[0]


def _reading(noumena: Noumena, follower: ProjectionFollower | None, perspectives: PerspectiveEngine | None
             ) -> tuple[Application, ReadSide]:
    from infra.runtime.serving import FollowedReadModel

    if perspectives is None:
        perspectives = build_perspective_engine(noumena.log, noumena.settings.home, noumena.clock, follower)
    engines = read_side(perspectives, noumena.service, noumena.log, noumena.clock,
                        lambda: embedder(noumena.settings), noumena.settings.api_read_wait_seconds)
    application = _application(noumena.settings, noumena.log, noumena.service, noumena.consolidation, engines,
                               noumena.recalls, noumena.evidence,
                               FollowedReadModel(follower, noumena.settings.api_read_wait_seconds)
                               if follower is not None else None)
    if follower is not None:  # (the name indexes hold labels: a purge drops its tenants' at once)
        follower.on_file_cleaned.append(application.entity_names.forgotten)
    return application, engines


@dataclass
class Served:
    """What `noumena serve` runs beside the HTTP API, started by `serve()` and stopped by `stop()`."""

    application: Application
    engines: ReadSide
    """The engines `application` serves its reads from."""
    snapshots: FileStateSnapshots
    """The tenants' state snapshots (what is stored, the snapshotter process): for tests, benchmarks, operators."""
    follower: ProjectionFollower | None
    kafka: KafkaFollower | None
    warmup: Warmup | None = None
    """Readiness: caught up with the log as it was at start, every index loaded (infra/runtime/readiness.py)."""

    def stop(self) -> None:
        if self.warmup is not None:
            self.warmup.stop()
        if self.kafka is not None:
            self.kafka.stop()
        if self.follower is not None:
            self.follower.stop()


def serve(noumena: Noumena, *, projector: bool = True, kafka: bool = True,
          perspectives: PerspectiveEngine | None = None) -> Served:
    """Start the projector in this process (it owns the DuckDB file; reads by query and perspectives follow it)
    and the Kafka consumer when NOUMENA_KAFKA_BOOTSTRAP is set. `perspectives` replaces the perspective engine
    built from the log (benchmarks)."""
    from infra.runtime.readiness import Warmup
    from infra.runtime.serving import KafkaFollower, ProjectionFollower

    follower = ProjectionFollower(noumena.log, noumena.settings) if projector else None
    application, engines = noumena.application, noumena.engines
    if follower is not None or perspectives is not None:
        application, engines = _reading(noumena, follower, perspectives)
    warmup = Warmup(noumena.service, noumena.evidence, engines, follower, noumena.log.tenants,
                    to_apply=noumena.log.max_position())  # (the log's end now: what ready must reach)
    if follower is not None:
        follower.start()
    warmup.start()
    noumena.consolidation.start()
    consumer = None
    if kafka and noumena.settings.kafka_bootstrap:
        consumer = KafkaFollower(session_event_consumer(noumena))
        consumer.start()
    return Served(application, engines, noumena.snapshots, follower, consumer, warmup)


def session_event_consumer(noumena: Noumena, **options: Any) -> Any:
    """The Kafka consumer of consumers/kafka_consumer.py for this process."""
    from consumers.kafka_consumer import SessionEventConsumer

    return SessionEventConsumer(noumena.consumer_ports(), **options)


def extractor_from(settings: Settings) -> Extractor:
    """The configured extractor: the structured payload, plus an LLM when NOUMENA_EXTRACTOR=llm."""
    if settings.extractor == "llm":
        from infra.adapters.llm_extractor import LLMExtractor

        if not settings.llm_url or not settings.llm_model:
            raise ValueError("NOUMENA_EXTRACTOR=llm needs NOUMENA_LLM_URL and NOUMENA_LLM_MODEL")
        return CompositeExtractor(LLMExtractor(
            settings.llm_url, settings.llm_model, settings.llm_api_key.get_secret_value(),
            timeout_seconds=settings.llm_timeout_seconds, retries=settings.llm_retries,
        ))
    return StructuredPayloadExtractor()


def embedder(settings: Settings) -> Any:
    """The embedder `settings` configure (None: lexical search only); refuses, naming the setting, a configuration
    that cannot work (`noumena serve` asks at start)."""
    from infra.adapters.embedders import embedder_from

    return embedder_from(settings)


def api_keys(settings: Settings) -> ApiKeys:
    """The API keys of `settings`' home (or NOUMENA_API_KEYS_FILE): what authentication and `noumena keys` use."""
    from infra.adapters.api_keys import ApiKeyStore

    return ApiKeyStore(settings.api_keys_path())


WRITE_ATTEMPTS = 20
"""How many times a write that lost the race to another writer is tried again before it is refused."""


def retry_conflicts(write: Callable[[], BatchResult]) -> BatchResult:
    """The write retry policy (`WriteRetries`): after a write lost the race to another writer, try again at once,
    then after random pauses that grow with each attempt (to 50 ms), so two processes writing one tenant in tight
    loops both make progress."""
    retrying = Retrying(retry=retry_if_exception_type(VersionConflict), stop=stop_after_attempt(WRITE_ATTEMPTS),
                        wait=wait_random_exponential(multiplier=0.002, max=0.05), reraise=True)
    return retrying(write)
