"""Facts: typed edges with reason, provenance, valid time, confidence and scope."""

from __future__ import annotations

from datetime import datetime
from typing import Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from api.schemas.common import WritePublic
from domain.values import Confidence, Identifier, Ref, RelationName, Scope, Text, ValidTime, text


class SourceIn(BaseModel):
    """Provenance: the session and messages a fact came from, and who extracted it."""

    model_config = ConfigDict(extra="forbid")

    session_id: Identifier | None = None
    message_ids: list[Identifier] = Field(default_factory=list, max_length=1000)
    actor: text(1, 200) | None = None


class FactCreate(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{
        "subject": "person:li", "relation": "prefers", "object": "memory:li-monthly-settlement",
        "reason": "Li said so on the third call", "confidence": 0.9, "scope": "org",
        "source": {"session_id": "wang-main", "message_ids": ["m7"], "actor": "agent:wang-assistant"}}]})

    subject: Ref
    relation: RelationName
    object: Ref
    reason: Text | None = None
    confidence: Confidence | None = Field(default=None, description="0..1; default 0.8.")
    valid_from: ValidTime | None = Field(default=None, description="When it began to hold (default: now). A value "
                                         "of a functional relation placed in the past is inserted into its timeline.")
    valid_to: ValidTime | None = Field(default=None, description="When it stopped holding (default: open; for a "
                                       "functional relation, until its next value starts).")
    scope: Scope = Field(default="org", description="`org`, `person:<ref>` or `session:<id>`.")
    source: SourceIn | None = None

    @model_validator(mode="after")
    def _interval(self) -> Self:
        if self.valid_from is not None and self.valid_to is not None and self.valid_to <= self.valid_from:
            raise ValueError("valid_to must be after valid_from")
        return self


class FactInvalidate(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"reason": "the quote failed: the exchange rate moved", "valid_to": "2026-09-10T10:00:00+08:00"}]})

    reason: Text
    valid_to: ValidTime | None = Field(default=None, description="When it stopped holding (default: now). For a "
                                       "fact already ended, an earlier valid_to corrects its end.")
    source: SourceIn | None = None


class FactWritten(WritePublic):
    fact_id: str | None = Field(description="The fact asserted, corroborated or invalidated.")
    change: str | None = Field(description="asserted | corroborated | invalidated | corrected; null for a repeat.",
                               examples=["asserted"])
    supersedes: str | None = Field(default=None, description="The fact this one replaced (functional relation).")


class FactVersionPublic(BaseModel):
    """One state of the fact, on both time axes (half-open intervals)."""

    fact_id: str
    version: int
    subject: str
    relation: str
    object: str
    scope: str
    reason: str | None = None
    confidence: float
    status: str = Field(examples=["current"])
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    asserted_at: datetime | None = None
    sources: int | None = None
    superseded_by: str | None = None
    supersedes: str | None = None
    ended_reason: str | None = None
    recorded_from: datetime
    recorded_to: datetime | None = None
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
