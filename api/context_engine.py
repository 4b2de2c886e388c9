"""The context port's adapter: projections/contexts.py (issue 9) beside the perspective engine of the process.

It shares the perspective engine's `Perspectives` (its per-tenant indexes) and serializes on the same lock, since
assembling a context walks those indexes. One adapter per application, made on first use.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from domain.context import Context
from infra.bootstrap import utc_now
from projections.contexts import Contexts, UnknownContext
from projections.perspectives import Perspectives

_ADAPTERS: weakref.WeakKeyDictionary[Any, EngineContexts] = weakref.WeakKeyDictionary()
_MAKING = threading.Lock()


class EngineContexts:
    """Every call is scoped to the caller's tenant; another tenant's context id is simply unknown."""

    def __init__(self, memory: Any) -> None:
        engine = memory.perspectives
        perspectives = getattr(engine, "engine", None)
        if not isinstance(perspectives, Perspectives):
            perspectives = Perspectives(memory.noumena.log, memory.service, memory.settings.home, utc_now)
        # the perspective adapter's lock: both walk the same in-place indexes
        self._lock = getattr(engine, "_lock", None) or threading.Lock()
        from api.search_engine import searches_of

        searches = searches_of(memory)
        self._searches = searches
        self.contexts = Contexts(perspectives, memory.service, memory.noumena.log, memory.settings.home, utc_now,
                                 searches=searches.searches)

    def context(self, tenant: str, session_id: str, message: str | None, budget_tokens: int | None) -> Context:
        with self._lock:
            return self.contexts.context_for(tenant, session_id, message, budget_tokens=budget_tokens)

    def explain(self, tenant: str, context_id: str) -> Context:
        served = self.contexts.explain(context_id)
        if served.tenant != tenant:
            raise UnknownContext(context_id)
        return served


def contexts_of(memory: Any) -> EngineContexts:
    """The adapter of this application (built once)."""
    with _MAKING:
        adapter = _ADAPTERS.get(memory)
        if adapter is None:
            adapter = _ADAPTERS[memory] = EngineContexts(memory)
        return adapter
