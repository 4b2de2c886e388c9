"""Memory use: marking facts used, and recall by tier."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from api.schemas.common import MIN_POSITION_TEXT, WritePublic
from domain.facts import FactFields
from domain.values import Count, Flag, Identifier, Ref, RefOrName, RelationName


class UsedCreate(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"agent": "agent:wang-assistant", "fact_ids": ["5f1c0e9a2b7d4c3e8f6a1b2c3d4e5f60"]}]})

    agent: Ref
    fact_ids: list[Identifier] = Field(min_length=1, max_length=1000)
    perspective_id: Identifier | None = None


class RecallCreate(BaseModel):
    """Look facts about a subject up nearest tier first: the session, then the person served (episodic), then
    the org (semantic)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"agent": "agent:wang-assistant", "subject": "person:li", "serving": "person:wang"}]})

    agent: RefOrName = Field(description="The agent looking: its ref, or a name naming exactly one entity.")
    subject: RefOrName = Field(description="Facts with this entity at either end (ref or name).")
    relation: RelationName | None = Field(default=None, description="Only this relation.")
    serving: RefOrName | None = Field(default=None, description="The person served (ref or name): their episodic"
                                      " tier is searched.")
    session_id: Identifier | None = Field(default=None, description="The session tier (default: the agent's live"
                                          " main sessions serving that person).")
    deeper: Flag = Field(default=False, description="Also facts archived for disuse (they come back).")
    min_position: Count | None = Field(default=None, ge=0, description=MIN_POSITION_TEXT)


class RecalledFact(FactFields):
    tier: str = Field(description="session | episodic | semantic", examples=["episodic"])
    asserted_at: datetime | None = None


class RecallPublic(BaseModel):
    answered_by: str | None = Field(description="The nearest tier that had an answer; null: none did.")
    tiers_checked: list[str]
    data: list[RecalledFact]
    count: int
    restored: list[str] = Field(default_factory=list, description="Facts a deeper recall brought back.")
    position: int | None = Field(description="Log position of the recall recorded (looked_up or deepened).")


class UsedWritten(WritePublic):
    pass
