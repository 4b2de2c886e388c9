"""The search port's adapter: projections/searches.py beside the perspective engine of the process.

Its indexes follow the same log as the perspective engine's `Perspectives` (and are folded again with them after
a forget, when the engine is replaced); it serializes on the same lock, since a search reads those indexes.
One adapter per application, made on first use.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from domain.search import SearchAnswer
from infra.bootstrap import utc_now
from infra.embedders import embedder_from
from projections.perspectives import Perspectives
from projections.searches import Searches, UnknownSearch

_ADAPTERS: weakref.WeakKeyDictionary[Any, EngineSearches] = weakref.WeakKeyDictionary()
_MAKING = threading.Lock()


class EngineSearches:
    """Every call is scoped to the caller's tenant; another tenant's search id is simply unknown."""

    def __init__(self, memory: Any) -> None:
        self._memory = memory
        self._embedder = embedder_from(memory.settings)
        self._engine: Any = None
        self._searches: Searches | None = None
        self._fallback: Perspectives | None = None

    @property
    def searches(self) -> Searches:
        """The search service on the perspective engine's current `Perspectives` (a forget replaces it)."""
        engine = self._memory.perspectives
        perspectives = getattr(engine, "engine", None)
        if not isinstance(perspectives, Perspectives):
            if self._fallback is None:
                self._fallback = Perspectives(self._memory.noumena.log, self._memory.service,
                                              self._memory.settings.home, utc_now)
            perspectives = self._fallback
        if self._searches is None or self._searches.perspectives is not perspectives:
            self._searches = Searches(perspectives, self._memory.service, self._memory.settings.home, utc_now,
                                      embedder=self._embedder)
        return self._searches

    def lock(self) -> Any:
        return getattr(self._memory.perspectives, "_lock", None) or threading.Lock()

    def search(self, tenant: str, agent: str, query: str, serving: str | None = None,
               session_id: str | None = None, k: int | None = None, as_of: datetime | None = None,
               about: Sequence[str] = ()) -> SearchAnswer:
        with self.lock():
            return self.searches.search_for(tenant, agent, query, serving=serving, session_id=session_id, k=k,
                                             as_of=as_of, about=about)

    def explain(self, tenant: str, search_id: str) -> SearchAnswer:
        served = self.searches.explain(search_id)
        if served.tenant != tenant:
            raise UnknownSearch(search_id)
        return served


def searches_of(memory: Any) -> EngineSearches:
    """The adapter of this application (built once)."""
    with _MAKING:
        adapter = _ADAPTERS.get(memory)
        if adapter is None:
            adapter = _ADAPTERS[memory] = EngineSearches(memory)
        return adapter
