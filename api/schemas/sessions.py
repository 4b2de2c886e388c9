"""Sessions: an agent's main session and the workers it dispatched."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field


class SessionPublic(BaseModel):
    session_id: str = Field(examples=["wang-main"])
    agent: str = Field(examples=["agent:wang-assistant"])
    kind: str = Field(examples=["main"])
    serving: str | None = None
    parent_session_id: str | None = None
    task: str | None = None
    about: list[str] | None = None
    status: str | None = None
    last_summary: str | None = None
    ended: bool | None = None
    messages: int | None = None
    compactions: int | None = None
    started_at: datetime | None = None
    updated_at: datetime | None = None


class WorkersPublic(BaseModel):
    """The worker sessions a main session dispatched: who holds which task, about what, how far along."""

    session: SessionPublic
    data: list[SessionPublic]
    count: int
