"""The read model's views (tenant-wide keys): a fact's versions, the graph as it was believed, a session; and the
live workers of a session, the log's end and how far the read model follows it."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from domain.access import Caller
from domain.application.use_cases.core import Core
from domain.application.use_cases.results import fact_dict
from domain.sessions import SessionState, workers_for


class Views:
    def __init__(self, core: Core) -> None:
        self._core = core

    def fact(self, who: Caller | str, fact_id: str, min_position: int | None = None
             ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """One fact's versions and changes (tenant-wide keys)."""
        tenant = self._core.tenant_wide(who, "reading facts by id")
        self._core.fresh(tenant, min_position)
        return self._core.require_read_model().fact_history(tenant, fact_id)

    def graph(self, who: Caller | str, recorded_at: datetime | None, valid_at: datetime | None, skip: int,
              limit: int, min_position: int | None = None) -> tuple[list[dict[str, Any]], int]:
        """The facts believed at `recorded_at` (tenant-wide keys)."""
        tenant = self._core.tenant_wide(who, "reading the graph")
        self._core.fresh(tenant, min_position)
        return self._core.require_read_model().graph_as_of(tenant, recorded_at, valid_at, skip, limit)

    def session(self, who: Caller | str, session_id: str, min_position: int | None = None
                ) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        """A session and its workers (tenant-wide keys)."""
        tenant = self._core.tenant_wide(who, "reading sessions")
        self._core.fresh(tenant, min_position)
        return self._core.require_read_model().session(tenant, session_id)

    def current_facts(self, who: Caller | str, subject: str) -> list[dict[str, Any]]:
        """The current facts about `subject` as they are now in the folded state, as plain data (tenant-wide
        keys)."""
        tenant = self._core.tenant_wide(who, "reading facts")
        with self._core.service.reading(tenant) as state:
            return [fact_dict(fact) for fact in state.current_facts() if fact.subject == subject]

    def workers(self, who: Caller | str, session_id: str, about: str | None = None, live_only: bool = True
                ) -> list[SessionState]:
        """The workers of a main session (the live ones by default), about `about` if given, newest first."""
        tenant = self._core.tenant_wide(who, "listing workers")
        with self._core.service.reading(tenant) as state:
            return workers_for(state, session_id, about, live_only)

    def log_position(self) -> int:
        """The last position in the event log."""
        return self._core.log.max_position()

    def read_model_progress(self) -> tuple[int, int] | None:
        """The read model's position and its lag behind the log (None: this process runs no projector)."""
        read_model = self._core.read_model
        return None if read_model is None else (read_model.position, read_model.lag())
