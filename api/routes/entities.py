"""Entities: register, get, search."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query
from pydantic import TypeAdapter, ValidationError

from api.auth import CallerDep, MemoryDep
from api.edge import EdgeRoute
from api.problems import ApiProblem, not_found
from api.routes.params import Limit, MinPosition, Skip
from api.schemas.entities import EntitiesPublic, EntityCreate, EntityPublic, EntityWritten
from domain.values import REF_SCHEMA_REGEX, Ref

router = APIRouter(prefix="/entities", tags=["entities"], route_class=EdgeRoute)
_REF = TypeAdapter(Ref)


def checked_ref(value: str, field: str) -> str:
    try:
        return _REF.validate_python(value)
    except ValidationError as error:
        raise ApiProblem(422, "invalid-input", "Invalid input", f"{field}: {error.errors()[0]['msg']}",
                         field=field) from None


@router.post("", response_model=EntityWritten)
def register_entity(entity: EntityCreate, caller: CallerDep, memory: MemoryDep) -> EntityWritten:
    """Register an entity (a reference to something that lives elsewhere); again: a no-op or an update."""
    written = memory.register_entity(caller, entity.ref, entity.label, entity.aliases, entity.hub)
    return EntityWritten(position=written.position, events=written.events, ref=entity.ref)


@router.get("", response_model=EntitiesPublic)
def search_entities(caller: CallerDep, memory: MemoryDep, skip: Skip = 0, limit: Limit = 50,
                    min_position: MinPosition = None,
                    q: Annotated[str, Query(max_length=200, description="Text to find in refs, labels and"
                                            " aliases (case-insensitive); empty: all.")] = "") -> EntitiesPublic:
    """Search entities by ref, label or alias; exact label or alias matches first."""
    rows, count = memory.search_entities(caller, q, skip, limit, min_position)
    return EntitiesPublic(data=[EntityPublic(**row) for row in rows], count=count)


@router.get("/{ref:path}", response_model=EntityPublic)
def get_entity(ref: Annotated[str, Path(description="The entity ref, e.g. `person:li` (slashes allowed).",
                                       json_schema_extra={"pattern": REF_SCHEMA_REGEX, "maxLength": 512})],
               caller: CallerDep, memory: MemoryDep, min_position: MinPosition = None) -> EntityPublic:
    """One entity as it is now."""
    row = memory.entity(caller, checked_ref(ref, "path.ref"), min_position)
    if row is None:
        raise not_found(f"no entity {ref!r} in your tenant", "path.ref")
    return EntityPublic(**row)
