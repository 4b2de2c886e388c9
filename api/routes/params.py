"""Query parameters shared by several routes."""

from __future__ import annotations

from typing import Annotated

from fastapi import Query

from api.schemas.common import MIN_POSITION_TEXT

MinPosition = Annotated[int | None, Query(ge=0, le=2**62, description=MIN_POSITION_TEXT)]
Skip = Annotated[int, Query(ge=0, le=10_000_000, description="How many rows to skip.")]
Limit = Annotated[int, Query(ge=1, le=1000, description="Most rows in this page.")]
