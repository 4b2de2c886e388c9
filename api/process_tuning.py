"""Process-wide settings that belong to the program, not to a library: only entry points call these (the
`noumena` CLI's main, which serves HTTP and MCP, imports and consumes; benchmarks that measure a path as served).
Code that embeds noumena (tests, an application importing `bootstrap`) keeps its interpreter's own settings."""

from __future__ import annotations

import gc
import os

NUMERIC_THREADS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def tune_collector_for_a_long_lived_heap() -> None:
    """A folded ontology is a large, long-lived heap of small objects. With the default thresholds a growing heap
    is scanned whole after every few tens of thousands of surviving allocations; with these, only after millions.
    The young generations stay small, because every collection holds the interpreter lock while requests wait: a
    young generation of 5,000 objects is collected without a pause a request would notice; ten times that is not
    (docs/operations.md)."""
    gc.set_threshold(5_000, 10, 100)


def one_thread_per_numeric_call() -> None:
    """numpy's BLAS (OpenBLAS) starts a thread per core for a matrix product and spins them between calls. A
    search's products are small (a few thousand vectors of 256 values), the process serves requests on threads of
    its own, and the cores are shared: the extra threads cost more than they gain (on 2 cores under load, a search
    at 5,000 facts and turns took 3 times the wall time and 2.7 times the CPU with them). Only before numpy is
    first imported (OpenBLAS reads it when loaded); an operator's own setting of these variables wins."""
    for name in NUMERIC_THREADS:
        os.environ.setdefault(name, "1")
