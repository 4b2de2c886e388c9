"""The graph as believed at T, a page at a time."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from api.auth import CallerDep, MemoryDep
from api.edge import EdgeRoute
from api.routes.params import Limit, MinPosition, Skip
from api.schemas.graph import GraphFactPublic, GraphPublic
from domain.values import Timestamp

router = APIRouter(prefix="/graph", tags=["graph"], route_class=EdgeRoute)


@router.get("", response_model=GraphPublic)
def graph_as_of(
    caller: CallerDep, memory: MemoryDep, skip: Skip = 0, limit: Limit = 100, min_position: MinPosition = None,
    recorded_at: Annotated[Timestamp | None, Query(description="Transaction time: what was believed then"
                                                       " (default: now). ISO 8601 with a zone.")] = None,
    valid_at: Annotated[Timestamp | None, Query(description="Valid time: only facts that held in the world"
                                                    " then (current or since invalidated).")] = None,
) -> GraphPublic:
    """The facts believed at `recorded_at` (the `facts_as_of` macro), ordered by fact id, paged."""
    rows, count = memory.views.graph(caller, recorded_at, valid_at, skip, limit, min_position)
    return GraphPublic(recorded_at=recorded_at, valid_at=valid_at, data=[GraphFactPublic(**r) for r in rows],
                       count=count)
