"""Replaying the log from the start into a fresh DuckDB file: the database as it stood at transaction time T."""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from projections.bulk import bulk_load
from projections.projector import Progress, Projector
from projections.source import RawLog

REPLAY_BATCH = 50_000


@dataclass(frozen=True)
class Replayed:
    path: Path
    position: int
    clock: datetime | None
    events: int


def _remove(path: Path) -> None:
    for file in (path, path.with_name(path.name + ".wal")):
        file.unlink(missing_ok=True)


def replay(log: RawLog, out: Path, as_of: datetime | None = None, *, progress: Progress | None = None,
           batch_size: int = REPLAY_BATCH) -> Replayed:
    """Write to `out` the projection of every event believed at `as_of` (all of them when None): the events
    before the first whose transaction time (the clock's running maximum) is after `as_of`. `out` is
    replaced only when the replay is complete."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.replay")
    _remove(tmp)
    try:
        with Projector(log, tmp, batch_size=batch_size) as projector:
            # the bulk path (stage the log, derive in SQL); then whatever was appended meanwhile, incrementally
            projector.position, projector.clock, events = bulk_load(projector.con, log, as_of, progress)
            events += projector.catch_up(until=as_of, progress=progress)
            projector.con.execute("CHECKPOINT")
            position, clock = projector.position, projector.clock
    except BaseException:
        _remove(tmp)
        raise
    _remove(out)
    os.replace(tmp, out)
    return Replayed(out, position, clock, events)
