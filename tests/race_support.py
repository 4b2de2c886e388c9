"""A writer thread beside a test's own reads or writes, for race tests: it runs `step(1)`, `step(2)`, ... until the
block ends, with the interpreter switching threads often, so that a race shows within a few rounds when it is
there."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass
class Writer:
    written: int = 0
    """Steps completed."""
    failures: list[Exception] = field(default_factory=list)
    """What stopped the writer (it stops at its first failure)."""


@contextmanager
def writer_beside(step: Callable[[int], None]) -> Iterator[Writer]:
    stop = threading.Event()
    writer = Writer()

    def run() -> None:
        try:
            while not stop.is_set():
                step(writer.written + 1)
                writer.written += 1
        except Exception as error:  # (the test asserts there is none)
            writer.failures.append(error)

    thread = threading.Thread(target=run, daemon=True)
    switching = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    thread.start()
    try:
        yield writer
    finally:
        stop.set()
        thread.join(30)
        sys.setswitchinterval(switching)
