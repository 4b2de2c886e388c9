"""The graph as believed at a moment."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field


class GraphFactPublic(BaseModel):
    fact_id: str
    subject: str
    relation: str
    object: str
    scope: str
    reason: str | None = None
    confidence: float
    status: str
    valid_from: datetime | None = None
    valid_to: datetime | None = None
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
