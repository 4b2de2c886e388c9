"""Facts: typed edges with reason, provenance, valid time, confidence and scope."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from api.schemas.common import WritePublic
from api.schemas.graph import GraphFactPublic
from domain.commands import FactEnding, FactStatement, Source
from domain.values import Identifier


class SourceIn(Source):
    """Provenance: the session and messages a fact came from, and who extracted it."""

    message_ids: tuple[Identifier, ...] = Field(default=(), max_length=1000)


class FactCreate(FactStatement):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{
        "subject": "person:li", "relation": "prefers", "object": "memory:li-monthly-settlement",
        "reason": "Li said so on the third call", "confidence": 0.9, "scope": "org",
        "source": {"session_id": "wang-main", "message_ids": ["m7"], "actor": "agent:wang-assistant"}}]})

    source: SourceIn | None = None


class FactInvalidate(FactEnding):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"reason": "the quote failed: the exchange rate moved", "valid_to": "2026-09-10T10:00:00+08:00"}]})

    source: SourceIn | None = None


class FactWritten(WritePublic):
    fact_id: str | None = Field(description="The fact asserted, corroborated or invalidated.")
    change: str | None = Field(description="asserted | corroborated | invalidated | corrected; null for a repeat.",
                               examples=["asserted"])
    supersedes: str | None = Field(default=None, description="The fact this one replaced (functional relation).")


class FactVersionPublic(GraphFactPublic):
    """One state of the fact, on both time axes (half-open intervals)."""

    version: int
    ended_reason: str | None = None
    position_from: int | None = None
    position_to: int | None = None


class FactChangePublic(BaseModel):
    """One change to the fact, with its provenance."""

    position: int
    recorded_at: datetime
    change: str = Field(examples=["corroborated"])
    reason: str | None = None
    confidence: float | None = None
    previous_confidence: float | None = None
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    superseded_by: str | None = None
    supersedes: str | None = None
    cause: str | None = None
    session_id: str | None = None
    message_ids: list[str] | None = None
    actor: str | None = None
    occurred_at: datetime | None = None
    event_id: str | None = None


class FactPublic(BaseModel):
    """A fact now, every version it went through, and every change with its provenance."""

    fact_id: str
    current: FactVersionPublic
    versions: list[FactVersionPublic]
    changes: list[FactChangePublic]
