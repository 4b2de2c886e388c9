"""POST /v1/events: wire envelopes in a batch (the Kafka format)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import JsonDict

from api.schemas.common import WritePublic

ENVELOPE_EXAMPLE: JsonDict = {
    "event_id": "evt-0042", "tenant": "acme", "type": "fact.asserted", "occurred_at": "2026-09-06T10:00:00+08:00",
    "payload": {"subject": "person:li", "relation": "prefers", "object": "memory:li-monthly-settlement",
                "reason": "Li said so on the third call", "confidence": 0.9, "scope": "org",
                "source": {"session_id": "wang-main", "message_ids": ["m7"], "actor": "agent:wang-assistant"}},
}


class EventsCreate(BaseModel):
    """A batch of envelopes, written all or nothing. Every envelope must name the caller's tenant."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"events": [ENVELOPE_EXAMPLE]}]})

    events: list[dict[str, Any]] = Field(min_length=1, description="Envelopes: `{event_id, tenant, type,"
                                         " occurred_at?, version?, payload}`; `noumena schema` prints their JSON"
                                         " Schema.")


class EventsWritten(WritePublic):
    accepted: int = Field(description="Envelopes accepted (repeats of a stored event_id included).")
