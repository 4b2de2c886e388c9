"""Maps domain events to eventsourcing's StoredEvent and back: stable topic + version, JSON state."""

from __future__ import annotations

import json

from eventsourcing.persistence import StoredEvent

import domain.entities  # noqa: F401  (importing registers the event topics)
import domain.facts  # noqa: F401
import domain.recalls  # noqa: F401
import domain.relations  # noqa: F401
import domain.sessions  # noqa: F401
import domain.tenants  # noqa: F401
from domain.events import DomainEvent, event_class_for, upcast


def stream_id(tenant: str) -> str:
    """Every tenant has exactly one stream: its ontology."""
    return f"tenant:{tenant}"


class EventMapper:
    def to_stored(self, tenant: str, version: int, event: DomainEvent) -> StoredEvent:
        return StoredEvent(
            originator_id=stream_id(tenant),
            originator_version=version,
            topic=event.stored_topic(),
            state=event.model_dump_json().encode(),
        )

    def to_event(self, topic: str, state: bytes) -> DomainEvent:
        cls, stored_version = event_class_for(topic)
        if stored_version == cls.version:
            return cls.model_validate_json(state)
        return cls.model_validate(upcast(cls.topic, stored_version, json.loads(state)))
