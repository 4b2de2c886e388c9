"""Contexts: the block for a main session's prompt, and the evidence of one served."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Query
from fastapi.responses import PlainTextResponse

from api.auth import CallerDep, MemoryDep
from api.edge import EdgeRoute
from api.problems import not_found
from api.schemas.contexts import ContextPublic, ContextRequest
from domain.context import Context
from domain.errors import UnknownContext
from projections.contexts import context_json

router = APIRouter(tags=["contexts"], route_class=EdgeRoute)
SessionId = Annotated[str, Path(min_length=1, max_length=256, pattern=r"^\S(.*\S)?$")]
ContextId = Annotated[str, Path(min_length=5, max_length=128, pattern=r"^ctx-[A-Za-z0-9_-]+$")]
Format = Annotated[Literal["json", "markdown"], Query(description="`markdown`: only the block.")]
RESPONSES: dict[int | str, dict[str, Any]] = {200: {"content": {"text/markdown": {"schema": {"type": "string"},
                                                                "example": "# Context for ...\n## Hard ..."}}}}


@router.post("/sessions/{session_id}/context", response_model=ContextPublic, responses=RESPONSES)
def session_context(session_id: SessionId, request: ContextRequest, caller: CallerDep, memory: MemoryDep,
                    format: Format = "json") -> Any:
    """The context block for a main session, compiled for this request: hard constraints, the perspective
    (focus from the message and recent turns), live workers, the rolling summary, the recent turns, within the
    budget. Records the facts shown clearly as recalled (mode `pushed`); 422 if the hard constraints alone do
    not fit (they are never cut)."""
    served = memory.reading.context(caller, session_id, request.message, request.budget_tokens, request.min_position)
    if format == "markdown":
        return PlainTextResponse(served.text, media_type="text/markdown; charset=utf-8",
                                 headers={"X-Context-Id": served.context_id})
    return ContextPublic.model_validate(context_json(served))


@router.get("/contexts/{context_id}/explain", response_model=Context)
def explain_context(context_id: ContextId, caller: CallerDep, memory: MemoryDep) -> Context:
    """The evidence of a served context: inputs, parameters, the perspective, every block with its ids, the cuts."""
    try:
        return memory.reading.explain_context(caller, context_id)
    except UnknownContext:
        raise not_found(f"no context {context_id!r} in your tenant", "path.context_id") from None
