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

STEP = 1_000
"""Entries freed between two pauses that leave the interpreter to the process's other threads."""
PAUSE = 0.001
"""Seconds of each pause: a step frees its entries in well under that, so requests keep most of the interpreter
(a bare yield gave it straight back to this thread whenever no request happened to be waiting that instant)."""


def take_apart(containers: Iterable[Any]) -> None:
    """Empty each dict, set and list among `containers`, `STEP` entries at a time, yielding between steps (anything
    else among them is left to its references)."""
    for value in containers:
        kind = type(value)
        if kind is list:
            while value:
                del value[-STEP:]
                time.sleep(PAUSE)  # (requests first: the memory is no one's hurry)
        elif kind is dict or kind is set:
            take = value.popitem if kind is dict else value.pop
            while value:
                for _ in range(min(len(value), STEP)):
                    take()
                time.sleep(PAUSE)


def release_in_background(containers: Iterable[Any]) -> None:
    """`take_apart(containers)` in a thread of its own: the caller goes on at once (and may hold a lock)."""
    threading.Thread(target=take_apart, args=(list(containers),), name="noumena-release", daemon=True).start()
