"""Forgetting on request: a placeholder until crypto-shredding lands (issue 8)."""

from __future__ import annotations

from fastapi import APIRouter

from api.auth import MemoryDep, TenantDep
from api.problems import Problem
from api.schemas.common import WritePublic
from api.schemas.forget import ForgetCreate

router = APIRouter(prefix="/forget", tags=["forget"])


@router.post("", response_model=WritePublic, responses={501: {
    "model": Problem, "description": "Not built yet (issue 8).", "content": {"application/problem+json": {}}}})
def forget(request: ForgetCreate, tenant: TenantDep, memory: MemoryDep) -> WritePublic:
    """Really delete what is known about a subject (crypto-shredding). Not built yet: answers 501 and changes
    nothing."""
    written = memory.forget(tenant, request.subject)
    return WritePublic(position=written.position, events=written.events)
