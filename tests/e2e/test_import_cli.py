"""`noumena import` (a subprocess, as a user runs it) ingests the good lines of a file and keeps every rejected
line with its reason; `noumena demo` tells the story."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


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
