"""Entities: register, get, search."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query
from pydantic import TypeAdapter, ValidationError

from api.auth import CallerDep, MemoryDep
from api.edge import EdgeRoute
from api.problems import ApiProblem, not_found
from api.routes.params import Limit, MinPosition, Skip
from api.schemas.entities import EntitiesPublic, EntityCreate, EntityFoundPublic, EntityPublic, EntityWritten
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
    written = memory.facts.register_entity(caller, entity.ref, entity.label, entity.aliases, entity.hub)
    return EntityWritten(position=written.position, events=written.events, ref=entity.ref)


@router.get("", response_model=EntitiesPublic)
def find_entities(caller: CallerDep, memory: MemoryDep, skip: Skip = 0, limit: Limit = 50,
                  min_position: MinPosition = None,
                  q: Annotated[str, Query(max_length=200, description="A name, in any script: a label, an alias,"
                                          " a ref or its identifier, or the start of one, a word of one, a typo"
                                          " of one. Empty: every entity (a tenant-wide key only).",
                                          examples=["王总"])] = "",
                  kind: Annotated[str | None, Query(pattern=r"^[a-z][a-z0-9_-]{0,63}$", description="Only"
                                                    " entities of this kind (refs `kind:...`), e.g. `agent`;"
                                                    " with an empty `q`, a tenant-wide key only.")] = None,
                  ) -> EntitiesPublic:
    """Find entities by name, best first: `score`, how it matched (`match`) and on which name (`matched`). An
    agent-scoped key finds its agents, the persons they serve and the organization's other entities only."""
    if not q.strip() and kind:
        listed, count = memory.entities.entities_of_kind(caller, kind, skip, limit, min_position)
        return EntitiesPublic(data=[EntityFoundPublic(ref=e.ref, label=e.label, kind=e.kind, aliases=list(e.aliases),
                                                      hub=e.hub) for e in listed], count=count)
    if not q.strip():
        rows, count = memory.entities.search_entities(caller, "", skip, limit, min_position)
        return EntitiesPublic(data=[EntityFoundPublic(ref=row["ref"], label=row["label"],
                                                      kind=row["ref"].partition(":")[0],
                                                      aliases=row["aliases"] or [], hub=row["hub"])
                                    for row in rows], count=count)
    found, count = memory.entities.find_entities(caller, q, skip + limit, min_position, kind)
    return EntitiesPublic(data=[EntityFoundPublic(ref=f.ref, label=f.label, kind=f.kind, aliases=list(f.aliases),
                                                  hub=f.hub, score=f.score, match=f.match, matched=f.matched)
                                for f in found[skip:]], count=count)


@router.get("/{ref:path}", response_model=EntityPublic)
def get_entity(ref: Annotated[str, Path(description="The entity ref, e.g. `person:li` (slashes allowed).",
                                       json_schema_extra={"pattern": REF_SCHEMA_REGEX, "maxLength": 512})],
               caller: CallerDep, memory: MemoryDep, min_position: MinPosition = None) -> EntityPublic:
    """One entity as it is now."""
    row = memory.entities.entity(caller, checked_ref(ref, "path.ref"), min_position)
    if row is None:
        raise not_found(f"no entity {ref!r} in your tenant", "path.ref")
    return EntityPublic(**row)
