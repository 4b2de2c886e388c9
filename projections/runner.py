"""Running the projector as a service (`noumena project`) and asking it for a snapshot (`noumena snapshot`).

The loop that follows the log lives here, beside the replay it calls after a forget, not in the projector: a
replay runs a projector, so the projector itself never imports the replay."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

from tenacity import Retrying, retry_if_result, stop_after_delay, wait_fixed

from projections.files import ProjectionFiles
from projections.projector import ProjectionError, ProjectionLocked, Projector, connect
from projections.replay import replay
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
        run_forever(projector, log, stop, poll_interval=settings.projection_poll_interval, snapshot=files.snapshot,
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
        _wait_until_taken(files.snapshot_request, timeout)
        return None
    with projector:
        projector.catch_up()
        return projector.publish(files.snapshot)


def run_forever(
    projector: Projector,
    log: RawLog,
    stop: threading.Event,
    *,
    poll_interval: float = 0.2,
    snapshot: Path | None = None,
    snapshot_interval: float = 5.0,
    snapshot_request: Path | None = None,
    on_rebuilt: Callable[[], object] | None = None,
) -> None:
    """Follow the log (the one `projector` reads) until `stop` is set. With `snapshot`, publish it every
    `snapshot_interval` seconds when something changed, at once when `snapshot_request` appears, and once more on
    the way out.
    After a `subject.forgotten` event the file is rebuilt from the log (the forgotten content now reads
    `[forgotten]`), the snapshot republished and `on_rebuilt` called."""
    published: int | None = None
    last_publish = time.monotonic()
    if snapshot is not None and not snapshot.exists():
        published = projector.publish(snapshot)
    while not stop.is_set():
        applied = projector.run_once()
        requested = snapshot_request is not None and snapshot_request.exists()
        if requested:
            projector.catch_up()
        if projector.forgotten_pending:
            rebuild_in_place(projector, log)
            if snapshot is not None:
                published, last_publish = projector.publish(snapshot), time.monotonic()
            if on_rebuilt is not None:
                on_rebuilt()
        if snapshot is not None:
            due = snapshot_interval > 0 and time.monotonic() - last_publish >= snapshot_interval
            if requested or (due and published != projector.position):
                published, last_publish = projector.publish(snapshot), time.monotonic()
        if requested and snapshot_request is not None:
            snapshot_request.unlink(missing_ok=True)
        if applied == 0:
            stop.wait(poll_interval)
    if snapshot is not None and published != projector.position:
        projector.publish(snapshot)


def rebuild_in_place(projector: Projector, log: RawLog) -> None:
    """Replace the projector's file by a fresh replay of its log up to its position (DuckDB does not zero freed
    blocks: rows updated in place could leave forgotten text in the file)."""
    position = projector.position
    projector.con.close()
    tmp = projector.path.with_name(projector.path.name + ".rebuilt")
    built = replay(_Until(log, position), tmp)
    projector.path.with_name(projector.path.name + ".wal").unlink(missing_ok=True)
    os.replace(built.path, projector.path)
    projector.con = connect(projector.path)
    projector.con.execute("SET TimeZone = 'UTC'")
    projector.position, projector.clock = built.position, built.clock
    projector.forgotten_pending = False


class _Until:
    """A log that ends at `position`: a rebuild in place reproduces exactly what the projector had applied."""

    def __init__(self, log: RawLog, position: int) -> None:
        self._log, self._position = log, position

    def read_raw(self, after_position: int, limit: int) -> Sequence[tuple[int, str, bytes]]:
        return [r for r in self._log.read_raw(after_position, limit) if r[0] <= self._position]

    def max_position(self) -> int:
        return min(self._position, self._log.max_position())


def _wait_until_taken(request: Path, timeout: float) -> None:
    """Wait while the request file exists (the running projector takes it away once it has published)."""
    waiting = Retrying(retry=retry_if_result(bool), stop=stop_after_delay(timeout), wait=wait_fixed(0.05),
                       retry_error_callback=lambda _: True)
    if waiting(request.exists):
        raise ProjectionError(f"the running projector did not publish within {timeout:.0f} s") from None
