"""What `noumena serve` runs beside the API in one process: the projector following the log into DuckDB, read
connections on the same database for the API's reads, and the Kafka consumer when Kafka is configured.

Read-your-writes: a write returns its log position; a read that names one waits (bounded) until the projector
has applied it. Writers nudge the follower so that wait is usually one DuckDB transaction, not a poll interval.

Forgetting: when the projector applies a `subject.forgotten` event (written by this process or any other), the
tenant it names is *purging*. Its reads wait only until the live file is *redacted*: the events that now read
`[forgotten]` are told by the forget itself when this process made it (found by key name in the store), else a
thread searches the log for them; this thread blanks every text of the tenant that came from them in the live file
(projections/purge.py `redact_in_place`) and drops its name index, then its reads by query go on; the perspective
indexes take the texts that read `[forgotten]` in the file now, then its perspectives, searches and contexts go on,
never showing the forgotten content. The forget answers then. Meanwhile a worker process
(infra/runtime/purge_worker.py; a thread for the in-memory store) replays the log (which now reads `[forgotten]` for
the subject's content) into a new DuckDB file, republishes the snapshot and rewrites the exports from it: the live
file's freed blocks may still hold the old text until then, so no snapshot is published from it, and the tenant
stays listed as purging. This thread keeps projecting new events into the old file, so other tenants' reads and
`min_position` waits go on. When the build is done, this thread catches the new file up and swaps it in (readers
wait only for the swap) and the perspective indexes take the purged tenants' texts from it again (what the redaction
blanked only for being equal to a forgotten text comes back). A forget recorded after a build started is not covered
by it: the next build starts at once, and its tenant's reads wait again until the swapped-in file is redacted too. A
purge a crash cut short is redacted and redone at the next start.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb

from domain.application.use_cases.errors import ProjectionBehind
from domain.errors import InfrastructureError
from infra.settings import Settings
from projections import read_model
from projections.files import ProjectionFiles
from projections.projector import Projector
from projections.purge import build_purged, forgotten_positions, redact_in_place
from projections.snapshot import remove_stale_temporaries
from projections.source import RawLog

log = logging.getLogger(__name__)


class ProjectionFollower:
    """Owns the live DuckDB file for this process: one thread writes it, any thread reads through cursors."""

    def __init__(self, log: RawLog, settings: Settings, *, publish_snapshots: bool = True) -> None:
        self._log = log
        self._files = ProjectionFiles(settings.home)
        self._poll = settings.projection_poll_interval
        self._snapshot_interval = settings.snapshot_interval if publish_snapshots else 0.0
        self._settings = settings
        self._projector = self._open(self._files.live)
        self._read_base = self._projector.con.cursor()
        self._cursor_lock = threading.Lock()
        self._local = threading.local()
        self._cursors: list[duckdb.DuckDBPyConnection] = []
        self._advanced = threading.Condition()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.position = self._projector.position
        self.last_error: str | None = None
        self.batches = 0
        self.purges = 0
        self.on_purged: list[Callable[[list[str]], None]] = []
        """Called (in the follower's thread) with the purged tenants after a purge's swap, before they are let
        through."""
        self._purging: dict[str, int] = {}
        """Tenant -> the position of its latest forget not yet purged (the live file is not rebuilt yet)."""
        self._file_held: dict[str, int] = {}
        """The tenants of `_held` whose live file itself may still show content they forgot: their reads by query
        wait (the others, through the indexes, wait for `_held`)."""
        self.on_file_cleaned: list[Callable[[list[str]], None]] = []
        """Called (in the follower's thread) with the tenants whose live file was just redacted or swapped, before
        their reads by query go on: cheap drops of what was read from the file (the name indexes)."""
        self._held: dict[str, int] = {}
        """Tenant -> the position of its latest forget whose content the live file and indexes may still show: its
        reads wait (until the redaction, else the rebuilt file)."""
        self._finding = False
        """A redaction thread is finding the forgotten events."""
        self._forgets: dict[int, str] = {}
        """Position -> tenant of every forget projected and not yet covered by a swapped-in rebuild."""
        self._redacted_until = 0
        """Forgets up to this position are redacted in (or rebuilt into) the live file."""
        self._sealed: dict[int, list[int]] = {}
        """Forget position -> the positions of the events it made read `[forgotten]`, when the forget was made by
        this process (`forgotten`): its redaction needs no search of the log."""
        self._expected: dict[str, int] = {}
        """Tenant -> forgets of this process under way whose positions will be told (`expect_forget`)."""
        self._redactions: list[tuple[int, list[int], int]] = []
        """Found by the redaction thread, applied by the follower's: (up to which position, the positions that read
        `[forgotten]`, the generation of the live file it was found for)."""
        self.searches = 0
        """How many redactions searched the log for the forgotten events (forgets this process did not tell)."""
        self.redact_seconds: list[float] = []
        """How long each redaction took from its forget being projected to its tenants being let read again."""
        self._build: threading.Thread | None = None
        self._build_covers = 0
        """Every forget at or before this position reads `[forgotten]` to the running build."""
        self._built: tuple[Path, int] | None = None
        self._build_error: BaseException | None = None
        self.purge_seconds: list[float] = []
        """How long each purge took from its forget being projected to its tenants being let through."""
        self._purge_started = 0.0
        self._generation = 0
        self._readers = 0
        self._swap = threading.Condition()
        self._swapping = False
        self.read_wait_seconds = settings.api_read_wait_seconds
        """How long a read of a tenant that is purging a forget waits before ProjectionBehind (503, retry)."""

    # ------------------------------------------------------------------ lifecycle

    def _open(self, path: Path) -> Projector:
        """A projector on `path` whose DuckDB works on `live_read_model_threads` threads: this process's requests
        run on threads of their own, and a query spread over every core left them waiting for one."""
        projector = Projector(self._log, path, batch_size=self._settings.projection_batch_size)
        projector.con.execute(f"SET threads = {int(self._settings.live_read_model_threads)}")
        return projector

    @property
    def _pending_file(self) -> Path:
        return self._files.live.with_name(self._files.live.name + ".purging.json")

    def start(self) -> None:
        if self._snapshot_interval > 0:
            remove_stale_temporaries(self._files.snapshot)
        if self._pending_file.exists():  # a purge was under way when the process stopped: do it now
            try:
                pending = {str(k): int(v) for k, v in json.loads(self._pending_file.read_text()).items()}
            except (OSError, ValueError):
                pending = {"": self._projector.position}  # unreadable: rebuild anyway, holding no tenant back
            self._begin_purge(pending)  # (its forgets' positions are unknown: the log is searched for them)
        self._thread = threading.Thread(target=self._run, name="noumena-projector", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        try:  # a purge under way is finished, so the live file never keeps forgotten content past a clean stop
            while self._build is not None and (self._thread is None or not self._thread.is_alive()):
                self._build.join(timeout=120)
                if self._build.is_alive():
                    break
                self._finish_purge()
        except Exception:
            log.exception("finishing a purge at stop failed; the next start purges again")
        self._close_connections()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        last_publish, published = time.monotonic(), -1
        while not self._stop.is_set():
            self._wake.clear()
            before = self._projector.position
            try:
                applied = self._projector.run_once()
                if applied:
                    self._begin_purge(self._forgotten_since(before, record=True))
                if self._redactions:
                    self._apply_redactions()
                if self._built is not None or self._build_error is not None:
                    self._finish_purge()
                self.last_error = None
            except Exception as error:  # keep serving reads; readiness reports the failure
                self.last_error = repr(error)
                log.exception("projector batch failed; retrying")
                self._stop.wait(1.0)
                continue
            if applied:
                self.batches += 1
                with self._advanced:
                    self.position = self._projector.position
                    self._advanced.notify_all()
            due = self._snapshot_interval > 0 and time.monotonic() - last_publish >= self._snapshot_interval
            requested = self._files.snapshot_request.exists()  # `noumena snapshot` from another process
            purging = bool(self._purging)  # (the live file still holds forgotten content: never published)
            if (requested or (due and published != self.position)) and not applied and not purging:
                try:
                    published, last_publish = self._projector.publish(self._files.snapshot), time.monotonic()
                except Exception:
                    log.exception("snapshot publication failed")
                    last_publish = time.monotonic()
                if requested:
                    self._files.snapshot_request.unlink(missing_ok=True)
            if not applied and self._built is None and not self._redactions:
                self._wake.wait(self._poll)

    def _forgotten_since(self, position: int, *, record: bool = False) -> dict[str, int]:
        """Tenant -> its latest forget after `position` in the live file; `record`: each one is remembered until a
        rebuild covers it (its redaction may need it again after a swap)."""
        rows = self._projector.con.execute("SELECT tenant, position FROM clock WHERE position > ? AND topic = ?",
                                           [position, "subject.forgotten"]).fetchall()
        latest: dict[str, int] = {}
        for tenant, at in rows:
            latest[str(tenant)] = max(int(at), latest.get(str(tenant), 0))
        if record and rows:
            with self._swap:
                self._forgets.update({int(at): str(tenant) for tenant, at in rows})
        return latest

    # ------------------------------------------------------------------ forgets of this process

    def expect_forget(self, tenant: str) -> None:
        """This process is about to forget in `tenant`: the redaction of the forget waits (bounded) for
        `forgotten` to tell which events it made unreadable, rather than searching the whole log for them."""
        with self._swap:
            self._expected[tenant] = self._expected.get(tenant, 0) + 1

    def forgotten(self, tenant: str, position: int | None, sealed: list[int]) -> None:
        """The forget `expect_forget` announced is recorded at `position` (None: it failed) and made the events
        at `sealed` read `[forgotten]` (found by key name in the store, see EventsourcingLog.sealed_with)."""
        with self._swap:
            left = self._expected.get(tenant, 0) - 1
            if left > 0:
                self._expected[tenant] = left
            else:
                self._expected.pop(tenant, None)
            if position is not None:
                self._sealed[position] = sealed
            self._swap.notify_all()

    def wait_cleaned(self, tenant: str, position: int, timeout: float) -> bool:
        """After a forget at `position`: wait until the live file and indexes no longer show what it erased (the
        redaction, or a rebuilt file); False when `timeout` seconds pass first."""
        start = time.monotonic()
        if not self.wait_for(position, timeout):
            return False
        with self._swap:
            return self._swap.wait_for(lambda: tenant not in self._held,
                                       max(0.0, timeout - (time.monotonic() - start)))

    def _begin_purge(self, forgotten: dict[str, int], *, build: bool = True) -> None:
        """Hold the tenants' reads (from before their new position is reported), start redacting the live file
        for them and a build if none runs."""
        if not forgotten:
            return
        with self._swap:
            if not self._purging:
                self._purge_started = time.monotonic()
            for tenant, position in forgotten.items():
                self._purging[tenant] = max(position, self._purging.get(tenant, 0))
                self._held[tenant] = max(position, self._held.get(tenant, 0))
                self._file_held[tenant] = max(position, self._file_held.get(tenant, 0))
            self._pending_file.write_text(json.dumps(self._purging))  # a restart finishes what a crash left
        self._start_redaction()
        if build and self._build is None:
            self._start_build()

    # ------------------------------------------------------------------ redaction: reads go on during a purge

    HINT_WAIT_SECONDS = 30.0
    """How long a redaction waits for this process's forget to tell the events it erased before it searches the
    log for them (a pass opening every event)."""

    def _start_redaction(self) -> None:
        """Find, in a thread of this process, the events up to the latest held forget that read `[forgotten]`; the
        follower's thread then blanks their texts in the live file. One search at a time: a forget held meanwhile
        is covered by the next one, started when this one is applied. A forget made by this process tells those
        events itself (`forgotten`, from the key names in the store); one made by another process, or one a crash
        cut short, is searched for: each event up to it is opened and looked at for the marker (nothing folded)."""
        with self._swap:
            until = max(self._held.values(), default=0)
            if self._finding or until <= 0:
                return
            self._finding = True
            generation = self._generation
        started = time.monotonic()

        def told() -> list[int] | None:
            """The positions the forgets to redact told, None if one of them (or a held tenant) has none."""
            with self._swap:
                def forgets() -> dict[int, str]:
                    return {at: tenant for at, tenant in self._forgets.items() if self._redacted_until < at <= until}

                self._swap.wait_for(lambda: all(at in self._sealed or not self._expected.get(tenant)
                                                for at, tenant in forgets().items()), self.HINT_WAIT_SECONDS)
                pending, tenants = forgets(), {t for t, at in self._held.items() if at <= until}
                if not pending or not tenants <= set(pending.values()) or any(at not in self._sealed
                                                                               for at in pending):
                    return None
                return sorted({position for at in pending for position in self._sealed[at]})

        def find() -> None:
            try:
                positions = told()
                if positions is None:
                    self.searches += 1
                    positions = forgotten_positions(self._log, until)
                with self._swap:
                    self._redactions.append((until, positions, generation))
                    self._finding = False
                self.redact_seconds.append(time.monotonic() - started)
            except Exception:  # the tenants' reads then wait for the rebuilt file, as they would without this
                log.exception("finding the forgotten events failed; the purging tenants' reads wait for the rebuild")
            finally:
                with self._swap:
                    self._finding = False
                self._wake.set()

        threading.Thread(target=find, name="noumena-redact", daemon=True).start()

    def _apply_redactions(self) -> None:
        """In the follower's thread: blank the forgotten texts of the held tenants in the live file, have their
        indexes take them, and let their reads go on."""
        with self._swap:
            current = [found for found in self._redactions if found[2] == self._generation]
            self._redactions.clear()
            if not current:  # (found for a file swapped out since: the new one is searched for again)
                tenants = []
            else:
                until, positions, _ = max(current)
                tenants = [tenant for tenant, position in self._held.items() if position <= until]
        if not tenants:
            if self.held():
                self._start_redaction()
            return
        for tenant in tenants:
            redact_in_place(self._projector.con, tenant, positions)
        self._file_cleaned(tenants, until)
        for listener in self.on_purged:
            listener(tenants)
        with self._swap:
            self._redacted_until = max(self._redacted_until, until)
            for tenant in tenants:
                if self._held.get(tenant, 0) <= until:
                    self._held.pop(tenant, None)
                    self._file_held.pop(tenant, None)
            later = bool(self._held)
            self._swap.notify_all()
        if later:  # a forget projected while this one was searched for
            self._start_redaction()

    def _file_cleaned(self, tenants: list[str], until: int) -> None:
        """The live file no longer shows what `tenants` forgot up to `until`: drop what was read from it, then let
        their reads by query go on (their reads through the indexes wait until those took the forgotten texts)."""
        for listener in self.on_file_cleaned:
            listener(tenants)
        with self._swap:
            for tenant in tenants:
                if self._file_held.get(tenant, 0) <= until:
                    self._file_held.pop(tenant, None)
            self._swap.notify_all()

    def _start_build(self) -> None:
        self._build_covers = self._log.max_position()  # forgets recorded by now had their keys deleted before
        self._build = threading.Thread(target=self._build_purged, name="noumena-purge", daemon=True)
        self._build.start()

    def _build_purged(self) -> None:
        """In the builder thread: the log replayed into a new file, the snapshot and exports rewritten from it; in a
        worker process (infra/runtime/purge_worker.py) when the log is a file or a database another process can open, so
        the replay never competes with the requests for this process's interpreter lock."""
        rebuilt = self._files.live.with_name(self._files.live.name + ".rebuilt")
        try:
            if self._settings.event_store != "popo":
                try:
                    self._built = (rebuilt, self._build_in_worker(rebuilt))
                    return
                except Exception:
                    log.exception("the purge worker failed; rebuilding in this process")
            self._built = (rebuilt, build_purged(self._log, self._settings.home, rebuilt,
                                                 self._settings.projection_batch_size))
        except BaseException as error:  # reported by the follower's thread, which retries
            self._build_error = error
        finally:
            self._wake.set()

    def _build_in_worker(self, rebuilt: Path) -> int:
        from infra.runtime.purge_worker import run_worker

        return int(run_worker(self._settings, out=rebuilt)["position"])

    def _finish_purge(self) -> None:
        """In the follower's thread: catch the rebuilt file up, swap it in, let the covered tenants through."""
        assert self._build is not None
        self._build.join()
        self._build = None
        if self._build_error is not None:
            error, self._build_error = self._build_error, None
            self._start_build()
            raise InfrastructureError(f"rebuilding the read model after a forget failed: {error!r}") from error
        assert self._built is not None
        rebuilt, _ = self._built
        self._built = None
        fresh = self._open(rebuilt)
        try:
            while fresh.position < self._projector.position and fresh.run_once():
                pass
            fresh.con.execute("CHECKPOINT")
        finally:
            fresh.close()
        covered, old_position = self._build_covers, self._projector.position
        with self._swap:
            self._swapping = True
            self._swap.wait_for(lambda: self._readers == 0)
            try:
                self._close_connections()
                self._files.live.with_name(self._files.live.name + ".wal").unlink(missing_ok=True)
                os.replace(rebuilt, self._files.live)
                self._projector = self._open(self._files.live)
                self._read_base = self._projector.con.cursor()
                self._generation += 1
                self.purges += 1
                # a forget this build does not cover may show in the new file, redacted in the old one or not:
                # its tenant's reads wait again, until the new file is redacted too
                for tenant, position in self._purging.items():
                    if position > covered:
                        self._held[tenant] = max(position, self._held.get(tenant, 0))
                        self._file_held[tenant] = max(position, self._file_held.get(tenant, 0))
                self._redacted_until = covered
                for at in [at for at in self._forgets if at <= covered]:
                    self._forgets.pop(at)
                    self._sealed.pop(at, None)
            finally:
                self._swapping = False
                self._swap.notify_all()
        self._start_redaction()
        # the new file may have gone past the old one: a forget it applied there waits like any other
        self._begin_purge(self._forgotten_since(old_position), build=False)
        with self._swap:
            tenants = [tenant for tenant, position in self._purging.items() if position <= covered]
        try:
            self._file_cleaned(tenants, covered)
            for listener in self.on_purged:
                listener(tenants)
        finally:
            with self._swap:
                for tenant in tenants:
                    self._purging.pop(tenant, None)
                    if self._held.get(tenant, 0) <= covered:
                        self._held.pop(tenant, None)
                        self._file_held.pop(tenant, None)
                if self._purging:
                    self._pending_file.write_text(json.dumps(self._purging))
                else:
                    self._pending_file.unlink(missing_ok=True)
                self.purge_seconds.append(time.monotonic() - self._purge_started)
                self._purge_started = time.monotonic()
                self._swap.notify_all()
            with self._advanced:
                self.position = self._projector.position
                self._advanced.notify_all()
        if self._purging:
            self._start_build()

    def purging(self) -> dict[str, int]:
        """Tenants whose forgotten content is still being purged, with their forget's position."""
        with self._swap:
            return dict(self._purging)

    def wait_purged(self, tenant: str, timeout: float) -> bool:
        """Wait until `tenant` has no purge pending; False when `timeout` seconds pass first."""
        with self._swap:
            return self._swap.wait_for(lambda: tenant not in self._purging, timeout)

    def held(self) -> dict[str, int]:
        """Tenants whose reads wait because the live file may still show content they forgot."""
        with self._swap:
            return dict(self._held)

    def wait_clean(self, tenant: str, timeout: float) -> None:
        """A read of `tenant` must not see content it forgot: wait (bounded) until the live file and indexes no
        longer show it (redacted, or rebuilt), else ProjectionBehind."""
        if tenant not in self._held:
            return
        with self._swap:
            clean = self._swap.wait_for(lambda: tenant not in self._held, timeout)
        if not clean:
            raise ProjectionBehind(f"tenant {tenant!r} forgot a subject and its read model is still being cleared "
                                   f"of it (more than {timeout:g} s); retry")

    def wait_file_clean(self, tenant: str, timeout: float) -> None:
        """`wait_clean` for a read by query of the live file only: it goes on once the file is redacted, without
        waiting for the indexes to take the forgotten texts from it."""
        if tenant not in self._file_held:
            return
        with self._swap:
            clean = self._swap.wait_for(lambda: tenant not in self._file_held, timeout)
        if not clean:
            raise ProjectionBehind(f"tenant {tenant!r} forgot a subject and its read model is still being cleared "
                                   f"of it (more than {timeout:g} s); retry")

    def _close_connections(self) -> None:
        with self._cursor_lock:
            for cursor in self._cursors:
                cursor.close()
            self._cursors.clear()
            self._read_base.close()
        self._projector.close()

    # ------------------------------------------------------------------ read-your-writes

    def nudge(self) -> None:
        """Something was written: look at the log now rather than after the poll interval."""
        self._wake.set()

    def wait_for(self, position: int, timeout: float) -> bool:
        """Wait until the projection has applied `position`; False when `timeout` seconds pass first."""
        if self.position >= position:
            return True
        self.nudge()
        with self._advanced:
            return self._advanced.wait_for(lambda: self.position >= position, timeout)

    def lag(self) -> int:
        """How many log positions the projection is behind the log."""
        return max(0, self._log.max_position() - self.position)

    # ------------------------------------------------------------------ reads

    @contextmanager
    def reader(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A read connection on the live database for this thread, inside one read transaction: every query of
        the block sees the same committed batch. (Without it each statement is a transaction of its own, and a
        reader asking several questions, such as a perspective index loaded table by table, can mix batches: the
        index stamped with a later position than its sessions or entities were read at never gets those rows.)"""
        with self._swap:
            self._swap.wait_for(lambda: not self._swapping)
            self._readers += 1
        depth = getattr(self._local, "depth", 0)
        try:
            cached = getattr(self._local, "cursor", None)
            if cached is None or cached[0] != self._generation:
                with self._cursor_lock:
                    cursor = self._read_base.cursor()
                    cursor.execute("SET TimeZone = 'UTC'")
                    self._cursors.append(cursor)
                cached = self._local.cursor = (self._generation, cursor)
            if not depth:  # (a block inside another on this thread shares its transaction)
                cached[1].execute("BEGIN TRANSACTION")
            self._local.depth = depth + 1
            try:
                yield cached[1]
            finally:
                self._local.depth = depth
                if not depth:
                    cached[1].execute("ROLLBACK")  # (it only read)
        finally:
            with self._swap:
                self._readers -= 1
                self._swap.notify_all()


class FollowedReadModel:
    """The read-model port (domain/ports.py `ReadModel`) over this process's projector: queries of
    projections/read_model.py on the follower's read connections; DuckDB errors become InfrastructureError."""

    def __init__(self, follower: ProjectionFollower, wait_seconds: float = 5.0) -> None:
        self.follower = follower
        self.wait_seconds = wait_seconds
        """How long a read of a tenant that is purging a forget waits before ProjectionBehind (503, retry)."""

    @property
    def position(self) -> int:
        return self.follower.position

    def nudge(self) -> None:
        self.follower.nudge()

    def wait_for(self, position: int, timeout: float) -> bool:
        return self.follower.wait_for(position, timeout)

    def lag(self) -> int:
        return self.follower.lag()

    def expect_forget(self, tenant: str) -> None:
        self.follower.expect_forget(tenant)

    def forgotten(self, tenant: str, position: int | None, sealed: list[int]) -> None:
        self.follower.forgotten(tenant, position, sealed)

    def wait_cleaned(self, tenant: str, position: int, timeout: float) -> bool:
        return self.follower.wait_cleaned(tenant, position, timeout)

    def purging(self) -> list[str]:
        return sorted(self.follower.purging())

    def _query(self, query: Callable[..., Any], tenant: str, *args: Any) -> Any:
        self.follower.wait_file_clean(tenant, self.wait_seconds)
        with self.follower.reader() as con:
            try:
                return query(con, tenant, *args)
            except duckdb.Error as error:
                raise InfrastructureError(f"read model query failed: {error}") from error

    def entity(self, tenant: str, ref: str) -> dict[str, Any] | None:
        return self._query(read_model.entity, tenant, ref)  # type: ignore[no-any-return]

    def search_entities(self, tenant: str, text: str, skip: int, limit: int) -> tuple[list[dict[str, Any]], int]:
        return self._query(read_model.search_entities, tenant, text, skip, limit)  # type: ignore[no-any-return]

    @property
    def generation(self) -> int:
        return self.follower.purges

    def entities_since(self, tenant: str, after_position: int) -> tuple[list[dict[str, Any]], int]:
        return self._query(read_model.entities_since, tenant, after_position)  # type: ignore[no-any-return]

    def fact_history(self, tenant: str, fact_id: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        return self._query(read_model.fact_history, tenant, fact_id)  # type: ignore[no-any-return]

    def graph_as_of(self, tenant: str, recorded_at: Any, valid_at: Any, skip: int, limit: int
                    ) -> tuple[list[dict[str, Any]], int]:
        return self._query(read_model.graph_as_of, tenant, recorded_at, valid_at, skip,  # type: ignore[no-any-return]
                           limit)

    def session(self, tenant: str, session_id: str) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        self.follower.wait_file_clean(tenant, self.wait_seconds)
        with self.follower.reader() as con:
            return read_model.session(con, tenant, session_id), read_model.workers(con, tenant, session_id)


class KafkaFollower:
    """The Kafka consumer of consumers/kafka_consumer.py in a background thread."""

    def __init__(self, consumer: Any) -> None:
        self.consumer: Any = consumer
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="noumena-kafka", daemon=True)
        self.last_error: str | None = None

    def _run(self) -> None:
        try:
            self.consumer.run(self._stop)
        except Exception as error:
            self.last_error = repr(error)
            log.exception("Kafka consumer stopped")

    def start(self) -> None:
        self._thread.start()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        self.consumer.close()

