"""Models shared by every resource."""

from __future__ import annotations

from pydantic import BaseModel, Field


class WritePublic(BaseModel):
    """What every write returns: the log position to pass as `min_position` to a later read."""

    position: int | None = Field(description="Log position of the last event written; null when the request"
                                 " repeated one already stored and nothing new was written.", examples=[42])
    events: int = Field(description="How many events were written.", examples=[1])
