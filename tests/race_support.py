"""For race tests: a writer thread beside a test's own reads or writes (`writer_beside`: it runs `step(1)`,
`step(2)`, ... until the block ends, with the interpreter switching threads often, so that a race shows within a few
rounds when it is there), and waiting for a condition with a deadline instead of for a fixed time (`wait_until`)."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass
class Writer:
    written: int = 0
    """Steps completed."""
    failures: list[Exception] = field(default_factory=list)
    """What stopped the writer (it stops at its first failure)."""


def wait_until(condition: Callable[[], bool], seconds: float, what: str) -> None:
    """Return as soon as `condition()` holds; fail the test, naming `what` did not happen, after `seconds`."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"{what} within {seconds:g} s"
        time.sleep(0.005)


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
