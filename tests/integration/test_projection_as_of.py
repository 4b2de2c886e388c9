"""Point-in-time equality: for random logs and random moments T, `facts_as_of(T)` on the live projection
equals the facts of a database replayed to T and the log folded to T (projections.ontology_as_of), attribute for
attribute; the same with `valid_at`, where a functional relation never holds two values at once. The logs
include values placed into the past, corrections and splits of functional timelines (docs/timelines.md)."""

from __future__ import annotations

import random
import tempfile
from collections.abc import Iterable
from datetime import datetime, timedelta
from pathlib import Path

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from domain.ontology import Ontology
from infra.bootstrap import bootstrap
from infra.settings import Settings
from projections.ontology_as_of import believed_at
from projections.projector import Projector
from projections.replay import replay
from tests.projection_support import (
    TENANTS,
    VALID_TIMES,
    ManualClock,
    Workload,
    fact_rows_from_log,
    fact_rows_from_sql,
)
from tests.properties import examples

STEPS = (timedelta(0), timedelta(microseconds=1), timedelta(milliseconds=1), timedelta(seconds=1),
         timedelta(hours=1), timedelta(days=1))
EPSILONS = (timedelta(microseconds=-1), timedelta(0), timedelta(microseconds=1))


def _moments(times: list[datetime], rng: random.Random, n: int) -> list[datetime]:
    """Moments around the recorded times (just before, at, just after), plus before the first and after all."""
    candidates = [times[0] - timedelta(days=1), times[-1] + timedelta(days=1)]
    candidates += [t + e for t in rng.sample(times, min(len(times), 6)) for e in EPSILONS]
    return rng.sample(candidates, min(n, len(candidates)))


def _entities_sql(con: duckdb.DuckDBPyConnection, moment: datetime) -> dict:
    rows = con.execute("SELECT tenant, ref, label, aliases, hub, needs_review, merged_into FROM entity_versions"
                       " WHERE recorded_from <= $1 AND (recorded_to IS NULL OR $1 < recorded_to)", [moment]).fetchall()
    return {(r[0], r[1]): tuple(r) for r in rows}


def _entities_log(states: Iterable[Ontology]) -> dict:
    return {(s.tenant, ref): (s.tenant, ref, e.label, list(e.aliases), e.hub, e.needs_review, e.merged_into)
            for s in states for ref, e in s.entities.items()}


def _sessions_sql(con: duckdb.DuckDBPyConnection) -> dict:
    rows = con.execute("SELECT tenant, session_id, agent, kind, serving, parent_session_id, task, about, status,"
                       " last_summary, ended, messages, workers, compactions FROM sessions").fetchall()
    return {(r[0], r[1]): tuple(r) for r in rows}


def _sessions_log(states: Iterable[Ontology]) -> dict:
    return {(s.tenant, sid): (s.tenant, sid, x.agent, x.kind.value, x.serving, x.parent_session_id, x.task,
                              list(x.about), x.status.value if x.status else None, x.last_summary, x.ended,
                              len(x.message_ids), list(x.workers), x.compactions)
            for s in states for sid, x in s.sessions.items()}


@settings(max_examples=examples(0.07), suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), commands=st.integers(1, 70), batch_size=st.integers(1, 9))
@pytest.mark.slow
def test_facts_as_of_equals_a_replay_to_t_and_the_log_fold(seed: int, commands: int, batch_size: int) -> None:
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory(prefix="asof-") as tmp:
        home = Path(tmp)
        clock = ManualClock()
        app = bootstrap(Settings(home=home, event_store="sqlite"), clock=clock)
        try:
            workload = Workload(rng)
            for command in workload.setup():
                workload.run(app.service, command)
            for _ in range(commands):
                clock.now += rng.choice(STEPS)
                workload.run(app.service, workload.next())
            events = [logged.event for logged in app.log.read(0, 1_000_000)]
            with Projector(app.log, home / "live.duckdb", batch_size=batch_size) as live:
                live.catch_up()
                assert live.position == app.log.max_position()
                for i, moment in enumerate(_moments([e.recorded_at for e in events], rng, 2)):
                    replayed = replay(app.log, home / f"at-{i}.duckdb", moment)
                    folded = {t: believed_at(t, events, moment) for t in TENANTS}
                    at_t = duckdb.connect(str(replayed.path), read_only=True)
                    try:
                        expected = {k: v for s in folded.values() for k, v in fact_rows_from_log(s).items()}
                        assert fact_rows_from_sql(at_t, "SELECT * FROM facts WHERE status = 'current'") == expected
                        assert fact_rows_from_sql(live.con, "SELECT * FROM facts_as_of(?)", [moment]) == expected

                        valid_at = rng.choice([v for v in VALID_TIMES if v is not None]) + rng.choice(EPSILONS)
                        expected = {k: v for s in folded.values() for k, v in fact_rows_from_log(s, valid_at).items()}
                        assert fact_rows_from_sql(
                            at_t, "SELECT * FROM facts WHERE status <> 'archived' AND (valid_from IS NULL OR"
                                  " valid_from <= $1) AND (valid_to IS NULL OR $1 < valid_to)", [valid_at]) == expected
                        assert fact_rows_from_sql(live.con, "SELECT * FROM facts_as_of($1, valid_at := $2)",
                                                  [moment, valid_at]) == expected
                        # a functional relation holds one value per (subject, scope) at every valid instant
                        assert live.con.execute(
                            "SELECT tenant, subject, scope, count(*) FROM facts_as_of($1, valid_at := $2)"
                            " WHERE relation = 'stage' GROUP BY ALL HAVING count(*) > 1",
                            [moment, valid_at]).fetchall() == []
                    finally:
                        at_t.close()
                    assert _entities_sql(live.con, moment) == _entities_log(folded.values())
                final = {t: believed_at(t, events) for t in TENANTS}
                assert _sessions_sql(live.con) == _sessions_log(final.values())
                assert sorted(live.con.execute("SELECT tenant, agent, fact_id, used_at FROM fact_uses").fetchall()) \
                    == sorted((s.tenant, agent, fact_id, at) for s in final.values()
                              for fact_id, by_agent in s.recall_uses.items()
                              for agent, times in by_agent.items() for at in times)
        finally:
            app.close()
