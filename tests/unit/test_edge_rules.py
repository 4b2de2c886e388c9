"""One set of input rules (domain/values.py) on every entry point that builds a model: commands (CLI, MCP, HTTP
go through them), the wire envelope (Kafka and `noumena import`) and the HTTP request schemas (the recall workflow
applies them too: tests/integration/test_recall_rules.py). Lone surrogates, trailing newlines, timestamps outside
the shared range and loose coercion are refused with an error naming the field."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from api.schemas.entities import EntityCreate
from api.schemas.facts import FactCreate
from api.schemas.memory import RecallCreate, UsedCreate
from api.schemas.search import SearchRequest
from domain import commands as c
from domain.application.wire import WireError, parse_envelope
from domain.values import (
    TIMESTAMP_MAX,
    TIMESTAMP_MIN,
    Identifier,
    Label,
    Ref,
    RelationName,
    Text,
    Timestamp,
    clamp_timestamp,
)
from infra.settings import Settings
from tests.properties import examples

SURROGATE = "\ud800"
FACT = {"subject": "person:li", "relation": "knows", "object": "person:wang"}
OUT_OF_RANGE = ["9999-12-31T23:59:59-14:00", "0001-01-01T00:00:00+14:00"]
NOT_TIMESTAMPS: list[Any] = ["-1", -1, 1700000000, 1.5, True, "2026-09-01", "2026-09-01T10:00:00"]


def _field(error: ValidationError) -> str:
    return ".".join(str(p) for p in error.errors()[0]["loc"])


@pytest.mark.parametrize(("model", "base", "field", "value"), [
    (c.AssertFact, {"tenant": "acme", **FACT}, "subject", f"person:{SURROGATE}"),
    (c.AssertFact, {"tenant": "acme", **FACT}, "object", "person:wang\n"),
    (c.AssertFact, {"tenant": "acme", **FACT}, "relation", "knows\n"),
    (c.AssertFact, {"tenant": "acme", **FACT}, "reason", f"because {SURROGATE}"),
    (c.AssertFact, {"tenant": "acme", **FACT}, "confidence", True),
    (c.AssertFact, {"tenant": "acme", **FACT}, "confidence", "0.9"),
    (c.RegisterEntity, {"tenant": "acme", "ref": "person:li"}, "label", f"Li {SURROGATE}"),
    (c.RegisterEntity, {"tenant": "acme", "ref": "person:li", "label": "Li"}, "hub", 0),
    (c.AppendMessage, {"tenant": "acme", "session_id": "s", "role": "user", "content": "hi"}, "message_id",
     f"m{SURROGATE}"),
    (c.AppendMessage, {"tenant": "acme", "session_id": "s", "message_id": "m1", "role": "user"}, "content",
     f"hello {SURROGATE}"),
    (c.StartSession, {"tenant": "acme", "agent": "agent:a"}, "session_id", "main\n"),
    (c.RecordRecall, {"tenant": "acme", "agent": "agent:a", "fact_ids": ["f1"], "mode": "used"},
     "perspective_id", f"p{SURROGATE}"),
    (c.CreateTenant, {}, "tenant", "acme\n"),
    (EntityCreate, {"ref": "person:li", "label": "Li"}, "hub", 0),
    (EntityCreate, {"label": "Li"}, "ref", "person:li\n"),
    (FactCreate, dict(FACT), "confidence", True),
    (FactCreate, dict(FACT), "valid_from", "-1"),
    (FactCreate, dict(FACT), "valid_from", 1700000000),
    (UsedCreate, {"agent": "agent:a", "fact_ids": ["f1"]}, "perspective_id", f"p{SURROGATE}"),
    (RecallCreate, {"agent": "agent:a", "subject": "person:li"}, "relation", "knows\n"),
    (RecallCreate, {"agent": "agent:a", "subject": "person:li"}, "deeper", 1),
    (SearchRequest, {"agent": "agent:a"}, "query", f"who {SURROGATE}"),
    (SearchRequest, {"agent": "agent:a", "query": "who"}, "k", True),
])
def test_every_model_refuses_hostile_values_naming_the_field(model: type, base: dict, field: str,
                                                              value: object) -> None:
    with pytest.raises(ValidationError) as refused:
        model.model_validate({**base, field: value})
    assert _field(refused.value) == field


@pytest.mark.parametrize("value", OUT_OF_RANGE)
def test_a_timestamp_that_leaves_the_calendar_in_utc_is_refused_by_commands_and_the_wire(value: str) -> None:
    with pytest.raises(ValidationError) as refused:
        c.AssertFact(tenant="acme", **FACT, valid_to=value)  # type: ignore[arg-type]
    assert _field(refused.value) == "valid_to" and "out of range" in str(refused.value)
    envelope = {"event_id": "e1", "tenant": "acme", "type": "fact.asserted", "occurred_at": value, "payload": FACT}
    with pytest.raises(WireError) as wire:
        parse_envelope(json.dumps(envelope).encode())
    assert wire.value.field == "occurred_at"


@pytest.mark.parametrize("value", NOT_TIMESTAMPS)
def test_only_an_iso_string_with_an_offset_is_a_timestamp(value: object) -> None:
    with pytest.raises(ValidationError):
        TypeAdapter(Timestamp).validate_python(value)


def test_the_range_bounds_themselves_are_timestamps_and_survive_any_offset() -> None:
    for bound in (TIMESTAMP_MIN, TIMESTAMP_MAX):
        parsed = TypeAdapter(Timestamp).validate_python(bound.isoformat())
        for hours in (-14, 14):
            assert parsed.astimezone(timezone(timedelta(hours=hours))) == parsed


@pytest.mark.parametrize(("stored", "read"), [
    ("10000-01-01 13:59:59+00", TIMESTAMP_MAX), ("0001-12-31 (BC) 10:00:00+00", TIMESTAMP_MIN),
    (datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 1, tzinfo=UTC)), (None, None),
])
def test_a_moment_stored_out_of_range_reads_as_the_nearest_bound(stored: object, read: object) -> None:
    from projections.read_model import _clamped

    assert _clamped(stored) == read
    if isinstance(read, datetime):
        assert clamp_timestamp(read) == read


def test_a_kafka_record_with_an_escaped_lone_surrogate_is_refused_naming_the_field() -> None:
    raw = (b'{"event_id": "e1", "tenant": "acme", "type": "entity.registered",'
           b' "payload": {"ref": "person:li", "label": "Li \\ud800"}}')
    with pytest.raises(WireError) as refused:
        parse_envelope(raw)
    assert refused.value.field == "payload.label"


def test_a_kafka_record_with_a_coerced_flag_is_refused() -> None:
    raw = json.dumps({"event_id": "e1", "tenant": "acme", "type": "entity.registered",
                      "payload": {"ref": "person:li", "label": "Li", "hub": 0}})
    with pytest.raises(WireError) as refused:
        parse_envelope(raw)
    assert refused.value.field == "payload.hub"


@given(prefix=st.text(max_size=20), suffix=st.text(max_size=20),
       surrogate=st.integers(min_value=0xD800, max_value=0xDFFF))
def test_any_text_holding_a_lone_surrogate_is_refused_by_every_text_type(prefix: str, suffix: str,
                                                                        surrogate: int) -> None:
    value = f"person:x{prefix}{chr(surrogate)}{suffix}"
    for kind in (Ref, Identifier, Label, Text):
        with pytest.raises(ValidationError):
            TypeAdapter(kind).validate_python(value)


@given(st.from_regex(r"[a-z][a-z0-9_-]{0,8}:[a-z0-9]{1,12}", fullmatch=True), st.sampled_from(["\n", "\r\n", " "]))
def test_a_valid_ref_followed_by_a_line_end_or_space_is_refused(ref: str, end: str) -> None:
    assert TypeAdapter(Ref).validate_python(ref) == ref
    with pytest.raises(ValidationError):
        TypeAdapter(Ref).validate_python(ref + end)


@given(st.from_regex(r"[a-z][a-z0-9_]{0,20}", fullmatch=True))
def test_a_valid_relation_followed_by_a_newline_is_refused(relation: str) -> None:
    assert TypeAdapter(RelationName).validate_python(relation) == relation
    with pytest.raises(ValidationError):
        TypeAdapter(RelationName).validate_python(relation + "\n")


@pytest.mark.parametrize("key", ["aaaaaaaaaaaaaaaa", "abababababababababab", "0123456789abcdef", "changethis",
                                 "short-Key-1"])
def test_a_weak_admin_key_is_refused_for_serving(key: str) -> None:
    reason = Settings(admin_key=key, environment="production").unsafe_for_serving()  # type: ignore[arg-type]
    assert reason is not None and "too weak" in reason


def test_a_random_admin_key_passes_the_strength_check() -> None:
    import secrets

    for _ in range(examples(0.4)):
        assert Settings(admin_key=secrets.token_hex(32), environment="production").unsafe_for_serving() is None  # type: ignore[arg-type]


def _depth(value: Any) -> int:
    """The reference: levels of arrays and objects (recursive; hypothesis keeps the values shallow)."""
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    return 0


_BRACKETY = st.text(alphabet='[]{}"\\ab', max_size=6)
_JSON = st.recursive(st.none() | st.integers() | _BRACKETY,
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_BRACKETY, inner, max_size=3),
                     max_leaves=30)


@given(_JSON, st.integers(0, 8))
def test_the_nesting_scan_measures_what_the_parser_would_nest_whatever_the_strings_hold(value: Any, limit: int
                                                                                       ) -> None:
    from api.edge import nesting_exceeds

    body = json.dumps(value).encode()
    assert nesting_exceeds(body, limit) == (_depth(value) > limit)


def test_the_nesting_scan_never_recurses_and_refuses_before_parsing() -> None:
    from api.edge import MAX_JSON_DEPTH, load_json, nesting_exceeds

    deep = b"[" * 1_000_000 + b"]" * 1_000_000
    assert nesting_exceeds(deep)
    with pytest.raises(ValueError, match="deeper than 64"):
        load_json(deep)
    at_limit = b"[" * MAX_JSON_DEPTH + b"]" * MAX_JSON_DEPTH
    assert not nesting_exceeds(at_limit) and load_json(at_limit)
    unterminated = b'"' + b'\\"[' * 200_000  # one string to the end: no bracket in it counts
    assert not nesting_exceeds(unterminated)


@pytest.mark.parametrize("depth", [1_000, 3_000, 100_000])
def test_an_envelope_nested_too_deep_is_a_wire_error_not_a_crash_of_the_consumer(depth: int) -> None:
    """Kafka and `noumena import` hand raw bytes to the wire parser: a deep one is refused (dead-lettered, or kept in
    the rejects file) like any bad input, and the dead-letter sealing finds no subject in it."""
    from consumers.dead_letters.sealing import subject_key

    raw = ('{"event_id": "e1", "tenant": "acme", "type": "entity.registered", "payload": '
           + "[" * depth + "]" * depth + "}").encode()
    with pytest.raises(WireError) as refused:
        parse_envelope(raw)
    assert refused.value.field == "envelope" and "nested too deep" in str(refused.value)
    assert subject_key(raw, "t:0:1") is None
