"""Query parameters shared by several routes."""

from __future__ import annotations

from typing import Annotated

from fastapi import Query

MinPosition = Annotated[int | None, Query(
    ge=0, le=2**62, description="Read-your-writes: wait (at most NOUMENA_API_READ_WAIT_SECONDS, then 503) until"
    " the read model has applied this log position, as returned by a write.")]
Skip = Annotated[int, Query(ge=0, le=10_000_000, description="How many rows to skip.")]
Limit = Annotated[int, Query(ge=1, le=1000, description="Most rows in this page.")]
