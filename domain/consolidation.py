"""Consolidation ("sleep"): when a session's context is compacted, match its people, things and relations
against the ontology — new facts asserted, repeated ones corroborated, contradicted ones invalidated — each
with provenance down to the session and message ids. Recorded itself: started, completed or failed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from domain import commands as c
from domain.events import DomainEvent
from domain.values import Confidence, Ref, RelationName, Scope, ValidTime


class ConsolidationStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"


class ConsolidationStarted(DomainEvent):
    topic = "consolidation.started"

    compaction_id: str
    session_id: str
    extractor: str
    attempt: int


class ConsolidationCompleted(DomainEvent):
    topic = "consolidation.completed"
    content_fields = ("rejections",)

    compaction_id: str
    session_id: str
    counts: dict[str, int]
    rejections: tuple[str, ...] = ()


class ConsolidationFailed(DomainEvent):
    topic = "consolidation.failed"
    content_fields = ("reason",)

    compaction_id: str
    session_id: str
    reason: str
    attempt: int


@dataclass(slots=True)
class CompactionState:
    compaction_id: str
    session_id: str
    through_message_id: str
    summary: str | None
    mentions: tuple[dict[str, Any], ...]
    facts: tuple[dict[str, Any], ...]
    invalidations: tuple[dict[str, Any], ...]
    recorded_at: datetime
    status: ConsolidationStatus = ConsolidationStatus.PENDING
    attempts: int = 0
    reason: str | None = None
    counts: dict[str, int] = field(default_factory=dict)


def compaction_id_for(session_id: str, number: int) -> str:
    """The n-th compaction of a session (1-based): stable across replays."""
    return f"{session_id}#{number}"


# ---------------------------------------------------------------- commands


class StartConsolidation(c.Command):
    compaction_id: Annotated[str, Field(min_length=1, max_length=300)]
    extractor: Annotated[str, Field(min_length=1, max_length=100)]


class CompleteConsolidation(c.Command):
    compaction_id: Annotated[str, Field(min_length=1, max_length=300)]
    counts: dict[str, int]
    rejections: tuple[str, ...] = ()


class FailConsolidation(c.Command):
    compaction_id: Annotated[str, Field(min_length=1, max_length=300)]
    reason: Annotated[str, Field(min_length=1, max_length=5000)]


# ---------------------------------------------------------------- what an extractor returns


class ExtractedMention(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ref: Ref
    label: Annotated[str, Field(min_length=1, max_length=500)]


class ExtractedFact(BaseModel):
    model_config = ConfigDict(extra="forbid")

    subject: Ref
    relation: RelationName
    object: Ref
    reason: Annotated[str, Field(min_length=1, max_length=20_000)] | None = None
    confidence: Confidence | None = None
    valid_from: ValidTime | None = None
    valid_to: ValidTime | None = None
    scope: Scope | None = None
    message_ids: list[str] = []


class ExtractedInvalidation(BaseModel):
    model_config = ConfigDict(extra="forbid")

    subject: Ref
    relation: RelationName
    object: Ref
    scope: Scope | None = None
    reason: Annotated[str, Field(min_length=1, max_length=20_000)]
    valid_to: ValidTime | None = None


class Extraction(BaseModel):
    """People, things and relations found in a compacted stretch of conversation."""

    model_config = ConfigDict(extra="forbid")

    mentions: list[ExtractedMention] = []
    facts: list[ExtractedFact] = []
    invalidations: list[ExtractedInvalidation] = []
    explicit: bool = True
    """True when the agent runtime wrote these itself (structured payload); False for model extraction, whose
    facts may never claim the org scope: semantic memory comes only from explicit writes or promotion."""


@dataclass(frozen=True)
class CompactionInput:
    """What an extractor sees: the compaction and the session's recent turns (for text extraction)."""

    tenant: str
    compaction_id: str
    session_id: str
    agent: str
    serving: str | None
    summary: str | None
    mentions: tuple[dict[str, Any], ...]
    facts: tuple[dict[str, Any], ...]
    invalidations: tuple[dict[str, Any], ...]
    turns: tuple[tuple[str, str, str], ...]
    """(message_id, role, content) of the turns up to the compaction point."""


class Extractor(Protocol):
    """A port: turns a compaction into an Extraction, or raises ExtractionFailed."""

    name: str

    def extract(self, compaction: CompactionInput) -> Extraction: ...


class ExtractionFailed(Exception):
    """The extractor could not produce a valid extraction; the reason is recorded, no facts are stored."""


class StructuredPayloadExtractor:
    """The default, deterministic path: the facts and mentions the agent runtime already extracted."""

    name = "structured"

    def extract(self, compaction: CompactionInput) -> Extraction:
        facts = []
        for raw in compaction.facts:
            fact = dict(raw)
            source = fact.pop("source", None) or {}
            fact["message_ids"] = list(source.get("message_ids", []))
            facts.append(ExtractedFact.model_validate(fact))
        return Extraction(
            mentions=[ExtractedMention.model_validate(m) for m in compaction.mentions],
            facts=facts,
            invalidations=[ExtractedInvalidation.model_validate(i) for i in compaction.invalidations],
            explicit=True,
        )


class CompositeExtractor:
    """The structured payload first, then a text extractor's findings added to it."""

    def __init__(self, text_extractor: Extractor) -> None:
        self.structured = StructuredPayloadExtractor()
        self.text = text_extractor
        self.name = f"structured+{text_extractor.name}"

    def extract(self, compaction: CompactionInput) -> Extraction:
        first = self.structured.extract(compaction)
        second = self.text.extract(compaction)
        second_facts = [f.model_copy(update={"scope": None}) if f.scope == "org" else f for f in second.facts]
        return Extraction(mentions=first.mentions + second.mentions, facts=first.facts + second_facts,
                          invalidations=first.invalidations + second.invalidations, explicit=True)
