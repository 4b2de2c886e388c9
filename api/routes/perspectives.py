"""Perspectives: get one, deepen it, explain it."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Query
from fastapi.responses import PlainTextResponse, Response
from starlette.concurrency import run_in_threadpool

from api.application import MemoryApplication
from api.auth import Caller, CallerDep, MemoryDep
from api.edge import EdgeRoute
from api.routes.params import MinPosition
from api.schemas.perspectives import ExplanationPublic, PerspectivePublic
from domain.values import Ref, Timestamp

router = APIRouter(prefix="/perspectives", tags=["perspectives"], route_class=EdgeRoute)
Format = Annotated[Literal["json", "markdown"], Query(description="`markdown`: only the context block.")]
Budget = Annotated[int | None, Query(ge=40, le=100_000, description="Token budget of the context block.")]
PerspectiveId = Annotated[str, Path(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_-]+$")]
RESPONSES: dict[int | str, dict[str, Any]] = {200: {"content": {"text/markdown": {"schema": {"type": "string"},
                                                                "example": "## Clear\n- **Li** —prefers→ ..."}}}}


def _answer(perspective: dict[str, Any], format: str) -> Response:
    """The engine's output is already JSON-shaped and checked: send it as is (validating it again against
    PerspectivePublic, the documented shape, would double the serving cost of the hot path)."""
    if format == "markdown":
        return PlainTextResponse(perspective["context"], media_type="text/markdown; charset=utf-8",
                                 headers={"X-Perspective-Id": perspective["perspective_id"]})
    return Response(json.dumps(perspective, ensure_ascii=False, separators=(",", ":")), media_type="application/json")


@router.get("", response_model=PerspectivePublic, responses=RESPONSES)
async def get_perspective(
    caller: CallerDep, memory: MemoryDep,
    agent: Annotated[Ref, Query(description="The agent whose view this is.", examples=["agent:wang-assistant"])],
    serving: Annotated[Ref | None, Query(description="The person the agent serves now.")] = None,
    focus: Annotated[list[Ref] | None, Query(max_length=20, description="Things in focus now (repeat).")] = None,
    as_of: Annotated[Timestamp | None, Query(description="What was current and believed then.")] = None,
    budget_tokens: Budget = None, format: Format = "json", min_position: MinPosition = None,
) -> Response:
    """What `agent` sees from where it stands: ranked facts in five clarity tiers and a context block within the
    budget. Serving one records the full and gist facts as recalled (mode `pushed`). An agent-scoped key asks
    only as its agents, for persons they serve (403 otherwise)."""
    tenant = caller.tenant
    caller.acts_as(memory, agent, serving)

    def serve() -> dict[str, Any]:
        return memory.perspective(tenant, agent, serving, focus or [], as_of, budget_tokens,
                                  min_position=min_position)

    # The hot path: a current perspective is a few milliseconds of CPU under one lock, so it runs on the event
    # loop (two thread hand-offs cost more than that on a busy machine); waiting or folding the past does not.
    if as_of is None and not memory.must_wait(min_position):
        return _answer(serve(), format)
    return _answer(await run_in_threadpool(serve), format)


@router.post("/{perspective_id}/deepen", response_model=PerspectivePublic, responses=RESPONSES)
def deepen(perspective_id: PerspectiveId, caller: CallerDep, memory: MemoryDep, budget_tokens: Budget = None,
           format: Format = "json") -> Response:
    """Think deeper from the same standpoint: one more hop and a lower threshold (recorded as `deepened`)."""
    tenant = caller.tenant
    if caller.agents:
        _served_to(caller, memory, perspective_id)
    return _answer(memory.deepen(tenant, perspective_id, budget_tokens), format)


@router.get("/{perspective_id}/explain", response_model=ExplanationPublic)
def explain(perspective_id: PerspectiveId, caller: CallerDep, memory: MemoryDep) -> ExplanationPublic:
    """The inputs, parameters and outputs of a served perspective, to reproduce it."""
    return ExplanationPublic.model_validate(_served_to(caller, memory, perspective_id))


def _served_to(caller: Caller, memory: MemoryApplication, perspective_id: str) -> dict[str, Any]:
    """The explanation of a perspective, after checking an agent-scoped key may see it."""
    explanation = memory.explain(caller.tenant, perspective_id)
    caller.acts_as(memory, explanation["inputs"]["agent"], explanation["inputs"].get("serving"))
    return explanation
