"""The wire envelope: every malformed field is named (pure: the parser alone). That a batch with a bad envelope
writes nothing is in tests/integration/test_ingestion_batches.py; `noumena import`, which keeps every rejected
line with its reason, in tests/e2e/test_import_cli.py."""

from __future__ import annotations

import json

import pytest

from domain.application.wire import WireError, json_schema, parse_envelope

GOOD = {"event_id": "e1", "tenant": "acme", "type": "fact.asserted", "occurred_at": "2026-09-01T09:00:00+08:00",
        "payload": {"subject": "person:li", "relation": "prefers", "object": "memory:monthly", "confidence": 0.9,
                    "source": {"session_id": "s1", "message_ids": ["m7"]}}}


def _with(path: str, value: object) -> dict:
    envelope = json.loads(json.dumps(GOOD))
    target = envelope
    *parents, last = path.split(".")
    for part in parents:
        target = target[part]
    if value is _DELETE:
        del target[last]
    else:
        target[last] = value
    return envelope


_DELETE = object()


@pytest.mark.parametrize(("path", "value", "named"), [
    ("event_id", "", "event_id"),
    ("event_id", _DELETE, "event_id"),
    ("tenant", "Not A Tenant", "tenant"),
    ("type", "fact.exploded", "type"),
    ("occurred_at", "2026-09-01T09:00:00", "occurred_at"),
    ("occurred_at", "yesterday", "occurred_at"),
    ("payload.subject", "li", "payload.subject"),
    ("payload.relation", "Prefers Strongly", "payload.relation"),
    ("payload.object", _DELETE, "payload.object"),
    ("payload.confidence", 1.5, "payload.confidence"),
    ("payload.confidence", -0.1, "payload.confidence"),
    ("payload.scope", "team:sales", "payload.scope"),
    ("payload.valid_from", "2026-01-01", "payload.valid_from"),
    ("payload.source.message_ids", "m7", "payload.source.message_ids"),
    ("payload.surprise", 1, "payload.surprise"),
])
def test_every_malformed_field_is_named(path, value, named):
    with pytest.raises(WireError) as raised:
        parse_envelope(_with(path, value))
    assert raised.value.field == named
    assert named in str(raised.value)


def test_valid_to_before_valid_from_is_named():
    envelope = _with("payload.valid_from", "2026-02-01T00:00:00+00:00")
    envelope["payload"]["valid_to"] = "2026-01-01T00:00:00+00:00"
    with pytest.raises(WireError, match="valid_to must be after valid_from"):
        parse_envelope(envelope)


@pytest.mark.parametrize("raw", [b"\xff\xfe", b"{not json", b"[1, 2]", b"null"])
def test_undecodable_input_is_rejected_with_a_reason(raw):
    with pytest.raises(WireError) as raised:
        parse_envelope(raw)
    assert raised.value.field == "envelope"


def test_the_schema_covers_every_type():
    schema = json.dumps(json_schema())
    for type_ in ("entity.registered", "fact.asserted", "fact.invalidated", "session.started", "message.appended",
                  "worker.dispatched", "worker.reported", "session.compacted", "session.ended"):
        assert type_ in schema
