"""The base of every domain event, and the registry that maps stable topics to event classes.

Event classes and their topics are a public contract: the log stores `topic` and `version`, never the Python
path, so a class may move or be renamed freely, but a topic may not. A payload change bumps `version` and
registers an upcaster from the older version.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any, ClassVar, TypeVar

from pydantic import AwareDatetime, BaseModel, ConfigDict

E = TypeVar("E", bound=BaseModel)
EVENT_TYPES: dict[str, type[DomainEvent]] = {}
UPCASTERS: dict[tuple[str, int], Callable[[dict[str, Any]], dict[str, Any]]] = {}


class DomainEvent(BaseModel):
    """Something that happened to a tenant's ontology. Immutable; recorded once; never edited."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    topic: ClassVar[str] = ""
    version: ClassVar[int] = 1
    content_fields: ClassVar[tuple[str, ...]] = ()
    """Fields holding content (names, texts, reasons) rather than structure: what forgetting must erase."""

    tenant: str
    recorded_at: AwareDatetime
    """Transaction time: stamped by the writer at append, under its write lock (see docs/concepts.md, "Time")."""
    event_id: str | None = None
    """The id of the ingest envelope that caused this event, if it came from outside."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        topic = cls.__dict__.get("topic")
        if topic:
            if topic in EVENT_TYPES and EVENT_TYPES[topic] is not cls:
                raise TypeError(f"event topic {topic!r} registered twice")
            EVENT_TYPES[topic] = cls

    @classmethod
    def stored_topic(cls) -> str:
        """How the log names this class's events at its current version (`fact.asserted.v1`)."""
        return _stored_topic(cls)


@cache
def _stored_topic(cls: type[DomainEvent]) -> str:
    """Made once per class: every event written asks for its topic."""
    return f"{cls.topic}.v{cls.version}"


def validated(cls: type[E], fields: dict[str, Any]) -> E:
    """An instance of `cls` validated from a dict of its fields: the very validation `cls(**fields)` runs, without
    the keyword-arguments round trip through `__init__` (a large share of the cost of building a small event; the
    rules build one or more per command, on the ingest path)."""
    return cls.__pydantic_validator__.validate_python(fields)  # type: ignore[no-any-return]


def register_upcaster(topic: str, from_version: int) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register a function that turns a stored payload of `from_version` into one of `from_version + 1`."""

    def decorate(function: Callable[[dict[str, Any]], dict[str, Any]]) -> Callable[[dict[str, Any]], dict[str, Any]]:
        UPCASTERS[(topic, from_version)] = function
        return function

    return decorate


def event_class_for(stored_topic: str) -> tuple[type[DomainEvent], int]:
    """Split a stored topic like `fact.asserted.v1` into its class and stored version."""
    topic, _, version = stored_topic.rpartition(".v")
    try:
        return EVENT_TYPES[topic], int(version)
    except (KeyError, ValueError):
        raise LookupError(f"unknown stored event topic {stored_topic!r}") from None


def upcast(topic: str, stored_version: int, data: dict[str, Any]) -> dict[str, Any]:
    cls = EVENT_TYPES[topic]
    while stored_version < cls.version:
        data = UPCASTERS[(topic, stored_version)](data)
        stored_version += 1
    return data
