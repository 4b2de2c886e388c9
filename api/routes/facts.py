"""Facts: assert, invalidate, and one fact with its full history and provenance."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from api.auth import CallerDep, MemoryDep
from api.edge import EdgeRoute
from api.problems import not_found
from api.routes.params import MinPosition
from api.schemas.facts import FactChangePublic, FactCreate, FactInvalidate, FactPublic, FactVersionPublic, FactWritten
from domain.commands import Source

router = APIRouter(prefix="/facts", tags=["facts"], route_class=EdgeRoute)
FactId = Annotated[str, Path(min_length=1, max_length=256, pattern=r"^[^\s\x00-\x1f\x7f\x85]+$",
                              description="A fact id.")]


def _source(source: object) -> Source | None:
    return None if source is None else Source.model_validate(source, from_attributes=True)


@router.post("", response_model=FactWritten)
def assert_fact(fact: FactCreate, caller: CallerDep, memory: MemoryDep) -> FactWritten:
    """Assert a fact with its reason and provenance. The same fact again corroborates it (confidence rises);
    a new object for a functional relation supersedes the current one in the same write."""
    fields = fact.model_dump(exclude={"source"})
    written = memory.facts.assert_fact(caller, **fields, source=_source(fact.source))
    return FactWritten(position=written.position, events=written.events, fact_id=written.fact_id,
                       change=written.change, supersedes=written.supersedes)


@router.post("/{fact_id}/invalidate", response_model=FactWritten)
def invalidate_fact(fact_id: FactId, body: FactInvalidate, caller: CallerDep, memory: MemoryDep) -> FactWritten:
    """End a current fact. It is marked, never deleted: what was believed then stays answerable."""
    written = memory.facts.invalidate_fact(caller, fact_id=fact_id, reason=body.reason, valid_to=body.valid_to,
                                           source=_source(body.source))
    return FactWritten(position=written.position, events=written.events, fact_id=written.fact_id or fact_id,
                       change=written.change)


@router.get("/{fact_id}", response_model=FactPublic)
def get_fact(fact_id: FactId, caller: CallerDep, memory: MemoryDep, min_position: MinPosition = None) -> FactPublic:
    """One fact: its state now, every version on both time axes, and every change with its provenance."""
    versions, changes = memory.views.fact(caller, fact_id, min_position)
    if not versions:
        raise not_found(f"no fact {fact_id!r} in your tenant", "path.fact_id")
    public = [FactVersionPublic(**v) for v in versions]
    return FactPublic(fact_id=fact_id, current=public[-1], versions=public,
                      changes=[FactChangePublic(**c) for c in changes])
