"""Typed answers of noumena's HTTP API. Each model names the fields the API documents and keeps any other the
server adds (`extra="allow"`), so a newer server never breaks an older client."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class Model(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)


class Written(Model):
    """What every write answers: the log position of its last event (None for a repeat)."""

    position: int | None = None
    events: int = 0


class EventsWritten(Written):
    accepted: int = 0


class EntityWritten(Written):
    ref: str


class FactWritten(Written):
    fact_id: str | None = None
    change: str | None = None
    supersedes: str | None = None


class UsedWritten(Written):
    pass


class TenantWritten(Written):
    tenant: str


class ForgetReceipt(Written):
    subject: str
    keys_deleted: int
    receipt_id: str
    forgotten_at: datetime | None = None
    erased_with: list[str] = Field(default_factory=list)
    events_affected: int | None = None
    files_rewritten: list[str] = Field(default_factory=list)


class Entity(Model):
    ref: str
    label: str
    aliases: list[str] = Field(default_factory=list)
    hub: bool = False
    needs_review: bool = False
    merged_into: str | None = None
    registered_at: datetime | None = None
    updated_at: datetime | None = None
    version: int | None = None


class EntityFound(Model):
    """An entity a name may mean: `score` (1: the ref itself), how it matched (`match`), on which name."""

    ref: str
    label: str
    kind: str
    aliases: list[str] = Field(default_factory=list)
    hub: bool = False
    score: float | None = None
    match: str | None = None
    matched: str | None = None


class Entities(Model):
    data: list[EntityFound]
    count: int


class FactFields(Model):
    """A fact as recorded: what every answer naming one shows (graph rows, versions, recalled facts)."""

    fact_id: str
    subject: str
    relation: str
    object: str
    scope: str
    reason: str | None = None
    confidence: float
    valid_from: datetime | None = None
    valid_to: datetime | None = None


class GraphFact(FactFields):
    status: str


class FactVersion(GraphFact):
    version: int
    recorded_from: datetime
    recorded_to: datetime | None = None


class FactChange(Model):
    position: int
    recorded_at: datetime
    change: str
    reason: str | None = None
    session_id: str | None = None
    message_ids: list[str] | None = None
    actor: str | None = None


class Fact(Model):
    fact_id: str
    current: FactVersion
    versions: list[FactVersion]
    changes: list[FactChange]


class Graph(Model):
    recorded_at: datetime | None = None
    valid_at: datetime | None = None
    data: list[GraphFact]
    count: int


class PerspectiveItem(Model):
    tier: str
    fact_id: str
    subject: str
    relation: str
    object: str
    activation: float
    hops: int


class Perspective(Model):
    perspective_id: str
    agent: str
    serving: str | None = None
    focus: list[str] = Field(default_factory=list)
    as_of: datetime | None = None
    deeper: bool = False
    items: list[PerspectiveItem]
    counts: dict[str, int]
    context: str


class Explanation(Model):
    perspective_id: str
    inputs: dict[str, Any]
    parameters: dict[str, Any]
    outputs: dict[str, Any]


class RecalledFact(FactFields):
    tier: str


class Recall(Model):
    answered_by: str | None = None
    tiers_checked: list[str]
    data: list[RecalledFact]
    count: int
    restored: list[str] = Field(default_factory=list)
    position: int | None = None


class SearchItem(Model):
    """A fact (`kind` "fact": fact_id, subject, relation, object) or a turn (`kind` "turn": message_id, role,
    occurred_at, the turns shown around it)."""

    rank: int
    kind: str = "fact"
    fact_id: str | None = None
    subject: str | None = None
    relation: str | None = None
    object: str | None = None
    text: str
    scope: str
    tier: str
    score: float
    scores: dict[str, float]
    session_id: str | None = None
    message_ids: list[str] = Field(default_factory=list)
    message_id: str | None = None
    role: str | None = None
    occurred_at: str | None = None


class Search(Model):
    search_id: str
    answered_by: str | None = None
    query: str
    agent: str
    log_position: int
    items: list[SearchItem]


class Session(Model):
    session_id: str
    agent: str
    kind: str
    serving: str | None = None
    task: str | None = None
    status: str | None = None


class Workers(Model):
    session: Session
    data: list[Session]
    count: int


class Context(Model):
    context_id: str
    session_id: str
    text: str
    tokens: int


class Key(Model):
    key_id: str
    tenant: str
    label: str
    created_at: str
    agents: list[str] = Field(default_factory=list)
    scope: str = "tenant"


class KeyIssued(Key):
    key: str


class Keys(Model):
    data: list[Key]
    count: int


class Health(Model):
    status: str | None = None
