"""Serving perspectives through the real event log: recalls, reinforcement, evidence, as-of, budget, DuckDB start."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from domain.activation import Tier, estimate_tokens
from domain.commands import AssertFact, CreateTenant, RegisterEntity
from domain.errors import UnknownPerspective
from domain.recalls import FactsRecalled, RecallsCoalesced
from tests.conftest import TickingClock

T = "acme"


def _org(noumena, things: int = 16) -> list[str]:  # type: ignore[no-untyped-def]
    """An agent that knows `things` things, all alike: only reinforcement can tell them apart."""
    run = noumena.service.execute
    run(CreateTenant(tenant=T))
    run(RegisterEntity(tenant=T, ref="agent:a", label="agent A"))
    ids = []
    for k in range(things):
        run(RegisterEntity(tenant=T, ref=f"thing:{k:02d}", label=f"thing {k:02d}"))
        outcome = run(AssertFact(tenant=T, subject="agent:a", relation="knows", object=f"thing:{k:02d}",
                                 reason=f"reason {k}"))
        ids.append(outcome.events[-1].fact_id)  # type: ignore[attr-defined]
    return ids


@pytest.fixture
def served(make_noumena, tmp_path):  # type: ignore[no-untyped-def]
    clock = TickingClock(datetime(2026, 3, 1, tzinfo=UTC), step=timedelta(minutes=1))
    noumena = make_noumena("sqlite", clock=clock)
    ids = _org(noumena)
    clock.now += timedelta(days=3)
    return noumena, noumena.application, ids, clock


def _recalls(noumena) -> list[FactsRecalled]:  # type: ignore[no-untyped-def]
    return [logged.event for logged in noumena.log.read(0, 100_000) if isinstance(logged.event, FactsRecalled)]


def _coalesced(noumena) -> list[RecallsCoalesced]:  # type: ignore[no-untyped-def]
    return [logged.event for logged in noumena.log.read(0, 100_000) if isinstance(logged.event, RecallsCoalesced)]


def test_serving_holds_a_use_of_the_full_and_gist_facts_and_a_flush_writes_them_in_one_event(served):
    noumena, memory, _ids, _clock = served
    end = noumena.log.max_position()
    p = memory.reading.perspective(T, "agent:a")
    assert (p.counts["full"], p.counts["gist"]) == (4, 7)
    assert p.recall is not None and p.recall.held and p.recall.position is None
    assert p.recall.fact_ids == p.fact_ids(Tier.FULL, Tier.GIST)
    assert noumena.log.max_position() == end  # nothing written while serving
    [position] = memory.reading.flush_recalls()
    [event] = _coalesced(noumena)
    assert [(agent, mode, fact_id) for agent, mode, fact_id, _at in event.used()] == [
        ("agent:a", "pushed", fact_id) for fact_id in p.fact_ids(Tier.FULL, Tier.GIST)]
    assert {at for *_rest, at in event.used()} == {p.served_at.replace(microsecond=0)}
    assert position == noumena.log.max_position() and _recalls(noumena) == []


def test_with_coalescing_off_serving_records_one_pushed_recall_naming_the_perspective(make_noumena, monkeypatch):
    monkeypatch.setenv("NOUMENA_RECALL_FLUSH_SECONDS", "0")
    noumena = make_noumena("sqlite", clock=TickingClock(datetime(2026, 3, 1, tzinfo=UTC)))
    _org(noumena)
    p = noumena.application.reading.perspective(T, "agent:a")
    [recall] = _recalls(noumena)
    assert recall.mode == "pushed" and recall.perspective_id == p.perspective_id
    assert list(recall.fact_ids) == p.fact_ids(Tier.FULL, Tier.GIST)
    assert p.recall is not None and p.recall.position == noumena.log.max_position() and not p.recall.held


def test_later_perspectives_rank_reinforced_facts_higher(served):
    noumena, memory, ids, clock = served
    first = memory.reading.perspective(T, "agent:a")
    weakest = first.items[-1].fact_id  # identical facts: the tie-break put this one last
    memory.facts.mark_used(T, "agent:a", [weakest])
    clock.now += timedelta(hours=2)
    second = memory.reading.perspective(T, "agent:a")
    assert second.items[0].fact_id == weakest
    assert second.items[0].activation > max(i.activation for i in first.items)
    assert [r.mode for r in _recalls(noumena)] == ["used"]  # an agent's own word is written at once


def test_a_pushed_fact_outranks_the_ones_that_were_not_shown(served):
    noumena, memory, ids, clock = served
    shown = set(memory.reading.perspective(T, "agent:a").fact_ids(Tier.FULL, Tier.GIST))
    memory.reading.flush_recalls()  # (the buffer's timer, a minute later)
    clock.now += timedelta(days=1)
    again = memory.reading.perspective(T, "agent:a")
    top = {i.fact_id for i in again.items[:11]}
    assert top == shown


def test_a_deeper_look_records_a_deepened_use_and_an_as_of_look_records_none(served):
    noumena, memory, _ids, clock = served
    memory.reading.perspective(T, "agent:a", deeper=True)
    past = memory.reading.perspective(T, "agent:a", as_of=clock.now - timedelta(days=1))
    memory.reading.flush_recalls()
    [event] = _coalesced(noumena)
    assert {group.mode for group in event.uses} == {"deepened"}
    assert past.recall is None and past.as_of is not None
    assert memory.reading.explain(T, past.perspective_id).as_of == past.as_of


@pytest.mark.parametrize("mode", ["reproducible", "full"])
def test_the_evidence_explains_and_reproduces_a_served_perspective(make_noumena, monkeypatch, mode):
    monkeypatch.setenv("NOUMENA_EVIDENCE", mode)
    clock = TickingClock(datetime(2026, 3, 1, tzinfo=UTC), step=timedelta(minutes=1))
    noumena = make_noumena("sqlite", clock=clock)
    _org(noumena)
    memory = noumena.application
    p = memory.reading.perspective(T, "agent:a", focus=["thing:03"], budget_tokens=300)
    memory.reading.flush_recalls()
    clock.now += timedelta(days=2)
    memory.reading.perspective(T, "agent:a")  # later events must not change the explanation or the reproduction
    memory.reading.flush_recalls()
    assert memory.reading.explain(T, p.perspective_id) == p
    again = memory.reading.reproduce(p.perspective_id)
    assert [(i.fact_id, i.tier, i.activation) for i in again.items] == [
        (i.fact_id, i.tier, i.activation) for i in p.items]
    assert again.context == p.context
    with pytest.raises(UnknownPerspective):
        memory.reading.explain(T, "no-such-perspective")
    with pytest.raises(UnknownPerspective):
        memory.reading.explain("another-tenant", p.perspective_id)


def test_the_context_fits_its_budget_and_every_line_is_traceable(served):
    _noumena, memory, _ids, _clock = served
    roomy = memory.reading.perspective(T, "agent:a")
    tight = memory.reading.perspective(T, "agent:a", budget_tokens=120)
    assert roomy.context_tokens <= roomy.budget_tokens and tight.context_tokens <= 120
    assert estimate_tokens(tight.context) == tight.context_tokens
    assert tight.counts["full"] + tight.counts["gist"] < roomy.counts["full"] + roomy.counts["gist"]
    assert sum(tight.counts.values()) == sum(roomy.counts.values())  # demoted, never lost
    shown = {i.fact_id for i in tight.items} | {f for g in tight.count_groups for f in g.fact_ids}
    for line in tight.lines:
        if "[#" in line.text:
            assert line.fact_ids and line.fact_ids[0][:8] in line.text
        assert set(line.fact_ids) <= shown
    assert "\n".join(line.text for line in tight.lines) == tight.context


def test_unknown_agents_are_refused(served):
    from domain.errors import UnknownEntity

    _noumena, memory, _ids, _clock = served
    with pytest.raises(UnknownEntity):
        memory.reading.perspective(T, "agent:nobody")


def test_an_index_loaded_from_duckdb_equals_the_one_folded_from_the_log(tmp_path):
    from demo.perspective_story import VIEWS, serve_story
    from demo.story import TENANT
    from projections.perspective_load import from_duckdb
    from projections.projector import Projector

    story = serve_story(tmp_path / "story")
    try:
        with Projector(story.app.log, tmp_path / "read.duckdb") as projector:
            projector.catch_up()
            loaded = from_duckdb(projector.con, TENANT)  # type: ignore[attr-defined]
        folded = story.perspectives.index(TENANT)
        assert loaded.position == folded.position
        now = story.clock.now.timestamp()
        from projections.perspective_index import Viewpoint

        for view in VIEWS.values():
            viewpoint = Viewpoint(view["agent"], view.get("serving"), tuple(view.get("focus", [])))
            a, b = folded.walk(viewpoint, folded_parameters(), now), loaded.walk(viewpoint, folded_parameters(), now)
            assert [folded.fact_ids.at(int(f)) for f in a.facts] == [loaded.fact_ids.at(int(f)) for f in b.facts]
            assert a.activation == pytest.approx(b.activation, abs=1e-6)
            assert (a.tiers == b.tiers).all()
            fa = int(a.facts[0])
            fb = int(b.facts[0])
            assert folded.reasons.get(fa) == loaded.reasons.get(fb)
            assert folded.provenance.get(fa) == loaded.provenance.get(fb)
    finally:
        story.close()


def folded_parameters():  # type: ignore[no-untyped-def]
    from domain.activation import DEFAULT_PARAMETERS

    return DEFAULT_PARAMETERS


@pytest.mark.parametrize("mode", ["reproducible", "full"])
def test_forgetting_a_person_erases_their_content_from_the_index_and_the_evidence(tmp_path, monkeypatch, mode):
    from infra.bootstrap import bootstrap
    from infra.settings import Settings

    monkeypatch.setenv("NOUMENA_EVIDENCE", mode)
    clock = TickingClock(datetime(2026, 3, 1, tzinfo=UTC), step=timedelta(minutes=1))
    app = bootstrap(Settings(home=tmp_path / "home", event_store="sqlite"), clock=clock)
    try:
        run = app.service.execute
        run(CreateTenant(tenant=T))
        run(RegisterEntity(tenant=T, ref="agent:a", label="agent A"))
        run(RegisterEntity(tenant=T, ref="person:zhao", label="Zhao MARKER-NAME"))
        run(AssertFact(tenant=T, subject="agent:a", relation="serves", object="person:zhao", reason="MARKER-WHY"))
        memory = app.application
        served = memory.reading.perspective(T, "agent:a")
        assert "MARKER-NAME" in served.context
        evidence = [tmp_path / "home" / name for name in ("evidence.sqlite", "evidence.sqlite-wal")]
        assert any(b"MARKER" in path.read_bytes() for path in evidence) == (mode == "full")
        memory.forgetting.forget(T, "person:zhao")
        assert not any(b"MARKER" in path.read_bytes() for path in evidence if path.exists())
        explained = memory.reading.explain(T, served.perspective_id)
        assert explained.items[0].fact_id == served.items[0].fact_id and "MARKER" not in explained.model_dump_json()
        again = memory.reading.perspective(T, "agent:a")
        assert "MARKER" not in again.context and again.items[0].fact_id == served.items[0].fact_id
    finally:
        app.close()


def test_an_as_of_index_from_the_read_model_equals_the_log_fold(tmp_path):
    from demo.perspective_story import MOMENT_1, VIEWS, serve_story
    from demo.story import TENANT
    from domain.activation import DEFAULT_PARAMETERS
    from projections.perspective_index import Viewpoint
    from projections.perspective_load import from_duckdb
    from projections.projector import Projector

    story = serve_story(tmp_path / "story")
    try:
        with Projector(story.app.log, tmp_path / "read.duckdb") as projector:
            projector.catch_up()
            at = MOMENT_1[1] + timedelta(hours=1)
            loaded = from_duckdb(projector.con, TENANT, as_of=at)
        folded = story.perspectives.as_of_index(TENANT, at)
        for view in VIEWS.values():
            viewpoint = Viewpoint(view["agent"], view.get("serving"), tuple(view.get("focus", [])))
            a = folded.walk(viewpoint, DEFAULT_PARAMETERS, at.timestamp())
            b = loaded.walk(viewpoint, DEFAULT_PARAMETERS, at.timestamp())
            assert [folded.fact_ids.at(int(f)) for f in a.facts] == [loaded.fact_ids.at(int(f)) for f in b.facts]
            assert a.activation == pytest.approx(b.activation, abs=1e-6)
            assert len(a.facts) > 0
    finally:
        story.close()
