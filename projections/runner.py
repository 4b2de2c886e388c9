"""Running the projector as a service (`noumena project`) and asking it for a snapshot (`noumena snapshot`)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Protocol

from projections.files import ProjectionFiles
from projections.projector import ProjectionError, ProjectionLocked, Projector
from projections.snapshot import remove_stale_temporaries
from projections.source import RawLog


class ProjectorSettings(Protocol):
    """The settings the projector service reads (infra/settings.py's Settings has them)."""

    home: Path
    projection_batch_size: int
    projection_poll_interval: float
    snapshot_interval: float


def follow(log: RawLog, settings: ProjectorSettings, stop: threading.Event) -> None:
    """Follow the log into `<home>/projections.duckdb` until `stop` is set, publishing `<home>/snapshot.duckdb`
    every `snapshot_interval` seconds when changed and whenever `noumena snapshot` asks. After a forget it
    rebuilds itself, republishes and rewrites the registered Parquet exports (projections/purge.py)."""
    files = ProjectionFiles(settings.home)
    remove_stale_temporaries(files.snapshot)
    from projections.purge import rewrite_exports

    with Projector(log, files.live, batch_size=settings.projection_batch_size) as projector:
        projector.run_forever(stop, poll_interval=settings.projection_poll_interval, snapshot=files.snapshot,
                              snapshot_interval=settings.snapshot_interval, snapshot_request=files.snapshot_request,
                              on_rebuilt=lambda: rewrite_exports(settings.home, files.snapshot))


def publish_now(log: RawLog, settings: ProjectorSettings, timeout: float = 60.0) -> int | None:
    """Publish a snapshot of everything in the log now. When a projector process holds the live file, ask it
    and wait; otherwise catch up and publish here. Returns the position published (None: the projector's)."""
    files = ProjectionFiles(settings.home)
    try:
        projector = Projector(log, files.live, batch_size=settings.projection_batch_size)
    except ProjectionLocked:
        files.snapshot_request.touch()
        deadline = time.monotonic() + timeout
        while files.snapshot_request.exists():
            if time.monotonic() > deadline:
                raise ProjectionError(f"the running projector did not publish within {timeout:.0f} s") from None
            time.sleep(0.05)
        return None
    with projector:
        projector.catch_up()
        return projector.publish(files.snapshot)
