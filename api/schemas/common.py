"""Models shared by every resource."""

from __future__ import annotations

from pydantic import BaseModel, Field

MIN_POSITION_TEXT = ("Read-your-writes through another replica: wait (at most NOUMENA_API_READ_WAIT_SECONDS, then"
                     " 503) until this replica has applied this log position, as returned by a write. Writes through"
                     " this replica are waited for without it.")
"""What `min_position` means, on every read (a query parameter, or a field of a read's body)."""


class WritePublic(BaseModel):
    """What every write returns: the log position to pass as `min_position` to a later read."""

    position: int | None = Field(description="Log position of the last event written; null when the request"
                                 " repeated one already stored and nothing new was written.", examples=[42])
    events: int = Field(description="How many events were written.", examples=[1])
