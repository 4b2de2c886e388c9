"""The perspective port's adapter: projections/perspectives.py (issue 4) behind the API's tenant rules.

One `Perspectives` per process. Its per-tenant indexes are loaded in bulk from the DuckDB read model at start
(when this process runs the projector) and then follow the log. Requests are serialized on one lock: the index
catches up and walks in place, and a walk takes milliseconds.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from domain.perspective import DEFAULT_BUDGET_TOKENS, Perspective
from infra.bootstrap import Noumena, utc_now
from infra.serving import ProjectionFollower
from projections.perspective_load import from_duckdb
from projections.perspectives import Perspectives, UnknownPerspective
from projections.read_model import clock_position


def public(perspective: Perspective) -> dict[str, Any]:
    return perspective.model_dump(mode="json")


class EnginePerspectives:
    """Every call is scoped to the caller's tenant; another tenant's perspective id is simply unknown."""

    def __init__(self, perspectives: Perspectives, *, record: bool = True,
                 reload: Callable[[], Perspectives] | None = None) -> None:
        self.engine = perspectives
        self._reload = reload
        self.record = record
        """False: record no recall and keep no evidence (benchmarks over an index not built from the log)."""
        self._lock = threading.Lock()

    def perspective(self, tenant: str, agent: str, serving: str | None, focus: Sequence[str],
                    as_of: datetime | None, budget_tokens: int | None, deeper: bool = False) -> dict[str, Any]:
        with self._lock:
            served = self.engine.perspective_for(tenant, agent, serving, focus, as_of,
                                                 budget_tokens=budget_tokens or DEFAULT_BUDGET_TOKENS, deeper=deeper,
                                                 record=self.record)
        return public(served)

    def forgotten(self) -> None:
        """Content was forgotten: drop the indexes (they hold labels and reasons) and load them again."""
        if self._reload is not None:
            fresh = self._reload()
            with self._lock:
                self.engine = fresh

    def _served(self, tenant: str, perspective_id: str) -> Perspective:
        served = self.engine.explain(perspective_id)
        if served.tenant != tenant:
            raise UnknownPerspective(perspective_id)
        return served

    def deepen(self, tenant: str, perspective_id: str, budget_tokens: int | None) -> dict[str, Any]:
        served = self._served(tenant, perspective_id)
        return self.perspective(tenant, served.agent, served.serving, served.focus, served.as_of,
                                budget_tokens or served.budget_tokens, deeper=True)

    def explain(self, tenant: str, perspective_id: str) -> dict[str, Any]:
        served = public(self._served(tenant, perspective_id))
        inputs = {k: served[k] for k in ("tenant", "agent", "serving", "focus", "as_of", "deeper", "served_at",
                                         "log_position", "budget_tokens")}
        outputs = {k: served[k] for k in ("items", "count_groups", "forgotten", "counts", "context",
                                          "context_tokens", "lines", "unknown_refs", "recall")}
        return {"perspective_id": perspective_id, "inputs": inputs, "parameters": served["parameters"],
                "outputs": outputs}


class _FollowedPerspectives(Perspectives):
    """Perspectives that read the log only when this process's projector has seen it move: a perspective then
    costs no log query at all (about a sixth of its time). Reads stay read-your-writes through `min_position`,
    which waits for the projector before the engine is asked."""

    follower: ProjectionFollower | None = None
    _followed_to = -1

    def catch_up(self) -> int:
        follower = self.follower
        if follower is not None:
            position = follower.position
            if position == self._followed_to:
                return position
            reached = super().catch_up()
            self._followed_to = position
            return reached
        return super().catch_up()


def _load(noumena: Noumena, follower: ProjectionFollower | None) -> Perspectives:
    perspectives = _FollowedPerspectives(noumena.log, noumena.service, noumena.settings.home, utc_now)
    perspectives.follower = follower
    if follower is not None:
        with follower.reader() as con:
            position = clock_position(con)
            tenants = [row[0] for row in con.execute(
                "SELECT tenant FROM tenants UNION SELECT DISTINCT tenant FROM entity_versions").fetchall()]
            indexes = {tenant: from_duckdb(con, tenant) for tenant in tenants}
        perspectives.start_from(indexes, position)
    return perspectives


def build_perspective_engine(noumena: Noumena, follower: ProjectionFollower | None) -> EnginePerspectives:
    """The engine for this process; with a (not yet started) projector, its indexes load from DuckDB first, and
    load again after the projector purged forgotten content (the indexes hold labels and reasons)."""
    engine = EnginePerspectives(_load(noumena, follower), reload=lambda: _load(noumena, follower))
    if follower is not None:
        follower.on_purged.append(engine.forgotten)
    return engine
