"""Memory use: mark facts used; recall by tier."""

from __future__ import annotations

from fastapi import APIRouter

from api.auth import MemoryDep, TenantDep
from api.schemas.memory import RecallCreate, RecalledFact, RecallPublic, UsedCreate, UsedWritten

router = APIRouter(prefix="/memory", tags=["memory"])


@router.post("/used", response_model=UsedWritten)
def mark_used(used: UsedCreate, tenant: TenantDep, memory: MemoryDep) -> UsedWritten:
    """Record that an agent used these facts (a recall, mode `used`): they grow stronger for that agent."""
    written = memory.mark_used(tenant, used.agent, used.fact_ids, used.perspective_id)
    return UsedWritten(position=written.position, events=written.events)


@router.post("/recall", response_model=RecallPublic)
def recall(request: RecallCreate, tenant: TenantDep, memory: MemoryDep) -> RecallPublic:
    """Look facts up nearest tier first (session, then episodic, then semantic) and say which tier answered.
    The hits are recorded as looked up by the agent."""
    result = memory.recall(tenant, request.agent, about=request.about, text=request.text, serving=request.serving,
                           session_id=request.session_id, limit=request.limit)
    data = [RecalledFact(tier=hit.tier, **{k: v for k, v in hit.fact.items() if k != "status"})
            for hit in result.hits]
    return RecallPublic(answered_by=result.answered_by, tiers_checked=result.tiers_checked, data=data,
                        count=len(data), position=result.position)
