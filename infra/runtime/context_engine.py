"""The context port's adapter (domain/ports.py `ContextEngine`): projections/contexts.py beside the perspective
engine of the process.

It shares the perspective engine's `Perspectives` (its per-tenant indexes) and serializes on the same lock, since
assembling a context walks those indexes; the search engine's `Searches` recalls facts by the message's content.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING

from domain.context import Context
from domain.ports import CommandRunner, EventLog
from infra.runtime.perspective_engine import EnginePerspectives
from infra.runtime.search_engine import EngineSearches

if TYPE_CHECKING:
    from projections.contexts import Contexts


class EngineContexts:
    """Every call is scoped to the caller's tenant; another tenant's context id is simply unknown."""

    def __init__(self, perspectives: EnginePerspectives, service: CommandRunner, log: EventLog,
                 clock: Callable[[], datetime], searches: EngineSearches | None = None) -> None:
        self._perspectives = perspectives
        self._searches = searches

        def build() -> Contexts:
            from projections.contexts import Contexts

            return Contexts(perspectives.engine, service, log, clock,
                            searches=searches.searches if searches is not None else None)

        self._build = build
        self._contexts: Contexts | None = None
        perspectives.on_forgotten.append(self._drop_replaced)

    def _drop_replaced(self) -> None:
        """After a forget: a context service built on a replaced perspective engine holds folded state and names
        read before it; drop it now rather than on the next request."""
        contexts = self._contexts
        if contexts is not None and contexts.perspectives is not self._perspectives.engine:
            self._contexts = None

    @property
    def contexts(self) -> Contexts:
        engine = self._perspectives.engine
        if self._contexts is None or self._contexts.perspectives is not engine:  # (reloaded after a forget)
            self._contexts = self._build()
        return self._contexts

    def context(self, tenant: str, session_id: str, message: str | None, budget_tokens: int | None) -> Context:
        if self._perspectives.gate is not None:
            self._perspectives.gate(tenant)
        contexts = self.contexts
        if self._searches is not None and contexts.searches is not None:
            self._searches.wait_seeded(contexts.searches, tenant)
        with self._perspectives.lock:
            return contexts.context_for(tenant, session_id, message, budget_tokens=budget_tokens)

    def reproduce(self, served: Context) -> Context:
        return self.contexts.reproduce(served)
