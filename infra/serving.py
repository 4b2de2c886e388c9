"""What `noumena serve` runs beside the API in one process: the projector following the log into DuckDB, read
connections on the same database for the API's reads, and the Kafka consumer when Kafka is configured.

Read-your-writes: a write returns its log position; a read that names one waits (bounded) until the projector
has applied it. Writers nudge the follower so that wait is usually one DuckDB transaction, not a poll interval.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import duckdb

from infra.bootstrap import Noumena
from projections.files import ProjectionFiles
from projections.projector import Projector
from projections.snapshot import remove_stale_temporaries

log = logging.getLogger(__name__)


class ProjectionFollower:
    """Owns the live DuckDB file for this process: one thread writes it, any thread reads through cursors."""

    def __init__(self, noumena: Noumena, *, publish_snapshots: bool = True) -> None:
        settings = noumena.settings
        self._log = noumena.log
        self._files = ProjectionFiles(settings.home)
        self._poll = settings.projection_poll_interval
        self._snapshot_interval = settings.snapshot_interval if publish_snapshots else 0.0
        self._projector = Projector(noumena.log, self._files.live, batch_size=settings.projection_batch_size)
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
        with self._cursor_lock:
            for cursor in self._cursors:
                cursor.close()
            self._cursors.clear()
            self._read_base.close()
        self._projector.close()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        last_publish, published = time.monotonic(), -1
        while not self._stop.is_set():
            self._wake.clear()
            try:
                applied = self._projector.run_once()
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
            if due and published != self.position and not applied:
                try:
                    published, last_publish = self._projector.publish(self._files.snapshot), time.monotonic()
                except Exception:
                    log.exception("snapshot publication failed")
                    last_publish = time.monotonic()
            if not applied:
                self._wake.wait(self._poll)

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
        cursor = getattr(self._local, "cursor", None)
        if cursor is None:
            with self._cursor_lock:
                cursor = self._read_base.cursor()
                cursor.execute("SET TimeZone = 'UTC'")
                self._cursors.append(cursor)
            self._local.cursor = cursor
        yield cursor


class KafkaFollower:
    """The Kafka consumer of consumers/kafka_consumer.py in a background thread."""

    def __init__(self, noumena: Noumena) -> None:
        from consumers.kafka_consumer import SessionEventConsumer

        self.consumer: Any = SessionEventConsumer(noumena)
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

    def metrics_text(self) -> str:
        return str(self.consumer.metrics.render())
