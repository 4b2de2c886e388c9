"""Reads do not grow the store without bound: served perspectives, contexts and searches record their
uses coalesced (one event per tenant per flush, at most one use per agent, fact and hour; what a crash loses:
tests/e2e/test_read_crash.py), and the evidence store keeps to its size and age bounds. Real SQLite stores."""

from __future__ import annotations

import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from domain.activation import DEFAULT_PARAMETERS
from domain.errors import UnknownPerspective
from domain.perspective import Perspective, new_served_id
from domain.recalls import FactsRecalled, RecallsCoalesced, hour_bucket
from infra.adapters.evidence import EvidenceStore
from infra.bootstrap import bootstrap
from infra.settings import Settings
from tests.properties import examples

T = "acme"
START = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def _org(memory, agents: int = 3, things: int = 6) -> dict[str, list[str]]:  # type: ignore[no-untyped-def]
    """Each agent knows `things` things; the fact ids per agent."""
    memory.tenants.create_tenant(T)
    facts: dict[str, list[str]] = {}
    for a in range(agents):
        agent = f"agent:a{a}"
        memory.facts.register_entity(T, agent, f"agent {a}")
        facts[agent] = []
        for k in range(things):
            memory.facts.register_entity(T, f"thing:{a}-{k}", f"thing {a}/{k}")
            facts[agent].append(memory.facts.assert_fact(T, subject=agent, relation="knows", object=f"thing:{a}-{k}",
                                                         reason=f"reason {k}").fact_id)
    return facts


def _events(noumena, kind: type) -> list:  # type: ignore[no-untyped-def,type-arg]
    return [logged.event for logged in noumena.log.read(0, 1_000_000) if isinstance(logged.event, kind)]


def _uses(noumena) -> list[tuple[str, str, datetime]]:  # type: ignore[no-untyped-def]
    """Every (agent, fact, moment) use the tenant's state holds, sorted."""
    state = noumena.service.ontology(T)
    return sorted((agent, fact_id, at) for fact_id, by_agent in state.recall_uses.items()
                  for agent, times in by_agent.items() for at in times)


@pytest.fixture
def clocked(tmp_path: Path):  # type: ignore[no-untyped-def]
    clock = Clock(START)
    noumena = bootstrap(Settings(home=tmp_path / "home", event_store="sqlite", embedder="none"), clock=clock)
    yield noumena, clock
    noumena.close()


def test_hundreds_of_served_reads_append_one_event_per_flush(clocked) -> None:  # type: ignore[no-untyped-def]
    noumena, clock = clocked
    memory = noumena.application
    _org(memory)
    end = noumena.log.max_position()
    for i in range(300):
        clock.now = START + timedelta(seconds=i / 10)  # 30 seconds of reads: no flush is due yet
        memory.reading.perspective(T, f"agent:a{i % 3}")
        if i % 50 == 0:
            memory.reading.search_for(T, f"agent:a{i % 3}", "thing reason")
    assert noumena.log.max_position() == end
    [position] = memory.reading.flush_recalls()
    assert position == end + 1 and memory.reading.flush_recalls() == []
    [event] = _events(noumena, RecallsCoalesced)
    assert {group.agent for group in event.uses} == {"agent:a0", "agent:a1", "agent:a2"}
    assert len(event.used()) == len({(a, f) for a, _m, f, _at in event.used()})  # one use per agent and fact
    assert _events(noumena, FactsRecalled) == []


def test_a_flush_is_due_when_the_oldest_held_use_is_a_minute_old(clocked) -> None:  # type: ignore[no-untyped-def]
    noumena, clock = clocked
    memory = noumena.application
    _org(memory)
    end = noumena.log.max_position()
    memory.reading.perspective(T, "agent:a0")
    clock.now += timedelta(seconds=59)
    memory.reading.perspective(T, "agent:a1")
    assert noumena.log.max_position() == end
    clock.now += timedelta(seconds=1)
    memory.reading.perspective(T, "agent:a2")  # its own use is held with the rest, and the flush writes them all
    assert noumena.log.max_position() == end + 1 and noumena.recalls.held == 0


def test_at_most_one_use_per_agent_fact_and_hour_is_recorded_at_its_first_moment(clocked) -> None:  # type: ignore[no-untyped-def]
    noumena, clock = clocked
    memory = noumena.application
    _org(memory, agents=1)
    first = memory.reading.perspective(T, "agent:a0")
    shown = first.fact_ids()
    clock.now += timedelta(minutes=20)
    memory.reading.perspective(T, "agent:a0")
    memory.reading.flush_recalls()
    clock.now += timedelta(minutes=20)  # the same hour, another flush: nothing new to write
    memory.reading.perspective(T, "agent:a0")
    assert memory.reading.flush_recalls() == []
    clock.now = START + timedelta(hours=1, minutes=5)  # the next hour: one more use each
    memory.reading.perspective(T, "agent:a0")
    memory.reading.flush_recalls()
    uses = [u for u in _uses(noumena) if u[1] in shown]
    assert sorted({u[2] for u in uses}) == [START, START + timedelta(hours=1, minutes=5)]
    assert len(uses) == 2 * len(set(first.fact_ids(*_shown_tiers())))


def _shown_tiers():  # type: ignore[no-untyped-def]
    from domain.activation import Tier

    return (Tier.FULL, Tier.GIST)


def state_uses(noumena) -> list[str]:  # type: ignore[no-untyped-def]
    return [fact_id for _agent, fact_id, _at in _uses(noumena)]


def test_a_clean_shutdown_writes_the_held_uses(tmp_path: Path) -> None:
    settings_ = Settings(home=tmp_path / "home", event_store="sqlite", embedder="none")
    noumena = bootstrap(settings_)
    _org(noumena.application)
    served = noumena.application.reading.perspective(T, "agent:a1")
    noumena.close()
    again = bootstrap(settings_)
    try:
        assert set(state_uses(again)) == set(served.fact_ids(*_shown_tiers()))
    finally:
        again.close()


@settings(max_examples=examples(0.1))
@given(st.lists(st.tuples(st.integers(0, 1), st.integers(0, 3), st.integers(0, 3 * 3600), st.booleans()),
                min_size=1, max_size=25))
def test_the_log_holds_the_first_use_of_each_agent_fact_and_hour_whenever_the_flushes_run(
        reads: list[tuple[int, int, int, bool]]) -> None:
    with tempfile.TemporaryDirectory() as where:
        clock = Clock(START)
        noumena = bootstrap(Settings(home=Path(where), event_store="sqlite", embedder="none",
                                     encrypt_content=False), clock=clock)
        try:
            memory = noumena.application
            memory.tenants.create_tenant(T)
            memory.facts.register_entity(T, "agent:a0", "agent 0")
            memory.facts.register_entity(T, "agent:a1", "agent 1")
            memory.facts.register_entity(T, "thing:hub", "the hub thing")
            ids = []
            for k in range(4):
                memory.facts.register_entity(T, f"thing:{k}", f"thing {k}")
                ids.append(memory.facts.assert_fact(T, subject="thing:hub", relation="near", object=f"thing:{k}",
                                                    reason=f"reason {k}").fact_id)
            expected: dict[tuple[str, str, int], datetime] = {}
            for agent, thing, offset, flush in sorted(reads, key=lambda r: r[2]):
                at = START + timedelta(seconds=offset)
                clock.now = at
                noumena.recalls.record(T, f"agent:a{agent}", [ids[thing]], _mode(), at)
                expected.setdefault((f"agent:a{agent}", ids[thing], hour_bucket(at.timestamp())), at)
                if flush:
                    memory.reading.flush_recalls()
            memory.reading.flush_recalls()
            assert _uses(noumena) == sorted((a, f, at) for (a, f, _h), at in expected.items())
        finally:
            noumena.close()


def _mode():  # type: ignore[no-untyped-def]
    from domain.recalls import RecallMode

    return RecallMode.PUSHED


def _perspective(at: datetime, tenant: str = T) -> Perspective:
    return Perspective(perspective_id=new_served_id(at), tenant=tenant, agent="agent:a0", serving=None,
                       served_at=at, log_position=7, parameters=DEFAULT_PARAMETERS, budget_tokens=800, items=[],
                       count_groups=[], forgotten=0, counts={}, context="X" * 4000, context_tokens=1000, lines=[])


def test_the_evidence_store_keeps_to_its_size_bound_dropping_the_oldest_first(tmp_path: Path) -> None:
    clock = Clock(START)
    store = EvidenceStore(tmp_path / "evidence.sqlite", mode="full", max_bytes=1024 * 1024, clock=clock)
    try:
        kept = []
        for i in range(1500):  # ~4.5 KB each: ~6.5 MB served
            clock.now = START + timedelta(seconds=i)
            served = _perspective(clock.now)
            store.keep(served)
            kept.append(served.perspective_id)
        store.prune()
        assert store.live_bytes() <= 1024 * 1024
        assert (tmp_path / "evidence.sqlite").stat().st_size <= 1.25 * 1024 * 1024  # freed pages are reused
        assert store.perspective(T, kept[-1])[0].context == "X" * 4000
        with pytest.raises(UnknownPerspective):
            store.perspective(T, kept[0])
        survivors = [i for i, pid in enumerate(kept) if _known(store, pid)]
        assert survivors == list(range(survivors[0], len(kept)))  # a suffix: the oldest went first
    finally:
        store.close()


def test_the_evidence_store_forgets_what_is_older_than_its_age_bound(tmp_path: Path) -> None:
    clock = Clock(START)
    store = EvidenceStore(tmp_path / "evidence.sqlite", max_age_days=30, clock=clock)
    try:
        old, recent = _perspective(START - timedelta(days=31)), _perspective(START - timedelta(days=29))
        store.keep(old)
        store.keep(recent)
        assert store.prune() == 1
        assert not _known(store, old.perspective_id) and _known(store, recent.perspective_id)
        with pytest.raises(UnknownPerspective):
            store.perspective("another-tenant", recent.perspective_id)
    finally:
        store.close()


def _known(store: EvidenceStore, perspective_id: str) -> bool:
    try:
        store.perspective(None, perspective_id)
    except UnknownPerspective:
        return False
    return True


def test_the_read_model_and_the_index_it_loads_hold_the_coalesced_uses_at_their_moments(clocked, tmp_path: Path
                                                                                         ) -> None:  # type: ignore[no-untyped-def]
    from projections.perspective_index import Viewpoint, fold
    from projections.perspective_load import from_duckdb
    from projections.projector import Projector

    noumena, clock = clocked
    memory = noumena.application
    facts = _org(memory, agents=2)
    memory.reading.perspective(T, "agent:a0")
    clock.now += timedelta(hours=2, minutes=17)
    memory.reading.perspective(T, "agent:a0")
    memory.reading.search_for(T, "agent:a1", "thing reason")
    memory.reading.flush_recalls()
    memory.facts.mark_used(T, "agent:a1", facts["agent:a1"][:1])
    with Projector(noumena.log, tmp_path / "read.duckdb") as projector:
        projector.catch_up()
        rows = projector.con.execute("SELECT agent, fact_id, used_at FROM fact_uses").fetchall()  # type: ignore[attr-defined]
        loaded = from_duckdb(projector.con, T)  # type: ignore[attr-defined]
    assert sorted((a, f, at.astimezone(UTC)) for a, f, at in rows) == _uses(noumena)
    assert {at.astimezone(UTC) for _a, _f, at in rows} == {START, START + timedelta(hours=2, minutes=17)}
    folded = fold(T, [(p, t, d) for p, t, d in _records(noumena)])
    now = clock.now.timestamp() + 60
    for agent in ("agent:a0", "agent:a1"):
        a, b = folded.walk(Viewpoint(agent, None, ()), DEFAULT_PARAMETERS, now), \
            loaded.walk(Viewpoint(agent, None, ()), DEFAULT_PARAMETERS, now)
        assert [folded.fact_ids.at(int(f)) for f in a.facts] == [loaded.fact_ids.at(int(f)) for f in b.facts]
        assert a.base.tolist() == pytest.approx(b.base.tolist(), abs=1e-9)


def _records(noumena):  # type: ignore[no-untyped-def]
    from projections.source import decode

    out, position = [], 0
    while batch := noumena.log.read_raw(position, 10_000):
        for pos, topic, state in batch:
            record = decode(pos, topic, state)
            out.append((pos, record.topic, record.data))
            position = pos
    return out
