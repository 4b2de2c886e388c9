"""Commands: what a caller asks of the ontology. Validated on construction; the rules run in `decide`.

A command is its tenant and envelope (`Command`) plus what it states. What a statement holds is declared once,
here (`FactStatement`, `FactEnding`, `FactCorrection`, `FactKey`, `Source`), and the wire format's payloads
(domain/application/wire.py) and the HTTP bodies (api/schemas/) derive from the same classes, so the three
accept the same fields with the same checks.
"""

from __future__ import annotations

from typing import Annotated, Any, Self

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, field_validator, model_validator

from domain.recalls import RecallMode
from domain.sessions import SessionKind, WorkerStatus
from domain.values import (
    Confidence,
    Flag,
    Identifier,
    Label,
    Ref,
    RelationName,
    Scope,
    TenantName,
    Text,
    ValidTime,
    text,
    valid_to_after_valid_from,
)


class Command(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    tenant: TenantName
    event_id: text(1, 200) | None = None
    """The ingest envelope id: a command carrying an id already seen is a no-op."""
    occurred_at: ValidTime | None = None
    """The source's own clock. Data, never transaction time (it is the default start of an assertion's valid
    time, and of an invalidation's end)."""


class CreateTenant(Command):
    display_name: text(0, 200) = ""


class DefineRelation(Command):
    name: RelationName
    functional: Flag = False
    symmetric: Flag = False
    weight: Annotated[float, Field(ge=0.0, le=10.0, allow_inf_nan=False)] = 1.0


class Source(BaseModel):
    """Where an assertion came from: a session, the messages in it, and who extracted it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    session_id: Identifier | None = None
    message_ids: tuple[Identifier, ...] = ()
    actor: text(1, 200) | None = None


class Statement(BaseModel):
    """The base of what a command, a wire payload and an HTTP body state (each adds its own envelope)."""

    model_config = ConfigDict(extra="forbid")


SCOPE_TEXT = "`org`, `person:<ref>` or `session:<id>`."


class EntityNaming(Statement):
    """An entity named: its ref, what it is called, and whether it is a hub."""

    ref: Ref = Field(description="`kind:identifier`, e.g. `person:li`, `file:quotes/q3.xlsx`.")
    label: Label
    aliases: tuple[Label, ...] = ()
    hub: Flag = Field(default=False, description="Many unrelated parties touch it: reachable, never traversed.")


class RegisterEntity(Command, EntityNaming):
    needs_review: Flag = False
    session_id: Identifier | None = None
    """The session the entity was named in, if any (its label is then that session's words)."""


class FactStatement(Statement):
    """What an assertion states: `subject -relation-> object`, why, how sure, when it held, and who may see it."""

    subject: Ref
    relation: RelationName
    object: Ref
    reason: Text | None = None
    confidence: Confidence | None = Field(default=None, description="0..1; default 0.8.")
    valid_from: ValidTime | None = Field(default=None, description=(
        "When it began to hold (default: now, or on the wire the envelope's `occurred_at`). A value of a functional"
        " relation placed in the past is inserted into its timeline."))
    valid_to: ValidTime | None = Field(default=None, description=(
        "When it stopped holding (default: open; for a functional relation, until its next value starts)."))
    scope: Scope = Field(default="org", description=SCOPE_TEXT)

    _interval = field_validator("valid_to")(valid_to_after_valid_from)


class FactKey(Statement):
    """A fact named by what it states: (subject, relation, object, scope)."""

    subject: Ref
    relation: RelationName
    object: Ref
    scope: Scope = Field(default="org", description=SCOPE_TEXT)


class NamedFact(Statement):
    """A fact named either by `fact_id` or by (subject, relation, object, scope)."""

    fact_id: Identifier | None = None
    subject: Ref | None = None
    relation: RelationName | None = None
    object: Ref | None = None
    scope: Scope = Field(default="org", description=SCOPE_TEXT)

    @model_validator(mode="after")
    def _named(self) -> Self:
        if self.fact_id is None and None in (self.subject, self.relation, self.object):
            raise ValueError("name the fact by fact_id or by subject, relation and object")
        return self


class FactEnding(Statement):
    """Why a current fact ends, and when."""

    reason: Text
    valid_to: ValidTime | None = Field(default=None, description=(
        "When it stopped holding (default: now, or on the wire the envelope's `occurred_at`). For a fact already"
        " ended, an earlier valid_to corrects its end."))


class FactCorrection(Statement):
    """A fact's valid interval corrected: the bounds given replace the old ones, the others stay."""

    reason: Text
    valid_from: ValidTime | None = None
    valid_to: ValidTime | None = None

    _interval = field_validator("valid_to")(valid_to_after_valid_from)

    @model_validator(mode="after")
    def _bounds(self) -> Self:
        if self.valid_from is None and self.valid_to is None:
            raise ValueError("a correction names valid_from, valid_to or both")
        return self


class AssertFact(Command, FactStatement):
    source: Source | None = None


class InvalidateFact(Command, FactEnding, NamedFact):
    """End a current fact, named either by `fact_id` or by (subject, relation, object, scope). Naming an earlier
    end of a fact already ended corrects that end (a `fact.corrected`)."""

    source: Source | None = None


class CorrectFact(Command, FactCorrection, NamedFact):
    """Correct a fact's valid interval, current or ended: the bounds given replace the old ones.

    Named by `fact_id`, or by (subject, relation, object, scope): then the current fact with that key, else the
    one asserted last. In a functional timeline the neighbours the new interval reaches are cut (docs/timelines.md).
    """

    source: Source | None = None


class ArchiveFact(Command):
    fact_id: Identifier
    cause: Text


class RestoreFact(Command):
    fact_id: Identifier
    cause: Text


class SessionStart(Statement):
    """A session begun: whose (`agent`), of which kind, serving whom, and a worker's parent and task."""

    session_id: Identifier
    agent: Ref
    kind: SessionKind = SessionKind.MAIN
    serving: Ref | None = None
    parent_session_id: Identifier | None = None
    task: Text | None = None


class StartSession(Command, SessionStart):
    @model_validator(mode="after")
    def _parent(self) -> Self:
        if self.kind == SessionKind.WORKER and self.parent_session_id is None:
            raise ValueError("a worker session needs parent_session_id")
        return self


class AppendMessage(Command):
    session_id: Identifier
    message_id: Identifier
    role: Annotated[str, Field(pattern=r"^(user|assistant|system|tool)$")]
    content: text(0, 200_000)


class DispatchWorker(Command):
    session_id: Identifier
    worker_session_id: Identifier
    task: Text
    about: tuple[Ref, ...] = ()


class ReportWorker(Command):
    session_id: Identifier
    status: WorkerStatus
    summary: text(0, 20_000)
    about: tuple[Ref, ...] = ()


class CompactSession(Command):
    session_id: Identifier
    through_message_id: Identifier
    summary: text(0, 50_000) | None = None
    mentions: tuple[dict[str, Any], ...] = ()
    facts: tuple[dict[str, Any], ...] = ()
    invalidations: tuple[dict[str, Any], ...] = ()


class EndSession(Command):
    session_id: Identifier


class RecordRecall(Command):
    agent: Ref
    fact_ids: tuple[Identifier, ...] = Field(min_length=1)
    mode: RecallMode
    perspective_id: Identifier | None = None


class ServedUse(BaseModel):
    """One use a served read made of a fact (shown clearly in a perspective or context, returned by a search)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    agent: Ref
    fact_id: Identifier
    mode: RecallMode
    at: AwareDatetime


class RecordCoalescedRecalls(Command):
    """The uses served reads made since the last flush (domain/application/recall_buffer.py): recorded as one
    `recalls.coalesced` event, at most one use per agent, fact and hour (uses whose hour already holds one are
    dropped)."""

    uses: tuple[ServedUse, ...] = Field(min_length=1)


class PromoteFact(Command):
    """Approve a narrower-scoped fact for the whole organization (semantic memory)."""

    fact_id: Identifier
    approved_by: text(1, 200)


class MergeEntities(Command):
    """`merged_ref` is the same thing as `into_ref`: its current facts move to `into_ref`."""

    merged_ref: Ref
    into_ref: Ref
    reason: text(1, 2000) = "reviewed: same entity"


class KeepEntity(Command):
    """A person reviewed an entity marked `needs_review` and kept it as a distinct entity."""

    ref: Ref


class RecordForgetting(Command):
    """Record that a subject's keys were deleted (the deletion itself happens in the key store, first)."""

    subject: Annotated[str, Field(min_length=3, max_length=310, pattern=r"^(person|session|fact|memory):\S+$")]
    keys_deleted: Annotated[int, Field(ge=0)]
    receipt_id: str | None = None
    erased_with: tuple[str, ...] = ()
