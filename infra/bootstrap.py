"""The composition root: builds everything from settings. Nothing connects to anything at import time."""

from __future__ import annotations

import gc
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from domain.service import OntologyService
from infra.eventlog import EventsourcingLog
from infra.settings import Settings


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass
class Noumena:
    """Everything a process needs, wired once."""

    settings: Settings
    log: EventsourcingLog
    service: OntologyService

    def close(self) -> None:
        self.log.close()


def bootstrap(settings: Settings | None = None, clock: Callable[[], datetime] = utc_now) -> Noumena:
    """Build a Noumena from settings (the environment by default). `clock` is transaction time's source."""
    settings = settings or Settings()
    # The folded ontology is a large, long-lived heap of small objects: the default GC thresholds would
    # rescan it every few hundred allocations. Collect young objects far less often.
    gc.set_threshold(50_000, 20, 100)
    log = EventsourcingLog(settings.event_store_env())
    return Noumena(settings=settings, log=log, service=OntologyService(log, clock=clock))
