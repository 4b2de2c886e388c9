"""The wire format: one JSON envelope for Kafka, HTTP and JSON-lines files.

    {"event_id": "...", "tenant": "acme", "type": "fact.asserted", "occurred_at": "2026-11-02T09:30:00+08:00",
     "payload": {...}}

`event_id` is the producer's idempotency key (a repeat is a no-op). `occurred_at` is the source's own clock:
kept as data, never used as transaction time. `version` (optional, default 1) is the payload schema version.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal, Union

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
)

from domain import commands as c
from domain.errors import InvalidInput
from domain.recalls import RecallMode
from domain.sessions import WorkerStatus
from domain.values import (
    Identifier,
    Label,
    Ref,
    TenantName,
    Text,
    ValidTime,
    text,
)

WIRE_VERSION = 1


class Payload(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class EntityRegisteredV1(Payload, c.EntityNaming):
    session_id: Identifier | None = None
    """The session the entity was named in: its label is then that session's words, forgotten with the session
    and the person it serves (docs/forgetting.md)."""


class SourceV1(c.Source, Payload):
    """Where the fact came from: the session, the messages in it, and who extracted it."""


class FactAssertedV1(Payload, c.FactStatement):
    source: SourceV1 | None = None


class FactInvalidatedV1(Payload, c.FactEnding, c.FactKey):
    """Ends the current fact with this key; for a fact already ended, an earlier `valid_to` corrects its end."""


class FactCorrectedV1(Payload, c.FactCorrection, c.FactKey):
    """Corrects the valid interval of the fact with this key (the current one, else the one asserted last)."""

    source: SourceV1 | None = None


class SessionStartedV1(Payload, c.SessionStart):
    pass


class MessageAppendedV1(Payload):
    session_id: Identifier
    message_id: Identifier
    role: Literal["user", "assistant", "system", "tool"]
    content: text(0, 200_000)


class WorkerDispatchedV1(Payload):
    session_id: Identifier
    worker_session_id: Identifier
    task: Text
    about: list[Ref] = []


class WorkerReportedV1(Payload):
    session_id: Identifier
    status: Literal["working", "waiting", "done", "failed"]
    summary: text(0, 20_000)
    about: list[Ref] = []


class MentionV1(Payload):
    ref: Ref
    label: Label


class SessionCompactedV1(Payload):
    session_id: Identifier
    through_message_id: Identifier
    summary: text(0, 50_000) | None = None
    mentions: list[MentionV1] = []
    facts: list[FactAssertedV1] = []
    invalidations: list[FactInvalidatedV1] = []


class SessionEndedV1(Payload):
    session_id: Identifier


class FactsRecalledV1(Payload):
    agent: Ref
    fact_ids: Annotated[list[Identifier], Field(min_length=1)]
    mode: RecallMode = RecallMode.USED


PAYLOADS: dict[str, type[Payload]] = {
    "entity.registered": EntityRegisteredV1,
    "fact.asserted": FactAssertedV1,
    "fact.invalidated": FactInvalidatedV1,
    "fact.corrected": FactCorrectedV1,
    "session.started": SessionStartedV1,
    "message.appended": MessageAppendedV1,
    "worker.dispatched": WorkerDispatchedV1,
    "worker.reported": WorkerReportedV1,
    "session.compacted": SessionCompactedV1,
    "session.ended": SessionEndedV1,
    "facts.recalled": FactsRecalledV1,
}


class EnvelopeBase(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    event_id: text(1, 200)
    tenant: TenantName
    occurred_at: ValidTime | None = None
    version: Literal[1] = 1


def _envelope_model(type_name: str, payload: type[Payload]) -> type[EnvelopeBase]:
    name = "".join(part.title() for part in type_name.split(".")) + "Envelope"
    annotations = {"type": Literal[type_name], "payload": payload}  # type: ignore[valid-type]
    return type(name, (EnvelopeBase,), {"__annotations__": annotations, "__module__": __name__})


ENVELOPES = {name: _envelope_model(name, payload) for name, payload in PAYLOADS.items()}
# A union discriminated by `type`, so an error names the payload field rather than every alternative.
Envelope = Annotated[Union[tuple(ENVELOPES.values())], Field(discriminator="type")]  # type: ignore[valid-type]  # noqa: UP007
_ENVELOPE = TypeAdapter(Envelope)


class WireError(InvalidInput):
    """An envelope that cannot be accepted; `field` is a dotted path such as `payload.confidence`."""


def _describe(error: ValidationError) -> WireError:
    first = error.errors()[0]
    loc = [str(p) for p in first["loc"]]
    if loc and loc[0] in ENVELOPES:  # drop the discriminator tag pydantic puts in front
        loc = loc[1:]
    path = ".".join(loc) or "envelope"
    message = first["msg"]
    if first["type"] == "union_tag_invalid":
        path, message = "type", f"unknown type {first['input'].get('type')!r}; known: {', '.join(PAYLOADS)}" \
            if isinstance(first.get("input"), dict) else message
    elif first["type"] == "union_tag_not_found":
        path = "type"
    more = f" (and {error.error_count() - 1} more)" if error.error_count() > 1 else ""
    return WireError(f"{path}: {message}{more}", field=path)


def parse_envelope(raw: bytes | str | dict[str, Any]) -> EnvelopeBase:
    """Decode and validate one envelope; raise WireError naming the field that is wrong."""
    if isinstance(raw, bytes | bytearray | str):
        try:  # pydantic parses and validates JSON in one pass
            return _ENVELOPE.validate_json(raw)
        except ValidationError:
            pass  # decoded step by step below, so that the error names what is wrong as it always has
    if isinstance(raw, bytes | bytearray):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError as error:
            raise WireError(f"not UTF-8: {error}", field="envelope") from None
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as error:
            raise WireError(f"not JSON: {error}", field="envelope") from None
        except RecursionError:  # the parser recurses once per level: a poison input, not a crash of the consumer
            raise WireError("not JSON we take: arrays and objects nested too deep", field="envelope") from None
    if not isinstance(raw, dict):
        raise WireError("an envelope is a JSON object", field="envelope")
    try:
        return _ENVELOPE.validate_python(raw)
    except ValidationError as error:
        raise _describe(error) from None


def _source(source: SourceV1 | None) -> c.Source | None:
    return None if source is None else c.Source(**dict(source))


def fact_command(common: dict[str, Any], p: FactAssertedV1) -> c.AssertFact:
    return c.AssertFact(**common, subject=p.subject, relation=p.relation, object=p.object, reason=p.reason,
                        confidence=p.confidence, valid_from=p.valid_from, valid_to=p.valid_to, scope=p.scope,
                        source=_source(p.source))


def invalidation_command(common: dict[str, Any], p: FactInvalidatedV1) -> c.InvalidateFact:
    return c.InvalidateFact(**common, subject=p.subject, relation=p.relation, object=p.object, scope=p.scope,
                            reason=p.reason, valid_to=p.valid_to)


def to_command(envelope: EnvelopeBase) -> c.Command:
    """Translate a valid envelope into the domain command it asks for."""
    common: dict[str, Any] = {"tenant": envelope.tenant, "event_id": envelope.event_id,
                              "occurred_at": envelope.occurred_at}
    p = envelope.payload  # type: ignore[attr-defined]
    match p:
        case EntityRegisteredV1():
            return c.RegisterEntity(**common, ref=p.ref, label=p.label, aliases=p.aliases, hub=p.hub,
                                    session_id=p.session_id)
        case FactAssertedV1():
            return fact_command(common, p)
        case FactInvalidatedV1():
            return invalidation_command(common, p)
        case FactCorrectedV1():
            return c.CorrectFact(**common, subject=p.subject, relation=p.relation, object=p.object, scope=p.scope,
                                 reason=p.reason, valid_from=p.valid_from, valid_to=p.valid_to,
                                 source=_source(p.source))
        case SessionStartedV1():
            return c.StartSession(**common, session_id=p.session_id, agent=p.agent, kind=p.kind,
                                  serving=p.serving, parent_session_id=p.parent_session_id, task=p.task)
        case MessageAppendedV1():
            return c.AppendMessage(**common, session_id=p.session_id, message_id=p.message_id, role=p.role,
                                   content=p.content)
        case WorkerDispatchedV1():
            return c.DispatchWorker(**common, session_id=p.session_id, worker_session_id=p.worker_session_id,
                                    task=p.task, about=tuple(p.about))
        case WorkerReportedV1():
            return c.ReportWorker(**common, session_id=p.session_id, status=WorkerStatus(p.status),
                                  summary=p.summary, about=tuple(p.about))
        case SessionCompactedV1():
            return c.CompactSession(
                **common, session_id=p.session_id, through_message_id=p.through_message_id, summary=p.summary,
                mentions=tuple(m.model_dump() for m in p.mentions),
                facts=tuple(f.model_dump(mode="json", exclude_unset=True) for f in p.facts),
                invalidations=tuple(i.model_dump(mode="json", exclude_unset=True) for i in p.invalidations),
            )
        case SessionEndedV1():
            return c.EndSession(**common, session_id=p.session_id)
        case FactsRecalledV1():
            return c.RecordRecall(**common, agent=p.agent, fact_ids=tuple(p.fact_ids), mode=p.mode)
    raise WireError(f"unsupported payload {type(p).__name__}", field="type")


def envelope_schema(ref_template: str) -> dict[str, Any]:
    """The envelope union's JSON Schema with its definitions under `$defs`, referred to by `ref_template` (e.g.
    `#/components/schemas/Wire{model}` when the definitions go into an OpenAPI document)."""
    return _ENVELOPE.json_schema(ref_template=ref_template)


def json_schema() -> dict[str, Any]:
    """The JSON Schema producers in any language validate against."""
    schema = _ENVELOPE.json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "noumena envelope v1"
    schema["description"] = (__doc__ or "").strip()
    return schema
