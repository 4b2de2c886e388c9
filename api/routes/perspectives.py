"""Perspectives: get one, deepen it, explain it."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Query
from fastapi.responses import PlainTextResponse, Response

from api.auth import Caller, CallerDep, MemoryDep
from api.edge import EdgeRoute
from api.routes.params import MinPosition
from api.schemas.perspectives import ExplanationPublic, PerspectivePublic
from domain.application.application import Application
from domain.perspective import Perspective
from domain.values import RefOrName, Timestamp

router = APIRouter(prefix="/perspectives", tags=["perspectives"], route_class=EdgeRoute)
Format = Annotated[Literal["json", "markdown"], Query(description="`markdown`: only the context block.")]
Budget = Annotated[int | None, Query(ge=40, le=100_000, description="Token budget of the context block.")]
PerspectiveId = Annotated[str, Path(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_-]+$")]
RESPONSES: dict[int | str, dict[str, Any]] = {200: {"content": {"text/markdown": {"schema": {"type": "string"},
                                                                "example": "## Clear\n- **Li** —prefers→ ..."}}}}


def _answer(perspective: Perspective, format: str) -> Response:
    """The engine's output is checked already: send its JSON as is (validating it again against
    PerspectivePublic, the documented shape, would double the serving cost of the hot path), serialized once by
    pydantic's own encoder (not a dict, then `json.dumps`, which takes longer)."""
    if format == "markdown":
        return PlainTextResponse(perspective.context, media_type="text/markdown; charset=utf-8",
                                 headers={"X-Perspective-Id": perspective.perspective_id})
    return Response(perspective.model_dump_json(), media_type="application/json")


@router.get("", response_model=PerspectivePublic, responses=RESPONSES)
def get_perspective(
    caller: CallerDep, memory: MemoryDep,
    agent: Annotated[RefOrName, Query(description="The agent whose view this is: its ref, or a name naming"
                                      " exactly one entity.", examples=["agent:wang-assistant"])],
    serving: Annotated[RefOrName | None, Query(description="The person the agent serves now (ref or name).")
                       ] = None,
    focus: Annotated[list[RefOrName] | None, Query(max_length=20, description="Things in focus now, refs or"
                                                   " names (repeat).")] = None,
    as_of: Annotated[Timestamp | None, Query(description="What was current and believed then.")] = None,
    budget_tokens: Budget = None, format: Format = "json", min_position: MinPosition = None,
    record: Annotated[bool, Query(description="`false`: observe the current perspective without it counting as the"
                                  " agent's use (no recall recorded; the explorer's view).")] = True,
) -> Response:
    """What `agent` sees from where it stands: ranked facts in five clarity tiers and a context block within the
    budget. An agent-scoped key asks only as its agents, for persons they serve (403 otherwise).

    Side effect, by design: serving a current perspective is a use of its full and gist facts by `agent` (mode
    `pushed`; held and written coalesced, at most one use per fact and hour, within a minute: `recall.held`), so
    what was put before the agent ranks higher next time (the testing effect), and keeps its evidence for
    `explain`. It stays a GET because agents and their runtimes fetch it as their view of memory (the URL names
    the standpoint, and repeating it is harmless: a repeat within the hour records nothing more); `as_of`
    perspectives record nothing, nor does `record=false` (an observer's look at the same current view). To record
    use without serving, POST /v1/memory/used."""
    # A plain `def` route: FastAPI runs it in the threadpool, so a recall's write (which may wait for the event
    # store: with coalescing off, or when a flush is due) and the evidence never hold up the event loop.
    agent = memory.entities.resolve_ref(caller, agent, "query.agent")
    serving = serving and memory.entities.resolve_ref(caller, serving, "query.serving")
    focus = [memory.entities.resolve_ref(caller, ref, f"query.focus.{i}") for i, ref in enumerate(focus or [])]
    return _answer(memory.reading.perspective(caller, agent, serving, focus, as_of, budget_tokens,
                                              min_position=min_position, record=record), format)


@router.post("/{perspective_id}/deepen", response_model=PerspectivePublic, responses=RESPONSES)
def deepen(perspective_id: PerspectiveId, caller: CallerDep, memory: MemoryDep, budget_tokens: Budget = None,
           format: Format = "json", min_position: MinPosition = None) -> Response:
    """Think deeper from the same standpoint: one more hop and a lower threshold (recorded as `deepened`)."""
    return _answer(memory.reading.deepen(caller, perspective_id, budget_tokens, min_position), format)


@router.get("/{perspective_id}/explain", response_model=ExplanationPublic)
def explain(perspective_id: PerspectiveId, caller: CallerDep, memory: MemoryDep) -> ExplanationPublic:
    """The inputs, parameters and outputs of a served perspective, to reproduce it."""
    return ExplanationPublic.model_validate(_served_to(caller, memory, perspective_id))


def _served_to(caller: Caller, memory: Application, perspective_id: str) -> dict[str, Any]:
    """The explanation of a perspective (inputs, parameters, outputs); an agent-scoped key sees only its agents'."""
    served = memory.reading.explain(caller, perspective_id)
    body = served.model_dump(mode="json")
    inputs = {k: body[k] for k in ("tenant", "agent", "serving", "focus", "as_of", "deeper", "served_at",
                                   "log_position", "budget_tokens")}
    outputs = {k: body[k] for k in ("items", "count_groups", "forgotten", "faded", "counts", "context",
                                    "context_tokens", "lines", "unknown_refs", "recall")}
    return {"perspective_id": perspective_id, "inputs": inputs, "parameters": body["parameters"],
            "outputs": outputs}
