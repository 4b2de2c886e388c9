"""What the use cases return: plain data the entry points map to their own shapes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from domain.application.forgetting import ForgetReport
from domain.entities import EntityState


@dataclass
class Written:
    """What a write did: the log position of its last event (None: a repeat, nothing new was written)."""

    position: int | None
    events: int = 0
    fact_id: str | None = None
    change: str | None = None
    supersedes: str | None = None
    keys_deleted: int | None = None
    receipt: ForgetReport | None = None
    """A forget's receipt (domain/application/forgetting.py)."""
    purged_at: int | None = None
    """After a forget: the log position the projections were rebuilt at, when this process purged them."""


@dataclass
class RecallHit:
    tier: str
    fact: dict[str, Any]


@dataclass
class RecallResult:
    answered_by: str | None
    tiers_checked: list[str]
    hits: list[RecallHit] = field(default_factory=list)
    position: int | None = None
    restored: list[str] = field(default_factory=list)


def fact_dict(fact: Any) -> dict[str, Any]:
    return {"fact_id": fact.fact_id, "subject": fact.subject, "relation": fact.relation, "object": fact.object,
            "scope": fact.scope, "reason": fact.reason, "confidence": fact.confidence, "status": str(fact.status),
            "valid_from": fact.valid_from, "valid_to": fact.valid_to, "asserted_at": fact.asserted_at}


@dataclass(frozen=True)
class RelationInUse:
    """A relation name, its rules, whether it was defined (built in or by the tenant: else it has the default
    rules), and how many current facts use it."""

    name: str
    functional: bool
    symmetric: bool
    weight: float
    defined: bool
    current_facts: int


@dataclass
class ReviewItem:
    """An entity marked needs_review, with the refs whose names look like it."""

    entity: EntityState
    looks_like: list[str]
