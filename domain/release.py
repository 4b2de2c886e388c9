"""Letting go of a large structure without pausing the process.

A structure of a large tenant (a folded state, a search index) dropped by its last reference is freed in one
cascade of deallocations, and the cascade holds the interpreter lock from start to end: every other thread of the
process, every request served, waits for it. Emptied container by container and entry by entry from Python, the
same memory is freed in steps between which the other threads run. The caller hands over only containers that no
one reads any more (taken out under the lock their readers hold) and that are its own, never one it shares with
another structure."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from typing import Any

STEP = 64
"""Entries freed between two looks at the clock (freeing one costs from well under a microsecond to a few, with
what only it referred to)."""
WORK = 0.0005
"""Seconds of freeing between two pauses."""
PAUSE = 0.002
"""Seconds of each pause, several times the work: the interpreter is the requests' first. The event loop gives it
up at every socket call and must win it back each time, so a thread that holds it most of the time, even in short
steps, has every request answered late; at this pace a large structure takes seconds to free, and no one waits for
the memory."""


def take_apart(containers: Iterable[Any]) -> None:
    """Empty each dict, set and list among `containers`, `STEP` entries at a time, pausing after every `WORK`
    seconds of it (anything else among them is left to its references)."""
    clock = time.perf_counter
    until = clock() + WORK
    for value in containers:
        kind = type(value)
        if kind is list:
            while value:
                del value[-STEP:]
                if clock() >= until:
                    time.sleep(PAUSE)  # (requests first: the memory is no one's hurry)
                    until = clock() + WORK
        elif kind is dict or kind is set:
            take = value.popitem if kind is dict else value.pop
            while value:
                for _ in range(min(len(value), STEP)):
                    take()
                if clock() >= until:
                    time.sleep(PAUSE)
                    until = clock() + WORK


def release_in_background(containers: Iterable[Any]) -> None:
    """`take_apart(containers)` in a thread of its own: the caller goes on at once (and may hold a lock)."""
    threading.Thread(target=take_apart, args=(list(containers),), name="noumena-release", daemon=True).start()
