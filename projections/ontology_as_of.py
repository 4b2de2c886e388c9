"""What the log says was believed at a moment: fold a tenant's events recorded at or before T.

This is the reference answer to "what did we believe at T", straight from the log, with no projection in
between. The DuckDB as-of views must agree with it.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from domain.events import DomainEvent
from domain.ontology import Ontology


def believed_at(tenant: str, events: Iterable[DomainEvent], at: datetime | None = None) -> Ontology:
    """Fold the tenant's events whose transaction time is at or before `at` (all of them when `at` is None)."""
    state = Ontology(tenant=tenant)
    for event in events:
        if event.tenant != tenant:
            continue
        if at is not None and event.recorded_at > at:
            break  # the log is in transaction-time order: nothing later can be at or before `at`
        state.apply(event)
    return state
