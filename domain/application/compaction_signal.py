"""The hook that lets `session.compacted` start consolidation without ever making ingestion wait.

Ingestion calls the hook after a write; the hook only puts the command on a bounded queue (`put_nowait`) and a
worker thread runs the handler. The log is the source of truth: a signal that does not fit in the queue is
counted and left for consolidation to find by following the log, never waited for.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

from domain.commands import Command, CompactSession

log = logging.getLogger(__name__)

Handler = Callable[[CompactSession], None]


class CompactionSignal:
    """An `Ingestor.on_stored` callback: hands stored `session.compacted` commands to a background handler."""

    def __init__(self, handler: Handler, capacity: int = 10_000) -> None:
        self._handler = handler
        self._queue: queue.Queue[CompactSession | None] = queue.Queue(maxsize=capacity)
        self.signalled = 0
        self.overflowed = 0
        self.failed = 0
        self._worker = threading.Thread(target=self._run, name="noumena-consolidation", daemon=True)
        self._worker.start()

    def __call__(self, command: Command) -> None:
        if not isinstance(command, CompactSession):
            return
        try:
            self._queue.put_nowait(command)
            self.signalled += 1
        except queue.Full:
            self.overflowed += 1

    def _run(self) -> None:
        while (command := self._queue.get()) is not None:
            try:
                self._handler(command)
            except Exception:
                self.failed += 1
                log.exception("consolidation handler failed for session %s", command.session_id)
            finally:
                self._queue.task_done()
        self._queue.task_done()

    def drain(self, timeout: float = 10.0) -> None:
        """Wait until every queued signal was handled (for tests and orderly shutdown)."""
        done = threading.Event()

        def join() -> None:
            self._queue.join()
            done.set()

        threading.Thread(target=join, daemon=True).start()
        done.wait(timeout)

    def close(self) -> None:
        try:
            self._queue.put_nowait(None)
        except queue.Full:
            pass  # daemon thread; it dies with the process
