"""Facts: typed edges `subject -relation-> object` with reason, provenance, valid time, confidence and scope."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from domain.events import DomainEvent
from domain.values import Provenance


class FactStatus(StrEnum):
    CURRENT = "current"
    INVALIDATED = "invalidated"
    ARCHIVED = "archived"


class FactAsserted(DomainEvent):
    topic = "fact.asserted"
    content_fields = ("reason",)

    fact_id: str
    subject: str
    relation: str
    object: str
    scope: str
    reason: str | None = None
    confidence: float
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    provenance: Provenance
    supersedes: str | None = None
    """The fact this one replaced under a functional relation, invalidated in the same write."""


class FactCorroborated(DomainEvent):
    """The same (subject, relation, object, scope) was asserted again by another source."""

    topic = "fact.corroborated"
    content_fields = ("reason",)

    fact_id: str
    provenance: Provenance
    previous_confidence: float
    confidence: float
    reason: str | None = None


class FactInvalidated(DomainEvent):
    """The fact no longer holds from `valid_to` on. It is marked, never deleted: as-of queries still see it."""

    topic = "fact.invalidated"
    content_fields = ("reason",)

    fact_id: str
    reason: str
    valid_to: datetime | None = None
    superseded_by: str | None = None
    provenance: Provenance


class FactArchived(DomainEvent):
    """Hidden from current perspectives (session ended, disuse); still in the log and in as-of queries."""

    topic = "fact.archived"

    fact_id: str
    cause: str


class FactRestored(DomainEvent):
    """An archived fact came back into use (a deeper look recalled it)."""

    topic = "fact.restored"

    fact_id: str
    cause: str


class FactPromoted(DomainEvent):
    """Facts seen in narrower scopes were promoted into `promoted_fact_id` with a wider scope."""

    topic = "fact.promoted"

    promoted_fact_id: str
    source_fact_ids: tuple[str, ...]
    to_scope: str
    cause: str


@dataclass(slots=True)
class FactState:
    fact_id: str
    subject: str
    relation: str
    object: str
    scope: str
    reason: str | None
    confidence: float
    valid_from: datetime | None
    valid_to: datetime | None
    status: FactStatus
    asserted_at: datetime
    provenance: list[Provenance] = field(default_factory=list)
    superseded_by: str | None = None
    supersedes: str | None = None
    ended_reason: str | None = None

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.subject, self.relation, self.object, self.scope)
