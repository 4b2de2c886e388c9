"""What `noumena serve` runs beside the API in one process: the projector following the log into DuckDB, read
connections on the same database for the API's reads, and the Kafka consumer when Kafka is configured.

Read-your-writes: a write returns its log position; a read that names one waits (bounded) until the projector
has applied it. Writers nudge the follower so that wait is usually one DuckDB transaction, not a poll interval.

Forgetting: when the projector applies a `subject.forgotten` event (written by this process or any other), the
follower rebuilds the live file from the log (projections/purge.py: the forgotten content now reads
`[forgotten]`) and tells its listeners (the perspective indexes) to reload, before it reports the position.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import duckdb

from domain.errors import InfrastructureError
from infra.settings import Settings
from projections import read_model
from projections.files import ProjectionFiles
from projections.projector import Projector
from projections.purge import purge_projections
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
        self._projector = Projector(log, self._files.live, batch_size=settings.projection_batch_size)
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
        self.on_purged: list[Callable[[], None]] = []
        """Called (in the follower's thread) after a purge, before the new position is reported."""
        self._generation = 0
        self._readers = 0
        self._swap = threading.Condition()
        self._swapping = False
        self._settings = settings

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        if self._snapshot_interval > 0:
            remove_stale_temporaries(self._files.snapshot)
        self._thread = threading.Thread(target=self._run, name="noumena-projector", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
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
                if applied and self._forgotten_since(before):
                    self._purge()
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
            if (requested or (due and published != self.position)) and not applied:
                try:
                    published, last_publish = self._projector.publish(self._files.snapshot), time.monotonic()
                except Exception:
                    log.exception("snapshot publication failed")
                    last_publish = time.monotonic()
                if requested:
                    self._files.snapshot_request.unlink(missing_ok=True)
            if not applied:
                self._wake.wait(self._poll)

    def _forgotten_since(self, position: int) -> bool:
        row = self._projector.con.execute("SELECT count(*) FROM clock WHERE position > ? AND topic = ?",
                                          [position, "subject.forgotten"]).fetchone()
        return bool(row and row[0])

    def _purge(self) -> None:
        """Rebuild the live file without forgotten content; readers wait meanwhile, then reconnect."""
        with self._swap:
            self._swapping = True
            self._swap.wait_for(lambda: self._readers == 0)
            try:
                self._close_connections()
                purge_projections(self._log, self._settings.home)
                self._projector = Projector(self._log, self._files.live,
                                            batch_size=self._settings.projection_batch_size)
                self._read_base = self._projector.con.cursor()
                self._generation += 1
                self.purges += 1
            finally:
                self._swapping = False
                self._swap.notify_all()
        for listener in self.on_purged:
            listener()

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
        """A read connection on the live database for this thread (a snapshot of the last committed batch)."""
        with self._swap:
            self._swap.wait_for(lambda: not self._swapping)
            self._readers += 1
        try:
            cached = getattr(self._local, "cursor", None)
            if cached is None or cached[0] != self._generation:
                with self._cursor_lock:
                    cursor = self._read_base.cursor()
                    cursor.execute("SET TimeZone = 'UTC'")
                    self._cursors.append(cursor)
                cached = self._local.cursor = (self._generation, cursor)
            yield cached[1]
        finally:
            with self._swap:
                self._readers -= 1
                self._swap.notify_all()


class FollowedReadModel:
    """The read-model port (domain/ports.py `ReadModel`) over this process's projector: queries of
    projections/read_model.py on the follower's read connections; DuckDB errors become InfrastructureError."""

    def __init__(self, follower: ProjectionFollower) -> None:
        self.follower = follower

    @property
    def position(self) -> int:
        return self.follower.position

    def nudge(self) -> None:
        self.follower.nudge()

    def wait_for(self, position: int, timeout: float) -> bool:
        return self.follower.wait_for(position, timeout)

    def lag(self) -> int:
        return self.follower.lag()

    def _query(self, query: Callable[..., Any], *args: Any) -> Any:
        with self.follower.reader() as con:
            try:
                return query(con, *args)
            except duckdb.Error as error:
                raise InfrastructureError(f"read model query failed: {error}") from error

    def entity(self, tenant: str, ref: str) -> dict[str, Any] | None:
        return self._query(read_model.entity, tenant, ref)  # type: ignore[no-any-return]

    def search_entities(self, tenant: str, text: str, skip: int, limit: int) -> tuple[list[dict[str, Any]], int]:
        return self._query(read_model.search_entities, tenant, text, skip, limit)  # type: ignore[no-any-return]

    def fact_history(self, tenant: str, fact_id: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        return self._query(read_model.fact_history, tenant, fact_id)  # type: ignore[no-any-return]

    def graph_as_of(self, tenant: str, recorded_at: Any, valid_at: Any, skip: int, limit: int
                    ) -> tuple[list[dict[str, Any]], int]:
        return self._query(read_model.graph_as_of, tenant, recorded_at, valid_at, skip,  # type: ignore[no-any-return]
                           limit)

    def session(self, tenant: str, session_id: str) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
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

