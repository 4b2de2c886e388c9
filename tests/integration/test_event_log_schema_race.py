"""Processes that open one fresh PostgreSQL schema at the same moment all get a working event log (they race on
the schema's DDL; the loser tries again and finds the tables)."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest

from tests.conftest import postgres_settings

pytestmark = pytest.mark.postgres


def _open(env: dict[str, str], start: multiprocessing.synchronize.Barrier, out: multiprocessing.Queue) -> None:
    from infra.adapters.eventlog import EventsourcingLog

    start.wait()
    try:
        log = EventsourcingLog(env)
        out.put(("ok", log.max_position()))
    except Exception as error:  # reported to the test, which names it
        out.put(("failed", repr(error)))


def test_processes_opening_a_fresh_postgres_schema_at_once_all_get_the_log(tmp_path: Path) -> None:
    for round_ in range(3):
        env = postgres_settings(tmp_path / f"home{round_}").event_store_env()
        context = multiprocessing.get_context("spawn")
        start, out = context.Barrier(4), context.Queue()
        workers = [context.Process(target=_open, args=(env, start, out)) for _ in range(4)]
        for worker in workers:
            worker.start()
        results = [out.get(timeout=120) for _ in workers]
        for worker in workers:
            worker.join(timeout=60)
        assert results == [("ok", 0)] * 4, results
