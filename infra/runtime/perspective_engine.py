"""The perspective port's adapter (domain/ports.py `PerspectiveEngine`): projections/perspectives.py behind the
tenant rules of the application.

One engine per process. Its per-tenant indexes are loaded in bulk from DuckDB at start (from the live file when
this process runs the projector, else from the published snapshot) and then follow the log. Computing is
serialized on one lock (the index catches up and walks in place; a walk takes milliseconds); recording the recall
a perspective causes and keeping its evidence are the application's side effects, done after the lock is
released.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from domain.perspective import DEFAULT_BUDGET_TOKENS, Perspective

if TYPE_CHECKING:  # (imported when first used: a process that serves no perspective never loads numpy or DuckDB)
    from infra.runtime.serving import ProjectionFollower
    from projections.perspectives import Perspectives
    from projections.source import RawLog


class EnginePerspectives:
    """Every call is scoped to the caller's tenant; another tenant's perspective id is simply unknown."""

    def __init__(self, load: Callable[[], Perspectives], *, record: bool = True,
                 retext: Callable[[Perspectives, list[str]], None] | None = None,
                 gate: Callable[[str], None] | None = None) -> None:
        self._load = load
        self._retext = retext
        self.gate = gate
        """Called with the tenant before anything is computed from its index (outside every lock): waits while the
        tenant purges a forget (infra/runtime/serving.py), so no content it forgot is served meanwhile."""
        self._engine: Perspectives | None = None
        self.records_recalls = record
        """False: its perspectives cause no recall and keep no evidence (benchmarks over an index not built from
        the log)."""
        self.lock = threading.Lock()
        """Held while an index is walked; the context engine walks the same indexes under it."""
        self.on_forgotten: list[Callable[[], None]] = []
        """Called after `forgotten`: the context and search engines drop what they built on a replaced engine."""

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
        if self.gate is not None:
            self.gate(tenant)
        engine = self.engine
        with self.lock:
            return engine.perspective_for(tenant, agent, serving, focus, as_of,
                                          budget_tokens=budget_tokens or DEFAULT_BUDGET_TOKENS, deeper=deeper)

    def forgotten(self, tenants: list[str] | None = None) -> None:
        """Content was forgotten: the indexes of `tenants` take the texts that read `[forgotten]` now (they hold
        labels and reasons), the others are left as they are; None: every tenant, the engine loaded afresh."""
        if self._engine is None:
            return
        if tenants is None or self._retext is None:
            fresh = self._load()
            with self.lock:
                self._engine = fresh
        else:
            self._retext(self._engine, tenants)
        for drop in self.on_forgotten:
            drop()

    def reproduce(self, served: Perspective) -> Perspective:
        return self.engine.reproduce(served)


def _load(log: RawLog, home: Path, clock: Callable[[], datetime],
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

        def catch_up(self, until_position: int | None = None) -> int:
            follower = self.follower
            if follower is not None:
                # never beyond the projector: a forget's tenant is marked purging before the projector reports
                # its position, so this service never serves from an index that read past an unmarked forget
                position = follower.position
                if position == self._followed_to:
                    return position
                reached = super().catch_up(position)
                self._followed_to = position
                return reached
            return super().catch_up(until_position)

        def refold(self, tenant: str) -> None:
            if self.follower is None:
                super().refold(tenant)
            # else nothing now: the tenant's reads wait while the projector rebuilds the read model without the
            # forgotten content, then its index takes the forgotten texts from the file (`_retext`), not folded here

    perspectives = _FollowedPerspectives(log, clock)
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


def _retext(follower: ProjectionFollower, perspectives: Perspectives, tenants: list[str]) -> None:
    """After the projector redacted the live read model, or swapped in one rebuilt without forgotten content: the
    purged tenants' indexes take the labels and reasons that read otherwise there now (the other tenants' indexes,
    and everything else of theirs, stay as they are)."""
    from projections.perspective_load import texts_now

    for tenant in tenants:
        index = perspectives.index(tenant)
        with follower.reader() as con:
            now = texts_now(con, tenant, index)
        perspectives.take_texts(tenant, now)


def build_perspective_engine(log: RawLog, home: Path, clock: Callable[[], datetime],
                             follower: ProjectionFollower | None = None) -> EnginePerspectives:
    """The engine for this process, loaded on first use: with a (not yet started) projector, its indexes load
    from the live DuckDB file, and take the forgotten texts from it after the projector purged them (the indexes
    hold labels and reasons); without one, from the published snapshot when there is one, else from the log."""
    if follower is None:
        return EnginePerspectives(lambda: _load(log, home, clock, None))
    engine = EnginePerspectives(lambda: _load(log, home, clock, follower),
                                retext=lambda perspectives, tenants: _retext(follower, perspectives, tenants),
                                gate=lambda tenant: follower.wait_clean(tenant, follower.read_wait_seconds))
    follower.on_purged.append(engine.forgotten)
    return engine
