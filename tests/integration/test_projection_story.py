"""The seed's story, projected: what was believed at each moment, neighbours, activation, workers, and the
projection commands (replay, export, sql, rebuild, snapshot) on real files."""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import polars as pl
import pytest
from typer.testing import CliRunner

from api.cli import app as cli
from demo.story import MOMENTS, START, TENANT, StoryClock, build_story
from domain import commands as c
from domain.recalls import RecallMode
from infra.bootstrap import Noumena
from projections.files import ProjectionFiles
from projections.ontology_as_of import believed_at
from projections.projector import Projector
from projections.replay import replay
from projections.schema import ALL_TABLES
from tests.projection_support import content_hashes, fact_rows_from_log, fact_rows_from_sql


@pytest.fixture
def story(tmp_path: Path) -> Iterator[tuple[Noumena, StoryClock, Path]]:
    home = tmp_path / "home"
    app, clock = build_story(home)
    yield app, clock, home
    app.close()


def _live(app: Noumena, home: Path) -> Projector:
    projector = Projector(app.log, ProjectionFiles(home).live, batch_size=5)
    projector.catch_up()
    return projector


def test_the_projection_answers_what_was_believed_at_each_moment_of_the_story(story) -> None:
    app, _clock, home = story
    events = [logged.event for logged in app.log.read(0, 10_000)]
    with _live(app, home) as projector:
        for _title, moment in MOMENTS:
            expected = fact_rows_from_log(believed_at(TENANT, events, moment))
            assert fact_rows_from_sql(projector.con, "SELECT * FROM facts_as_of(?)", [moment]) == expected


def test_the_contract_is_a_neighbour_of_li_once_it_was_recorded_with_its_label_as_it_was(story) -> None:
    app, _clock, home = story
    query = ("SELECT neighbour, label, relation, direction FROM entity_neighbours_as_of('person:li', ?)"
             " WHERE tenant = ? ORDER BY neighbour")
    with _live(app, home) as projector:
        before = projector.con.execute(query, [START + timedelta(hours=1), TENANT]).fetchall()
        after = projector.con.execute(query, [START + timedelta(days=9, hours=1), TENANT]).fetchall()
    assert ("file:contracts/li-v3.docx", "contract v3", "contract_with", "in") not in before
    assert ("file:contracts/li-v3.docx", "contract v3", "contract_with", "in") in after
    assert ("agent:sales", "the sales agent", "handles_account", "in") in after


def test_activation_counts_the_assertion_for_everyone_and_recalls_only_for_the_agent_who_recalled(story) -> None:
    app, clock, home = story
    fact_id = next(f.fact_id for f in app.service.ontology(TENANT).facts.values() if f.relation == "quote_for")
    asserted = app.service.ontology(TENANT).facts[fact_id].asserted_at
    recalled = datetime(2026, 9, 14, 12, tzinfo=UTC)  # after the last story event
    clock.now = recalled
    app.service.execute(c.RecordRecall(tenant=TENANT, agent="agent:sales", fact_ids=(fact_id,),
                                       mode=RecallMode.USED))
    at = datetime(2026, 9, 15, tzinfo=UTC)
    query = "SELECT uses, activation FROM activation_as_of(?, ?) WHERE fact_id = ?"
    with _live(app, home) as projector:
        sales = projector.con.execute(query, ["agent:sales", at, fact_id]).fetchall()
        wang = projector.con.execute(query, ["agent:wang-assistant", at, fact_id]).fetchall()
        before_recall = projector.con.execute(query, ["agent:sales", recalled - timedelta(seconds=1), fact_id]
                                              ).fetchall()
    lag = lambda t: (at - t).total_seconds()  # noqa: E731
    assert sales[0][0] == 2
    assert sales[0][1] == pytest.approx(math.log(lag(asserted) ** -0.5 + lag(recalled) ** -0.5))
    assert wang[0] == (1, pytest.approx(math.log(lag(asserted) ** -0.5)))
    assert before_recall[0][0] == 1


def test_activation_with_the_perspectives_units_equals_the_domain_base_level(story) -> None:
    from domain.activation import ActivationParameters, base_level

    app, _clock, home = story
    fact = next(f for f in app.service.ontology(TENANT).facts.values() if f.relation == "quote_for")
    at = datetime(2026, 9, 20, tzinfo=UTC)
    parameters = ActivationParameters()
    with _live(app, home) as projector:
        rows = projector.con.execute(
            "SELECT activation FROM activation_as_of(?, ?, time_unit := ?, minimum_age := ?) WHERE fact_id = ?",
            ["agent:sales", at, parameters.time_unit_seconds, parameters.minimum_age_seconds, fact.fact_id],
        ).fetchall()
    expected = base_level(parameters, at.timestamp(), [fact.asserted_at.timestamp()])
    assert rows[0][0] == pytest.approx(expected)


def test_the_workers_view_says_which_worker_holds_which_task_about_what(story) -> None:
    app, _clock, home = story
    with _live(app, home) as projector:
        rows = projector.con.execute("SELECT worker_session_id, main_session_id, task, about, status FROM workers"
                                     " WHERE tenant = ?", [TENANT]).fetchall()
    assert rows == [("w-quote-li", "wang-main", "follow-up: the freight rate changed",
                     ["person:li", "file:quotes/q3.xlsx"], "working")]


def test_a_projector_resumes_after_its_last_stored_batch_and_applies_nothing_twice(story, tmp_path) -> None:
    app, _clock, home = story
    live = ProjectionFiles(home).live
    with Projector(app.log, live, batch_size=4) as first:
        first.run_once()
        first.run_once()
        assert first.position == 8
    with Projector(app.log, live, batch_size=3) as second:
        assert second.position == 8
        second.catch_up()
        hashes = content_hashes(second.con)
    clean = replay(app.log, tmp_path / "clean.duckdb")
    with duckdb.connect(str(clean.path), read_only=True) as con:
        assert content_hashes(con) == hashes


@pytest.fixture
def cli_home(story, monkeypatch) -> Iterator[Path]:
    app, _clock, home = story
    monkeypatch.setenv("NOUMENA_HOME", str(home))
    monkeypatch.setenv("NOUMENA_EVENT_STORE", "sqlite")
    yield home


def test_replay_writes_the_database_as_it_stood_at_t(cli_home: Path) -> None:
    moment = MOMENTS[1][1]
    out = cli_home / "day5.duckdb"
    result = CliRunner().invoke(cli, ["replay", "--as-of", moment.isoformat(), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert CliRunner().invoke(cli, ["rebuild"]).exit_code == 0
    with duckdb.connect(str(out), read_only=True) as then, \
            duckdb.connect(str(ProjectionFiles(cli_home).snapshot), read_only=True) as now:
        assert fact_rows_from_sql(then, "SELECT * FROM facts WHERE status = 'current'") == \
            fact_rows_from_sql(now, "SELECT * FROM facts_as_of(?)", [moment])


def test_export_writes_every_table_as_parquet_that_polars_reads(cli_home: Path) -> None:
    result = CliRunner().invoke(cli, ["export", "--parquet", str(cli_home / "pq")])
    assert result.exit_code == 0, result.output
    for table in ALL_TABLES:
        assert (cli_home / "pq" / f"{table.name}.parquet").exists()
    changes = pl.read_parquet(cli_home / "pq" / "fact_changes.parquet")
    assert changes.filter(pl.col("change") == "invalidated").height == 1  # the drafting stage was superseded


def test_sql_prints_rows_and_refuses_to_write(cli_home: Path) -> None:
    shown = CliRunner().invoke(cli, ["sql", "SELECT label FROM entities WHERE ref = 'person:li'"])
    assert shown.exit_code == 0 and "李总 (Li)" in shown.output
    refused = CliRunner().invoke(cli, ["sql", "CREATE TABLE mine (a INTEGER)"])
    assert refused.exit_code == 2


@pytest.mark.parametrize("backend_name", ["sqlite", "postgres"])
def test_the_projection_agrees_with_the_log_on_every_event_store(backend_name: str, make_noumena, tmp_path) -> None:
    import random

    from tests.projection_support import ManualClock, Workload

    rng = random.Random(11)
    clock = ManualClock()
    app = make_noumena(backend_name, clock=clock)
    workload = Workload(rng)
    for command in workload.setup():
        workload.run(app.service, command)
    for _ in range(120):
        clock.now += timedelta(minutes=rng.choice([0, 1, 30]))
        workload.run(app.service, workload.next())
    events = [logged.event for logged in app.log.read(0, 100_000)]
    with Projector(app.log, tmp_path / f"{backend_name}.duckdb", batch_size=17) as projector:
        projector.catch_up()
        for moment in rng.sample([e.recorded_at for e in events], 5):
            expected = {k: v for t in ("t1", "t2")
                        for k, v in fact_rows_from_log(believed_at(t, events, moment)).items()}
            assert fact_rows_from_sql(projector.con, "SELECT * FROM facts_as_of(?)", [moment]) == expected


def test_a_replay_staged_in_small_chunks_equals_one_staged_at_once(story, tmp_path, monkeypatch) -> None:
    import projections.bulk

    app, _clock, _home = story
    for _title, moment in MOMENTS[:3]:
        whole = replay(app.log, tmp_path / "whole.duckdb", moment)
        monkeypatch.setattr(projections.bulk, "STAGE_CHUNK", 4)
        chunked = replay(app.log, tmp_path / "chunked.duckdb", moment)
        monkeypatch.setattr(projections.bulk, "STAGE_CHUNK", 100_000)
        assert (whole.position, whole.events) == (chunked.position, chunked.events)
        with duckdb.connect(str(whole.path), read_only=True) as a, duckdb.connect(str(chunked.path),
                                                                                  read_only=True) as b:
            assert content_hashes(a) == content_hashes(b)
