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
WORK = 0.001
"""Seconds of freeing between two pauses."""
PAUSE = 0.02
"""Seconds of each pause, many times the work: the interpreter is the requests' first. A thread that wants the
interpreter back makes its holder give it up, and the requests' threads (the event loop at every socket call, each
walk at its engine's lock) must each win it back: a freeing thread that wakes often makes every request wait behind
those handovers, even if it works little each time. At this pace a large structure takes tens of seconds to free,
and no one waits for the memory."""


class Pacer:
    """Paces a long run of short Python steps made in the background while the process serves: called between two
    steps, it sleeps `pause` seconds once `work` seconds of steps have run since the last pause."""

    def __init__(self, work: float = WORK, pause: float = PAUSE) -> None:
        self._work, self._pause = work, pause
        self._clock = time.perf_counter
        self._until = self._clock() + work

    def __call__(self) -> None:
        if self._clock() >= self._until:
            time.sleep(self._pause)
            self._until = self._clock() + self._work


def take_apart(containers: Iterable[Any]) -> None:
    """Empty each dict, set and list among `containers`, `STEP` entries at a time, pausing after every `WORK`
    seconds of it (anything else among them is left to its references)."""
    pace = Pacer()
    for value in containers:
        kind = type(value)
        if kind is list:
            while value:
                del value[-STEP:]
                pace()  # (requests first: the memory is no one's hurry)
        elif kind is dict or kind is set:
            take = value.popitem if kind is dict else value.pop
            while value:
                for _ in range(min(len(value), STEP)):
                    take()
                pace()


def release_in_background(containers: Iterable[Any]) -> None:
    """`take_apart(containers)` in a thread of its own: the caller goes on at once (and may hold a lock)."""
    threading.Thread(target=take_apart, args=(list(containers),), name="noumena-release", daemon=True).start()
