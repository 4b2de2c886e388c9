"""Sessions: the workers of a main session."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from api.auth import CallerDep, MemoryDep
from api.edge import EdgeRoute
from api.problems import not_found
from api.routes.params import MinPosition
from api.schemas.sessions import SessionPublic, WorkersPublic

router = APIRouter(prefix="/sessions", tags=["sessions"], route_class=EdgeRoute)


@router.get("/{session_id}/workers", response_model=WorkersPublic)
def session_workers(session_id: Annotated[str, Path(min_length=1, max_length=256, pattern=r"^\S(.*\S)?$")],
                    caller: CallerDep, memory: MemoryDep, min_position: MinPosition = None) -> WorkersPublic:
    """A session and the worker sessions it dispatched: who holds which task, about what, with what status."""
    session, workers = memory.views.session(caller, session_id, min_position)
    if session is None:
        raise not_found(f"no session {session_id!r} in your tenant", "path.session_id")
    data = [SessionPublic(**w) for w in workers]
    return WorkersPublic(session=SessionPublic(**session), data=data, count=len(data))
