"""Recalls: an agent used facts. Each recall is a use that strengthens those facts for that agent only."""

from __future__ import annotations

from enum import StrEnum

from domain.events import DomainEvent


class RecallMode(StrEnum):
    PUSHED = "pushed"
    """Shown at full or gist clarity in a served perspective."""
    DEEPENED = "deepened"
    """Surfaced by a deeper look (one more hop, a lower threshold)."""
    USED = "used"
    """The agent said it used the fact."""
    LOOKED_UP = "looked_up"
    """The agent went looking for it (a tier-aware recall)."""


class FactsRecalled(DomainEvent):
    topic = "facts.recalled"

    agent: str
    fact_ids: tuple[str, ...]
    mode: RecallMode
    perspective_id: str | None = None
