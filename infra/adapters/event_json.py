"""The transcoder step of the mapper: domain events as JSON (pydantic's) under a stable topic and version, and
back, upcasting what an older version of a class wrote."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from pydantic_core import from_json, to_json

import domain.consolidation  # noqa: F401  (importing registers the event topics)
import domain.entities  # noqa: F401
import domain.facts  # noqa: F401
import domain.recalls  # noqa: F401
import domain.relations  # noqa: F401
import domain.sessions  # noqa: F401
import domain.tenants  # noqa: F401
from domain.events import DomainEvent, event_class_for, upcast


def topic_of(event: DomainEvent) -> str:
    """The stored topic: the class's topic and its version."""
    return type(event).stored_topic()


def encode(event: DomainEvent, without: Collection[str] = ()) -> bytes:
    """The event's JSON, leaving out the fields in `without` (the ones sealed apart)."""
    serializer = type(event).__pydantic_serializer__
    return serializer.to_json(event, exclude=set(without)) if without else serializer.to_json(event)


def decode(topic: str, state: bytes) -> DomainEvent:
    """The event a JSON state holds (upcast when an older version wrote it)."""
    cls, stored_version = event_class_for(topic)
    if stored_version == cls.version:
        return cls.model_validate_json(state)
    return decode_fields(topic, from_json(state))


def decode_fields(topic: str, data: dict[str, Any]) -> DomainEvent:
    """The event parsed fields hold (upcast when an older version wrote them)."""
    cls, stored_version = event_class_for(topic)
    if stored_version != cls.version:
        data = upcast(cls.topic, stored_version, data)
    return cls.model_validate(data)


def parse(state: bytes) -> dict[str, Any]:
    return from_json(state)  # type: ignore[no-any-return]


def dump(data: dict[str, Any]) -> bytes:
    return to_json(data)
