"""Entities: references to things that live elsewhere (people, agents, files, tickets, sessions, memories)."""

from __future__ import annotations

from dataclasses import dataclass, field

from domain.events import DomainEvent


class EntityRegistered(DomainEvent):
    topic = "entity.registered"
    content_fields = ("label", "aliases")

    ref: str
    label: str
    aliases: tuple[str, ...] = ()
    hub: bool = False
    needs_review: bool = False
    session_id: str | None = None
    """The session it was named in (a consolidation's), if any: the label is that session's words and is sealed
    with it (domain/forgetting.py). Absent in events written before it existed."""


class EntityUpdated(DomainEvent):
    """A re-registration that changed the label, added aliases, or changed the hub flag."""

    topic = "entity.updated"
    content_fields = ("label", "aliases")

    ref: str
    label: str
    aliases: tuple[str, ...]
    hub: bool
    needs_review: bool | None = None
    """None: unchanged. False: a person reviewed it and kept it as a distinct entity."""
    session_id: str | None = None
    """As `EntityRegistered.session_id`."""


class EntitiesMerged(DomainEvent):
    """`merged_ref` is the same thing as `into_ref`; its facts now belong to `into_ref`."""

    topic = "entity.merged"

    merged_ref: str
    into_ref: str
    reason: str = ""


@dataclass(slots=True)
class EntityState:
    ref: str
    label: str
    aliases: tuple[str, ...] = ()
    hub: bool = False
    needs_review: bool = False
    merged_into: str | None = None
    registered_at: object = None
    extra: dict[str, object] = field(default_factory=dict)
