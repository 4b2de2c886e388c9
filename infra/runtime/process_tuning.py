"""Process-wide settings that belong to the program, not to a library: only entry points call these (the
`noumena` CLI's main, which serves HTTP and MCP, imports and consumes; benchmarks that measure a path as served).
Code that embeds noumena (tests, an application importing `bootstrap`) keeps its interpreter's own settings."""

from __future__ import annotations

import gc


def tune_collector_for_a_long_lived_heap() -> None:
    """A folded ontology is a large, long-lived heap of small objects. With the default thresholds a growing heap
    is scanned whole after every few tens of thousands of surviving allocations; with these, only after millions.
    The young generations stay small, because every collection holds the interpreter lock while requests wait: a
    young generation of 5,000 objects is collected in about a millisecond, ten times that pauses requests
    visibly (docs/operations.md)."""
    gc.set_threshold(5_000, 10, 100)
