"""The wire envelope: every malformed field is named, nothing partial is written; `noumena import` keeps
every rejected line with its reason."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from domain import commands as c
from domain.application.ingestion import Ingestor
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


def test_an_all_or_nothing_batch_with_a_bad_envelope_writes_nothing(make_noumena, backend):
    n = make_noumena(backend)
    n.service.execute(c.CreateTenant(tenant="acme"))
    before = n.log.max_position()
    result = Ingestor(n.service).ingest([
        {"event_id": "a", "tenant": "acme", "type": "entity.registered",
         "payload": {"ref": "person:li", "label": "Li"}},
        {"event_id": "b", "tenant": "acme", "type": "fact.asserted",
         "payload": {"subject": "person:li", "relation": "knows", "object": "person:nobody"}},
    ], all_or_nothing=True)
    assert [r.field for r in result.rejected] == ["payload.object"]
    assert n.log.max_position() == before


def _run(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NOUMENA_HOME": str(home), "NOUMENA_EVENT_STORE": "sqlite"}
    return subprocess.run([sys.executable, "-m", "api", *args], capture_output=True, text=True, env=env,
                          timeout=120)


def test_import_ingests_good_lines_and_keeps_each_rejected_line_with_its_reason(tmp_path):
    home = tmp_path / "home"
    assert _run("tenant", "create", "acme", home=home).returncode == 0
    lines = [
        json.dumps({"event_id": "1", "tenant": "acme", "type": "entity.registered",
                    "payload": {"ref": "person:li", "label": "李总"}}, ensure_ascii=False),
        "{broken json",
        json.dumps({"event_id": "2", "tenant": "acme", "type": "entity.registered",
                    "payload": {"ref": "memory:monthly", "label": "prefers monthly settlement"}}),
        json.dumps({"event_id": "3", "tenant": "acme", "type": "fact.asserted",
                    "payload": {"subject": "person:li", "relation": "prefers", "object": "memory:monthly"}}),
        json.dumps({"event_id": "4", "tenant": "acme", "type": "fact.asserted",
                    "payload": {"subject": "person:li", "relation": "prefers", "object": "memory:nope"}}),
        json.dumps({"event_id": "5", "tenant": "ghost", "type": "session.ended", "payload": {"session_id": "s"}}),
        json.dumps({"event_id": "1", "tenant": "acme", "type": "entity.registered",
                    "payload": {"ref": "person:li", "label": "李总"}}, ensure_ascii=False),
    ]
    source = tmp_path / "events.jsonl"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = _run("import", str(source), home=home)
    assert result.returncode == 1, result.stderr
    assert "lines read: 7 = accepted: 4 (of which repeats: 1) + rejected: 3" in result.stdout
    rejects = [json.loads(line) for line in (tmp_path / "events.jsonl.rejects.jsonl").read_text().splitlines()]
    assert [(r["line"], r["field"]) for r in rejects] == [(2, "envelope"), (5, "payload.object"), (6, "tenant")]
    assert rejects[0]["input"] == "{broken json"
    assert "memory:nope" in rejects[1]["reason"] and "ghost" in rejects[2]["reason"]


def test_a_clean_import_exits_zero(tmp_path):
    home = tmp_path / "home"
    _run("tenant", "create", "acme", home=home)
    source = tmp_path / "ok.jsonl"
    source.write_text(json.dumps({"event_id": "1", "tenant": "acme", "type": "entity.registered",
                                  "payload": {"ref": "person:li", "label": "Li"}}) + "\n\n")
    result = _run("import", str(source), home=home)
    assert result.returncode == 0, result.stderr
    assert "accepted: 1" in result.stdout and not (tmp_path / "ok.jsonl.rejects.jsonl").exists()


def test_the_demo_tells_the_story(tmp_path):
    result = _run("demo", home=tmp_path)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "Li prefers monthly settlement" in out
    assert "exchange rate" in out
    assert "w-quote-li" in out and "freight" in out
    assert "no longer believed" in out  # contract v3 moved from drafting to legal review
