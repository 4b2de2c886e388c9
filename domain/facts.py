"""Facts: typed edges `subject -relation-> object` with reason, provenance, valid time, confidence and scope."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel

from domain.events import DomainEvent, register_upcaster
from domain.values import Provenance


class FactStatus(StrEnum):
    CURRENT = "current"
    INVALIDATED = "invalidated"
    ARCHIVED = "archived"


class FactFields(BaseModel):
    """A fact as recorded: what every reading of one shows (the event that asserted it, the API's fact, version,
    graph row and recalled fact derive from it)."""

    fact_id: str
    subject: str
    relation: str
    object: str
    scope: str
    reason: str | None = None
    confidence: float
    valid_from: datetime | None = None
    valid_to: datetime | None = None


class FactAsserted(FactFields, DomainEvent):
    topic = "fact.asserted"
    content_fields = ("reason",)

    provenance: Provenance
    supersedes: str | None = None
    """The fact this one replaced under a functional relation, invalidated in the same write."""


class FactCorroborated(DomainEvent):
    """The same (subject, relation, object, scope) was asserted again by another source."""

    topic = "fact.corroborated"
    version = 2  # v2: the source's valid range (valid_from, valid_to); v1 payloads read with both None
    content_fields = ("reason",)

    fact_id: str
    provenance: Provenance
    previous_confidence: float
    confidence: float
    reason: str | None = None
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    """The range this source states (None, None in events stored as v1: not recorded). It is kept with the
    source and never moves the fact's own range (docs/timelines.md)."""


@register_upcaster("fact.corroborated", 1)
def _corroboration_without_range(data: dict[str, Any]) -> dict[str, Any]:
    return {**data, "valid_from": None, "valid_to": None}


class FactInvalidated(DomainEvent):
    """The fact no longer holds from `valid_to` on. It is marked, never deleted: as-of queries still see it."""

    topic = "fact.invalidated"
    content_fields = ("reason",)

    fact_id: str
    reason: str
    valid_to: datetime | None = None
    superseded_by: str | None = None
    provenance: Provenance


class FactCorrected(DomainEvent):
    """The fact's valid interval is corrected: the fields given replace the old bounds, the others stay.

    Written when a value placed into a functional timeline cuts a neighbour that is no longer current, and for an
    explicit correction (`CorrectFact`, an invalidation naming an earlier `valid_to` of an ended fact). A bound
    equal to the other (`valid_to == valid_from`) leaves an empty interval: the value held at no instant.
    Transaction time is untouched: as-of queries before this event still see the old interval.
    """

    topic = "fact.corrected"
    content_fields = ("reason",)

    fact_id: str
    reason: str
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    superseded_by: str | None = None
    """The value that follows this one in its timeline now (None: unchanged)."""
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
    ranges: list[tuple[datetime | None, datetime | None]] = field(default_factory=list)
    """The valid range each source stated, in the order of `provenance` (None, None where none was recorded)."""

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.subject, self.relation, self.object, self.scope)

    def __reduce__(self) -> tuple[type[FactState], tuple[Any, ...]]:
        """Pickled (in state snapshots) as its fields in order, rebuilt by one call (cheaper both ways than the
        slots' default state functions)."""
        return (FactState, (self.fact_id, self.subject, self.relation, self.object, self.scope, self.reason,
                            self.confidence, self.valid_from, self.valid_to, self.status, self.asserted_at,
                            self.provenance, self.superseded_by, self.supersedes, self.ended_reason, self.ranges))
