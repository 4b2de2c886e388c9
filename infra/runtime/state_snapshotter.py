"""Taking the tenants' state snapshots in a process of its own (`python -m infra.runtime.state_snapshotter`), so that a
process that writes never pays for them.

A snapshot is the tenant's folded state written to `<home>/state/<tenant>.snapshot` (infra/adapters/state_snapshots.py).
Serializing a state takes time in proportion to its size; in the writing process it would run under the write lock,
and a thread of its own would not help (the interpreter lock). The snapshotter instead folds the log itself: the log is
append-only, so from the last snapshot (opened on demand) it folds only the events after it and writes only the
buckets they changed, as a delta file after that snapshot (the whole state when there is none: a first snapshot,
or one after a forget; its deltas merged into a copy of it once they have grown). It keeps the state it folded
from one request to the next, so a request folds only the events written since the last one, reads no bucket it
holds already and writes only what those events changed: its work follows the writes, whatever the size of the
state, and the snapshot on disk keeps up with writers that never pause (a crash leaves a short tail to fold). It
competes with the writers for a core only, as the purge worker does (infra/runtime/purge_worker.py), at a slightly
lower priority (`NICENESS`).

- **Started** by the writing process on its first request (`SnapshotterProcess.request`, which `OntologyService`
  makes each time a state is `every` events ahead of the last one asked for), with the process's settings as JSON on
  its stdin's first line; then one line per request: `{"tenant": ...}`. A request is handed over (and the process
  started) once the writes pause (`PAUSE`, 1 s without one), or `LATEST` (1 s) after it was made, or at once
  when the tenant is asked for again meanwhile (its state is then twice the interval ahead): the fold runs beside
  idle writers when it can, and keeps up with writers that never pause (a bulk import, a busy stream), so that a
  crash leaves a short tail to fold. It answers each on stdout: `{"tenant": ..., "stored": [version, "whole"
  | "changes" | "merged"] or null}`. A tenant has one request at a time: asked for again while the snapshotter
  takes its snapshot, it is handed over again as soon as that is answered (writes that never pause keep it busy).
- **Stopped** when the writing process closes its store, which first has it bring the tenants' snapshots to the
  end of the log if it has answered a request already (`request(..., at_once=True)`, `answering`): its stdin
  closes (it ends when idle), or it is terminated if it is taking a snapshot (that one is not stored: its
  temporary file is deleted; the writing process snapshots in place as it stops). It also ends by itself when the
  writing process died: at once if idle (its stdin closes), and within half a second if taking a snapshot (it is
  no longer that process's child; the snapshot is not stored), so it never folds beside that process's restart.
- **Failures** never reach the writes: a snapshot that fails is logged (its stderr is the writing process's) and
  answered `null`; if the process dies, the writing process logs a warning with its exit code, its writes go on,
  the snapshots on disk stay as they were (a restart folds more), and the next request starts a new snapshotter
  (at most once a minute).
- **Forgets** (see `FileStateSnapshots.take_from_log`): the key store's forget fence is taken before the log is
  read and the cached keys dropped, so a snapshot is stored only if no forget ran while it was folded, and a state
  folded after a forget never read a deleted key. The state kept between requests is dropped when a forget ran
  since it was folded (the tenant's snapshot key, which every forget deletes, is not the one its snapshots were
  sealed under; or the events after it hold the forget), and the next snapshot is folded afresh: no snapshot
  stored after a forget holds content read before it.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Collection
from typing import IO, TYPE_CHECKING

from infra.runtime.priority import lower_to_background

if TYPE_CHECKING:
    from infra.adapters.state_snapshots import FileStateSnapshots

log = logging.getLogger(__name__)

NICENESS = 2
"""The snapshotter runs at a slightly lower CPU priority than the writers: on a busy machine the writes come first,
yet it keeps enough of a core to keep up with them (far below their priority, beside other busy processes, it fell
behind by as much as they wrote, and a crash left all of that to fold)."""
PAUSE = 1.0
"""Seconds without a write before the snapshotter is handed a request: it works while the writers pause (on a
shared machine a fold beside a busy writer slows the writes, niced or not)."""
LATEST = 1.0
"""...but no later than this many seconds after the request, if the writes never pause: the snapshot on disk then
stays within about `every` events plus what is written in this time and one fold behind the log."""
RESTART_AFTER = 60.0
"""Seconds before a snapshotter that died is started again (on the next request)."""
STOP_SECONDS = 2.0
"""How long closing waits for the snapshotter to end before it is killed (a snapshotter at a low priority on a busy
machine may take long to run even its exit; a temporary file a killed one leaves is deleted by the store)."""


class SnapshotterProcess:
    """The writing process's side: starts the snapshotter on the first request, hands it tenants (never blocking
    the caller), reads what it stored, and stops it."""

    def __init__(self, settings_json: str, on_stored: Callable[[str, int, str], None]) -> None:
        self._settings_json = settings_json
        self._on_stored = on_stored
        self._queue: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        self._changed = threading.Condition()
        self._asked: set[str] = set()
        """Tenants asked for and not yet answered (queued, or sent to the snapshotter)."""
        self._pressing: set[str] = set()
        """Tenants asked for again while their request waited for a pause: the state is already twice the
        interval ahead, so the request is handed over without waiting any longer (bulk writes never pause)."""
        self._sent: set[str] = set()
        """Tenants whose request the snapshotter has, not yet answered."""
        self._again: set[str] = set()
        """Tenants asked for again while the snapshotter took their snapshot: asked again, at once, when it
        answers (the state moved on by another interval meanwhile), so that it goes on while writes go on."""
        self._feeder: threading.Thread | None = None
        self._process: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None
        self._started_at = -RESTART_AFTER
        self._closed = False
        self._answering: subprocess.Popen[str] | None = None
        """The snapshotter once it has answered a request (it runs, its imports done)."""
        self._last_write = -PAUSE
        self.pause = PAUSE
        self.latest = LATEST

    @property
    def pid(self) -> int | None:
        """The snapshotter's process id while one runs (tests and operators read it)."""
        process = self._process
        return process.pid if process is not None and process.poll() is None else None

    @property
    def answering(self) -> bool:
        """Whether a snapshotter runs that has answered a request already (one asked now folds at once)."""
        process = self._answering
        return process is not None and process is self._process and process.poll() is None

    def request(self, tenant: str, at_once: bool = False) -> None:
        """Ask for a snapshot of `tenant` from the log; returns at once (the snapshotter is started, and the
        request written to it, on a thread of this object's). `at_once`: handed over without waiting for a pause
        in the writes (a process that stops)."""
        with self._changed:
            if self._closed:
                return
            if at_once:
                self._pressing.add(tenant)
            if tenant in self._asked:
                (self._again if tenant in self._sent else self._pressing).add(tenant)
                self._changed.notify_all()
                return
            self._asked.add(tenant)
            if self._feeder is None:
                self._feeder = threading.Thread(target=self._feed, name="noumena-snapshotter-feed", daemon=True)
                self._feeder.start()
        self._queue.put(tenant)

    def wrote(self) -> None:
        """A write was appended (requests wait for a pause in them)."""
        self._last_write = time.monotonic()

    def wait(self, timeout: float | None = None, tenants: Collection[str] | None = None) -> bool:
        """Wait until every request so far (of `tenants` only, if given) is answered; False on timeout."""
        with self._changed:
            if tenants is None:
                return self._changed.wait_for(lambda: not self._asked, timeout)
            return self._changed.wait_for(lambda: self._asked.isdisjoint(tenants), timeout)

    def close(self) -> None:
        """Stop the snapshotter: at once if it is taking a snapshot (that one is not stored), else once its stdin
        closes; its threads here end too."""
        with self._changed:
            self._closed = True
            busy = bool(self._asked)
            self._changed.notify_all()  # (a feeder waiting for a pause stops waiting)
        self._queue.put(None)
        self._stop(busy)  # (first: the feeder may be writing to it)
        if self._feeder is not None:
            self._feeder.join()
        self._stop(busy)  # (one the feeder was starting as this began)
        if self._reader is not None:
            self._reader.join()
        with self._changed:
            self._asked.clear()
            self._changed.notify_all()

    def _stop(self, busy: bool) -> None:
        process = self._process
        if process is None:
            return
        _close_quietly(process.stdin)
        if busy and process.poll() is None:
            process.terminate()
        try:
            process.wait(STOP_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    # ------------------------------------------------------------------ the feeder thread

    def _feed(self) -> None:
        while (tenant := self._queue.get()) is not None:
            self._running()  # (started now, so its imports are done by the time the writes pause)
            self._await_pause(tenant)
            process = self._running()
            if process is None:  # (it died less than a minute ago: this request is dropped)
                self._answered(tenant, dropped=True)
                continue
            try:
                assert process.stdin is not None
                with self._changed:
                    self._sent.add(tenant)
                process.stdin.write(json.dumps({"tenant": tenant}) + "\n")
                process.stdin.flush()
            except (OSError, ValueError):  # (it died meanwhile: the reader reports it)
                self._answered(tenant, dropped=True)

    def _await_pause(self, tenant: str) -> None:
        """Until the writes have paused `pause` seconds, or `latest` seconds have passed, or the tenant was asked
        for again meanwhile, or the store closes."""
        asked = time.monotonic()
        with self._changed:
            while not self._closed:
                now = time.monotonic()
                quiet = now - self._last_write
                if quiet >= self.pause or now - asked >= self.latest or tenant in self._pressing:
                    self._pressing.discard(tenant)
                    return
                self._changed.wait(min(self.pause - quiet, asked + self.latest - now))

    def _running(self) -> subprocess.Popen[str] | None:
        process = self._process
        if process is not None and process.poll() is None:
            return process
        if self._reader is not None:
            self._reader.join()  # (it has reported the exit)
        with self._changed:
            if self._closed or time.monotonic() - self._started_at < RESTART_AFTER:
                return None
        self._started_at = time.monotonic()
        try:
            process = subprocess.Popen([sys.executable, "-m", "infra.runtime.state_snapshotter"], stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, text=True, bufsize=1)
            assert process.stdin is not None
            process.stdin.write(self._settings_json + "\n")
            process.stdin.flush()
        except (OSError, ValueError):
            log.exception("the state snapshotter did not start; writes go on with the snapshots on disk")
            return None
        self._process = process
        self._reader = threading.Thread(target=self._read, args=(process,), name="noumena-snapshotter-read",
                                        daemon=True)
        self._reader.start()
        return process

    # ------------------------------------------------------------------ the reader thread

    def _read(self, process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            try:
                answer = json.loads(line)
                tenant, stored = answer["tenant"], answer["stored"]
            except (ValueError, KeyError, TypeError):
                log.warning("the state snapshotter said %r", line[:200])
                continue
            if stored is not None:
                self._on_stored(tenant, int(stored[0]), str(stored[1]))
            self._answering = process
            self._answered(tenant)
        code = process.wait()
        with self._changed:
            closing = self._closed
            self._asked.clear()  # (what it was asked is not coming: ask again later)
            self._sent.clear()
            self._again.clear()
            self._changed.notify_all()
        if code != 0 and not closing:
            log.warning("the state snapshotter (pid %s) exited with %s: writes go on with the snapshots on disk (a "
                        "restart folds more of the log); the next request starts it again", process.pid, code)

    def _answered(self, tenant: str, dropped: bool = False) -> None:
        with self._changed:
            self._sent.discard(tenant)
            again = tenant in self._again and not dropped and not self._closed
            self._again.discard(tenant)
            if again:  # (still asked: handed over at once)
                self._pressing.add(tenant)
            else:
                self._asked.discard(tenant)
                self._pressing.discard(tenant)
            self._changed.notify_all()
        if again:
            self._queue.put(tenant)


def _close_quietly(stream: IO[str] | None) -> None:
    if stream is not None:
        try:
            stream.close()
        except OSError:
            pass  # (the process is gone already)


# ---------------------------------------------------------------------- the snapshotter process


def _stop(_signum: int, _frame: object) -> None:
    raise SystemExit(0)  # (a snapshot being written deletes its temporary file on the way out)


PARENT_CHECK_SECONDS = 0.5
"""How often the snapshotter looks whether the writing process that started it is still its parent."""


def _end_with_the_writer(parent: int) -> None:
    """Stop this process as a stop does (SIGTERM) once `parent` is no longer its parent. Its stdin closing ends it
    only between snapshots; a snapshot under way for a writing process that died (killed, say) is no one's any
    more, and would go on folding beside that process's restart, on the same cores, for the restart to ask again."""
    while os.getppid() == parent:
        time.sleep(PARENT_CHECK_SECONDS)
    os.kill(os.getpid(), signal.SIGTERM)


def _take(snapshots: FileStateSnapshots, tenant: str, whole: bool) -> tuple[int, str] | None:
    """`take_from_log`; when it folds the whole log (the tenant has no snapshot: after a forget, which deletes
    them), on a thread of its own in the background class (infra/runtime/priority.py): seconds to minutes of a core,
    which a server on the same cores would feel as its requests waiting for a CPU. A delta after a snapshot is short
    and stays at `NICENESS`, to keep up with the writes. None if it failed (logged: answered, the writing process
    goes on and the next request tries again)."""
    taken: list[tuple[int, str] | None] = [None]

    def take() -> None:
        if whole:
            lower_to_background(thread_only=True)
        try:
            taken[0] = snapshots.take_from_log(tenant)
        except Exception:
            log.exception("state snapshot of tenant %s not taken", tenant)

    if not whole:
        take()
        return taken[0]
    thread = threading.Thread(target=take, name="noumena-snapshotter-whole")
    thread.start()
    thread.join()
    return taken[0]


def main() -> int:
    if hasattr(os, "nice"):
        os.nice(NICENESS)
    signal.signal(signal.SIGTERM, _stop)
    threading.Thread(target=_end_with_the_writer, args=(os.getppid(),), name="noumena-snapshotter-parent",
                     daemon=True).start()
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING,
                        format=f"noumena state snapshotter [{os.getpid()}] %(levelname)s %(name)s: %(message)s")
    from infra.adapters.eventlog import EventsourcingLog
    from infra.adapters.state_snapshots import FileStateSnapshots
    from infra.settings import Settings

    settings = Settings(**json.loads(sys.stdin.readline())["settings"])
    gc.set_threshold(50_000, 20, 100)  # (a folded state is a large heap of small objects; no request waits here)
    event_log = EventsourcingLog(settings.event_store_env(), settings.key_store())
    snapshots = FileStateSnapshots(settings.home, event_log, event_log.keys, settings.state_snapshot_every)
    try:
        for line in sys.stdin:
            tenant = json.loads(line)["tenant"]
            stored = _take(snapshots, tenant, whole=snapshots.stored_version(tenant) == 0)
            try:
                sys.stdout.write(json.dumps({"tenant": tenant, "stored": stored}) + "\n")
                sys.stdout.flush()
            except BrokenPipeError:  # (the writing process died: the snapshot is stored, no one to tell)
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # (nothing to flush at exit)
                break
    finally:
        snapshots.close()
        event_log.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
