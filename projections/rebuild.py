"""Dropping the live projection and building it again from the whole log, with bulk loads."""

from __future__ import annotations

import os

from projections.files import ProjectionFiles
from projections.projector import Progress, Projector, connect
from projections.replay import REPLAY_BATCH, Replayed, replay
from projections.snapshot import publish_snapshot
from projections.source import RawLog


def rebuild(log: RawLog, files: ProjectionFiles, *, progress: Progress | None = None,
            batch_size: int = REPLAY_BATCH, publish: bool = True) -> Replayed:
    """Rebuild `files.live` from the log into a new file and swap it in; the old one serves until the swap.
    Raises ProjectionLocked while a projector process holds the live file."""
    holder = connect(files.live)  # fails fast if a projector runs; keeps others out while we build
    try:
        built = replay(log, files.live.with_name(files.live.name + ".rebuilt"), None, progress=progress,
                       batch_size=batch_size)
    finally:
        holder.close()
    files.live.with_name(files.live.name + ".wal").unlink(missing_ok=True)
    os.replace(built.path, files.live)
    if publish:
        with Projector(log, files.live) as projector:
            publish_snapshot(projector.con, files.snapshot)
    return Replayed(files.live, built.position, built.clock, built.events)
