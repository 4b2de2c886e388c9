"""The graph as believed at a moment."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from domain.facts import FactFields


class GraphFactPublic(FactFields):
    """A fact as believed at a moment: its state, its sources and when the belief was recorded (half-open)."""

    status: str = Field(examples=["current"])
    asserted_at: datetime | None = None
    sources: int | None = None
    superseded_by: str | None = None
    supersedes: str | None = None
    recorded_from: datetime
    recorded_to: datetime | None = None


class GraphPublic(BaseModel):
    """A page of the facts believed at `recorded_at` (and holding at `valid_at`, when given)."""

    recorded_at: datetime | None = Field(description="Transaction time asked for; null: now.")
    valid_at: datetime | None = None
    data: list[GraphFactPublic]
    count: int
