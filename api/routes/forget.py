"""Forgetting on request ("forget that", "forget me"): crypto-shredding."""

from __future__ import annotations

from fastapi import APIRouter

from api.auth import CallerDep, MemoryDep
from api.edge import EdgeRoute
from api.schemas.forget import ForgetCreate, ForgetWritten

router = APIRouter(prefix="/forget", tags=["forget"], route_class=EdgeRoute)


@router.post("", response_model=ForgetWritten)
def forget(request: ForgetCreate, caller: CallerDep, memory: MemoryDep) -> ForgetWritten:
    """Really delete what is known about a subject (`person:<ref>`, `memory:<ref>`, `session:<id>`,
    `fact:<id>`): its data keys are deleted, so every copy of its content in the log reads `[forgotten]`; the
    live read model is cleaned of it before this answers, and the rebuilt read model follows (`/readyz` lists the
    tenant under `purging` until it is swapped in: poll it when no copy may stay on disk). Structure (ids, refs,
    relations, times) stays. The answer is the forget's receipt (its id is recorded in the log). 422 when the subject is
    unknown or content is not encrypted here. Afterwards, writes about a forgotten person answer 409 until the
    person is registered anew."""
    written = memory.forgetting.forget(caller, request.subject)
    receipt = written.receipt
    return ForgetWritten(subject=request.subject, position=written.position, events=written.events,
                         keys_deleted=written.keys_deleted or 0, receipt_id=receipt.receipt_id,
                         forgotten_at=receipt.recorded_at, erased_with=list(receipt.erased_with),
                         events_affected=receipt.events_affected, files_rewritten=receipt.files_rewritten)
