"""Search: recall by content, and the evidence of one served."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path
from fastapi.responses import Response

from api.auth import CallerDep, MemoryDep
from api.edge import EdgeRoute
from api.problems import not_found
from api.schemas.search import SearchPublic, SearchRequest
from domain.errors import UnknownSearch
from domain.search import SearchAnswer
from projections.searches import search_json

router = APIRouter(tags=["search"], route_class=EdgeRoute)
SearchId = Annotated[str, Path(min_length=6, max_length=128, pattern=r"^srch-[A-Za-z0-9_-]+$")]


@router.post("/search", response_model=SearchPublic)
def search(request: SearchRequest, caller: CallerDep, memory: MemoryDep) -> Response:
    """The facts the agent may see (serving a person, in a session) that best match the query's content: BM25
    and embeddings fused, combined with the agent's activation and recency, near-duplicates removed, nearest
    tier first. Records the results as recalled by the agent (mode `looked_up`); an `as_of` search, or one with
    `record: false` (an observer's), records nothing."""
    agent = memory.entities.resolve_ref(caller, request.agent, "body.agent")
    serving = request.serving and memory.entities.resolve_ref(caller, request.serving, "body.serving")
    about = [memory.entities.resolve_ref(caller, ref, f"body.about.{i}") for i, ref in enumerate(request.about)]
    answer = memory.reading.search_for(caller, agent, request.query, serving=serving, session_id=request.session_id,
                                       k=request.k, as_of=request.as_of, min_position=request.min_position, about=about,
                                       record=request.record)
    # checked against the documented shape once, and serialized by pydantic's encoder (returning the model would
    # have FastAPI validate and encode it a second time)
    return Response(SearchPublic.model_validate(search_json(answer)).model_dump_json(), media_type="application/json")


@router.get("/searches/{search_id}/explain", response_model=SearchAnswer)
def explain_search(search_id: SearchId, caller: CallerDep, memory: MemoryDep) -> SearchAnswer:
    """The evidence of a served search: the request, the parameters, every item with its score components."""
    try:
        return memory.reading.explain_search(caller, search_id)
    except UnknownSearch:
        raise not_found(f"no search {search_id!r} in your tenant", "path.search_id") from None
