"""The read side of one application: its perspective engine and, over this process's own perspective engine, the
search and context engines that share its indexes and its lock. Built by infra/bootstrap.py, handed to the
application (as its ports) and to readiness (which warms the same instances)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from domain.ports import CommandRunner, Embedder, EventLog, PerspectiveEngine
from infra.runtime.context_engine import EngineContexts
from infra.runtime.perspective_engine import EnginePerspectives
from infra.runtime.search_engine import EngineSearches


@dataclass(frozen=True)
class ReadSide:
    perspectives: PerspectiveEngine
    searches: EngineSearches | None = None
    """None over an engine not built from the log (a benchmark's): no search or context over it."""
    contexts: EngineContexts | None = None


def read_side(perspectives: PerspectiveEngine, service: CommandRunner, log: EventLog, clock: Callable[[], datetime],
              embedder: Callable[[], Embedder | None], wait_seconds: float = 30.0) -> ReadSide:
    """`wait_seconds`: how long a search or context of a tenant whose search index a forget dropped waits for it."""
    if not isinstance(perspectives, EnginePerspectives):
        return ReadSide(perspectives)
    searches = EngineSearches(perspectives, clock, embedder, wait_seconds)
    return ReadSide(perspectives, searches, EngineContexts(perspectives, service, log, clock, searches))
