"""CPU priority of the work a forget leaves behind it (the rebuild of the read model, the fold of a tenant's whole
log): it may take as long as it needs, but never a CPU a request could have.

A lower `nice` is not enough for that. The serving process hands its interpreter lock from thread to thread many
times per request, and each hand-off wakes a thread that must first get a CPU; beside a niced task still in its
slice it waits for it, while the lock sits idle. Under Linux's idle scheduling class (`SCHED_IDLE`) a task is
preempted at once by any other task that wakes, and a CPU running only such tasks counts as free when a waking
thread is placed. Elsewhere (or where the class cannot be set) the niceness stands in for it.
"""

from __future__ import annotations

import os
import threading

BACKGROUND_NICENESS = 10
"""Where the idle class cannot be had: the niceness used instead."""


def lower_to_background(*, thread_only: bool = False) -> str:
    """Put the calling process (`thread_only`: the calling thread only, on Linux) in the idle class, else lower its
    priority to `BACKGROUND_NICENESS`; returns which ('idle' or 'nice'). Threads started afterwards inherit it.
    There is no way back without privileges: call it in a process or thread that does only such work."""
    target = threading.get_native_id() if thread_only else 0
    if hasattr(os, "sched_setscheduler") and hasattr(os, "SCHED_IDLE"):
        try:
            os.sched_setscheduler(target, os.SCHED_IDLE, os.sched_param(0))
            return "idle"
        except OSError:
            pass
    if thread_only and not hasattr(os, "sched_setscheduler"):
        return "nice"  # (setpriority of a thread id is Linux's; elsewhere a thread keeps the process's priority)
    if hasattr(os, "setpriority"):
        current = os.getpriority(os.PRIO_PROCESS, target)
        os.setpriority(os.PRIO_PROCESS, target, max(current, BACKGROUND_NICENESS))
    return "nice"
