"""The search port's adapter (domain/ports.py `SearchEngine`): projections/searches.py beside the perspective
engine of the process.

Its indexes follow the same log as the perspective engine's `Perspectives` (and are folded again with them after
a forget, when the engine is replaced); it serializes on the same lock, since a search reads those indexes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from domain.ports import Embedder
from domain.search import SearchAnswer
from infra.runtime.perspective_engine import EnginePerspectives

if TYPE_CHECKING:
    from projections.searches import Searches


class EngineSearches:
    """Every call is scoped to the caller's tenant; another tenant's search id is simply unknown."""

    def __init__(self, perspectives: EnginePerspectives, clock: Callable[[], datetime],
                 embedder: Callable[[], Embedder | None], wait_seconds: float = 30.0) -> None:
        self._perspectives = perspectives
        self.wait_seconds = wait_seconds
        """How long a search of a tenant whose index a forget dropped waits for it (then ProjectionBehind)."""
        self._clock = clock
        self._embedder = embedder
        self._searches: Searches | None = None
        perspectives.on_forgotten.append(self._drop_replaced)

    def _drop_replaced(self) -> None:
        """After a forget: a search service built on a replaced perspective engine holds indexes and words read
        before it; drop it now (keeping its embedder, which holds no text) rather than on the next search."""
        searches = self._searches
        if searches is not None and searches.perspectives is not self._perspectives.engine:
            self._embedder = lambda embedder=searches.embedder: embedder  # type: ignore[misc]
            self._searches = None

    def wait_seeded(self, searches: Searches, tenant: str) -> None:
        """Before taking the lock every tenant's reads share: wait for the tenant's search index when a forget
        dropped it and it is being read again from the log (else ProjectionBehind: 503, retry)."""
        if not searches.wait_seeded(tenant, self.wait_seconds):
            from domain.application.use_cases import ProjectionBehind

            raise ProjectionBehind(f"tenant {tenant!r} forgot a subject and its search index is still being rebuilt"
                                   f" (more than {self.wait_seconds:g} s); retry")

    @property
    def searches(self) -> Searches:
        """The search service on the perspective engine's current `Perspectives` (a forget replaces it)."""
        from projections.searches import Searches

        perspectives = self._perspectives.engine
        if self._searches is None or self._searches.perspectives is not perspectives:
            embedder = self._searches.embedder if self._searches is not None else self._embedder()
            self._searches = Searches(perspectives, self._clock, embedder=embedder)
        return self._searches

    def search(self, tenant: str, agent: str, query: str, serving: str | None = None,
               session_id: str | None = None, k: int | None = None, as_of: datetime | None = None,
               about: Sequence[str] = ()) -> SearchAnswer:
        if self._perspectives.gate is not None:
            self._perspectives.gate(tenant)
        searches = self.searches
        self.wait_seeded(searches, tenant)
        with self._perspectives.lock:
            return searches.search_for(tenant, agent, query, serving=serving, session_id=session_id, k=k,
                                       as_of=as_of, about=about)
