"""The perspective port's adapter (domain/ports.py `PerspectiveEngine`): projections/perspectives.py behind the
tenant rules of the application.

One engine per process. Its per-tenant indexes are loaded in bulk from DuckDB at start (from the live file when
this process runs the projector, else from the published snapshot) and then follow the log. Computing is
serialized on one lock (the index catches up and walks in place; a walk takes milliseconds); recording the recall
a perspective causes is the application's write, done after the lock is released.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from domain.perspective import DEFAULT_BUDGET_TOKENS, Perspective
from domain.ports import CommandRunner

if TYPE_CHECKING:  # (imported when first used: a process that serves no perspective never loads numpy or DuckDB)
    from infra.serving import ProjectionFollower
    from projections.perspectives import Perspectives
    from projections.source import RawLog


class EnginePerspectives:
    """Every call is scoped to the caller's tenant; another tenant's perspective id is simply unknown."""

    def __init__(self, load: Callable[[], Perspectives], *, record: bool = True) -> None:
        self._load = load
        self._engine: Perspectives | None = None
        self.records_recalls = record
        """False: record no recall and keep no evidence (benchmarks over an index not built from the log)."""
        self.lock = threading.Lock()
        """Held while an index is walked; the context engine walks the same indexes under it."""

    @property
    def engine(self) -> Perspectives:
        """The perspective service, loaded on first use."""
        if self._engine is None:
            with self.lock:
                if self._engine is None:
                    self._engine = self._load()
        return self._engine

    def perspective(self, tenant: str, agent: str, serving: str | None, focus: Sequence[str],
                    as_of: datetime | None, budget_tokens: int | None, deeper: bool = False) -> Perspective:
        engine = self.engine
        with self.lock:
            return engine.perspective_for(tenant, agent, serving, focus, as_of,
                                          budget_tokens=budget_tokens or DEFAULT_BUDGET_TOKENS, deeper=deeper,
                                          record=False)

    def keep_evidence(self, perspective: Perspective) -> None:
        if self.records_recalls:
            self.engine.keep_evidence(perspective)

    def forgotten(self) -> None:
        """Content was forgotten: drop the indexes (they hold labels and reasons) and load them again."""
        if self._engine is not None:
            fresh = self._load()
            with self.lock:
                self._engine = fresh

    def served(self, tenant: str | None, perspective_id: str) -> Perspective:
        from projections.perspectives import UnknownPerspective

        served = self.engine.explain(perspective_id)
        if tenant is not None and served.tenant != tenant:
            raise UnknownPerspective(perspective_id)
        return served

    def reproduce(self, perspective_id: str) -> Perspective:
        return self.engine.reproduce(perspective_id)


def _load(log: RawLog, service: CommandRunner, home: Path, clock: Callable[[], datetime],
          follower: ProjectionFollower | None) -> Perspectives:
    from projections.files import ProjectionFiles
    from projections.perspective_load import from_duckdb
    from projections.perspectives import Perspectives
    from projections.read_model import clock_position

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

    perspectives = _FollowedPerspectives(log, service, home, clock)
    perspectives.follower = follower
    if follower is not None:
        with follower.reader() as con:
            position = clock_position(con)
            tenants = [row[0] for row in con.execute(
                "SELECT tenant FROM tenants UNION SELECT DISTINCT tenant FROM entity_versions").fetchall()]
            indexes = {tenant: from_duckdb(con, tenant) for tenant in tenants}
        perspectives.start_from(indexes, position)
    else:
        perspectives.start_from_read_model(ProjectionFiles(home).snapshot)
    return perspectives


def build_perspective_engine(log: RawLog, service: CommandRunner, home: Path, clock: Callable[[], datetime],
                             follower: ProjectionFollower | None = None) -> EnginePerspectives:
    """The engine for this process, loaded on first use: with a (not yet started) projector, its indexes load
    from the live DuckDB file, and load again after the projector purged forgotten content (the indexes hold
    labels and reasons); without one, from the published snapshot when there is one, else from the log."""
    engine = EnginePerspectives(lambda: _load(log, service, home, clock, follower))
    if follower is not None:
        follower.on_purged.append(engine.forgotten)
    return engine
