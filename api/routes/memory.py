"""Memory use: mark facts used; recall by tier."""

from __future__ import annotations

from fastapi import APIRouter

from api.auth import CallerDep, MemoryDep
from api.edge import EdgeRoute
from api.schemas.memory import RecallCreate, RecalledFact, RecallPublic, UsedCreate, UsedWritten

router = APIRouter(prefix="/memory", tags=["memory"], route_class=EdgeRoute)


@router.post("/used", response_model=UsedWritten)
def mark_used(used: UsedCreate, caller: CallerDep, memory: MemoryDep) -> UsedWritten:
    """Record that an agent used these facts (a recall, mode `used`): they grow stronger for that agent."""
    written = memory.facts.mark_used(caller, used.agent, used.fact_ids, used.perspective_id)
    return UsedWritten(position=written.position, events=written.events)


@router.post("/recall", response_model=RecallPublic)
def recall(request: RecallCreate, caller: CallerDep, memory: MemoryDep) -> RecallPublic:
    """Facts about a subject from the nearest tier that has any (session, then episodic, then semantic), saying
    which tier answered; recorded as recalled by the agent (`looked_up`, or `deepened` with `deeper`)."""
    agent = memory.entities.resolve_ref(caller, request.agent, "body.agent")
    subject = memory.entities.resolve_ref(caller, request.subject, "body.subject")
    serving = request.serving and memory.entities.resolve_ref(caller, request.serving, "body.serving")
    result = memory.reading.recall(caller, agent, subject, relation=request.relation, serving=serving,
                                   session_id=request.session_id, deeper=request.deeper,
                                   min_position=request.min_position)
    data = [RecalledFact(tier=hit.tier, **{k: v for k, v in hit.fact.items() if k != "status"})
            for hit in result.hits]
    return RecallPublic(answered_by=result.answered_by, tiers_checked=result.tiers_checked, data=data,
                        count=len(data), restored=result.restored, position=result.position)
