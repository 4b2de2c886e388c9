"""POST /v1/events: a batch of wire envelopes, all or nothing."""

from __future__ import annotations

from fastapi import APIRouter

from api.auth import CallerDep, MemoryDep, SettingsDep
from api.edge import EdgeRoute
from api.problems import ApiProblem
from api.schemas.events import EventsCreate, EventsWritten

router = APIRouter(prefix="/events", tags=["events"], route_class=EdgeRoute)


@router.post("", response_model=EventsWritten)
def post_events(batch: EventsCreate, caller: CallerDep, memory: MemoryDep, settings: SettingsDep) -> EventsWritten:
    """Write a batch of envelopes (the Kafka wire format) in one atomic write; any rejection writes nothing."""
    limit = settings.api_max_batch
    if len(batch.events) > limit:
        raise ApiProblem(422, "invalid-input", "Invalid input", f"body.events: at most {limit} envelopes per batch",
                         field="body.events")
    written = memory.facts.ingest(caller, batch.events)
    return EventsWritten(position=written.position, events=written.events, accepted=len(batch.events))
