"""`noumena perspective`, `used` and `explain` as a user runs them, on the seed's story; and the start from the
published DuckDB snapshot."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from demo.story import TENANT, build_story


def _run(*args: str, home: Path, tenant: str | None = TENANT) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NOUMENA_HOME": str(home), "NOUMENA_EVENT_STORE": "sqlite"}
    env.pop("NOUMENA_TENANT", None)
    if tenant:
        env["NOUMENA_TENANT"] = tenant
    return subprocess.run([sys.executable, "-m", "api", *args], capture_output=True, text=True, env=env,
                          timeout=120)


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("cli") / "home"
    app, _clock = build_story(where)
    app.close()
    return where


def test_perspective_json_has_the_id_items_counts_and_context(home: Path):
    result = _run("perspective", "--agent", "agent:sales", "--focus", "file:contracts/li-v3.docx", "--json",
                  home=home)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert set(data) >= {"perspective_id", "items", "counts", "context"}
    assert set(data["counts"]) == {"full", "gist", "marker", "count", "forgotten"}
    item = data["items"][0]
    assert set(item) >= {"tier", "fact_id", "subject", "relation", "object", "activation", "hops", "path"}
    assert all(i["scope"] == "org" for i in data["items"])
    explained = _run("explain", data["perspective_id"], "--json", home=home, tenant=None)  # kept as its request
    assert explained.returncode == 0, explained.stderr
    again = json.loads(explained.stdout)
    assert [i["fact_id"] for i in again["items"]] == [i["fact_id"] for i in data["items"]]


def test_explain_shows_the_evidence_and_reproduces_it(home: Path):
    served = _run("perspective", "--agent", "agent:wang-assistant", "--serving", "person:wang", "--focus",
                  "person:li", "--as-of", "2026-09-10T12:00:00+08:00", home=home)
    assert served.returncode == 0, served.stderr
    assert served.stdout.startswith("# What Wang's agent sees, serving 王总 (Wang) (as believed at")
    perspective_id = served.stderr.split("perspective ")[1].split()[0]
    explained = _run("explain", perspective_id, "--reproduce", home=home, tenant=None)
    assert explained.returncode == 0, explained.stderr
    assert "reproduced: identical items and tiers" in explained.stdout
    assert "threshold=-1.5" in explained.stdout and "parameters:" in explained.stdout
    # why each fact is as clear as it is, and why the forgotten ones faded (docs/perspectives.md)
    assert "why: semantic (org): does not fade with time; last used 2026-09-" in explained.stdout
    assert "why: episodic (王总 (Wang)'s): last used " in explained.stdout
    assert "forgotten A=" in explained.stdout and "below the threshold (A " in explained.stdout
    assert _run("explain", "nope", home=home).returncode == 2


def test_a_tenant_is_required_and_used_records_a_recall(home: Path):
    missing = _run("perspective", "--agent", "agent:sales", home=home, tenant=None)
    assert missing.returncode != 0 and "tenant" in (missing.stderr + missing.stdout).lower()
    data = json.loads(_run("perspective", "--agent", "agent:sales", "--json", home=home).stdout)
    fact_id = data["items"][0]["fact_id"]
    used = _run("used", "--agent", "agent:sales", fact_id, "--perspective-id", data["perspective_id"], home=home)
    assert used.returncode == 0, used.stderr
    assert "recorded" in used.stdout
    unknown = _run("perspective", "--agent", "agent:nobody", home=home)
    assert unknown.returncode == 2 and "agent:nobody" in unknown.stderr


def test_the_service_starts_from_the_published_snapshot_and_follows_the_log_after_it(tmp_path: Path):
    from datetime import timedelta

    from domain.commands import AssertFact, CreateTenant, RegisterEntity
    from projections.files import ProjectionFiles
    from projections.perspectives import Perspectives
    from projections.projector import Projector

    app, clock = build_story(tmp_path / "home")
    try:
        app.service.execute(CreateTenant(tenant="other"))  # two tenants in one read model
        app.service.execute(RegisterEntity(tenant="other", ref="agent:x", label="x"))
        files = ProjectionFiles(tmp_path / "home")
        with Projector(app.log, files.live) as projector:
            projector.catch_up()
            projector.publish(files.snapshot)
        clock.now += timedelta(days=1)
        app.service.execute(AssertFact(tenant=TENANT, subject="agent:sales", relation="watches",
                                       object="ticket:legal/118", reason="after the snapshot"))
        started = Perspectives(app.log, clock)
        assert started.start_from_read_model(files.snapshot)
        assert started.tenants == sorted([TENANT, "other"])
        folded = Perspectives(app.log, clock)
        a = started.perspective_for(TENANT, "agent:sales")
        b = folded.perspective_for(TENANT, "agent:sales")
        assert [(i.fact_id, i.tier) for i in a.items] == [(i.fact_id, i.tier) for i in b.items]
        assert any(i.relation == "watches" for i in a.items)
        moment = clock.now - timedelta(days=3)  # before the snapshot's clock: read from the snapshot
        past_a = started.perspective_for(TENANT, "agent:sales", as_of=moment)
        past_b = folded.perspective_for(TENANT, "agent:sales", as_of=moment)
        assert [(i.fact_id, i.tier, i.activation) for i in past_a.items] == [
            (i.fact_id, i.tier, i.activation) for i in past_b.items]
    finally:
        app.close()


def test_entities_find_ranks_what_a_name_may_mean(home: Path):
    env_width = {"COLUMNS": "200"}
    os.environ.update(env_width)
    try:
        by_title = _run("entities", "find", "王总", home=home)
        by_typo = _run("entities", "find", "Wnag", "--limit", "1", home=home)
    finally:
        os.environ.pop("COLUMNS")
    assert by_title.returncode == 0, by_title.stderr
    rows = [line for line in by_title.stdout.splitlines() if ":" in line]
    assert "person:wang" in rows[0] and "exact" in rows[0]
    assert "agent:wang-assistant" in by_title.stdout  # (王总的助理 begins with 王总)
    assert by_typo.returncode == 0 and "person:wang" in by_typo.stdout and "fuzzy" in by_typo.stdout
    assert "more" in by_typo.stdout
