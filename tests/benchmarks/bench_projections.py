"""Benchmark: the DuckDB projections, as ratios against baselines measured in the same run.

1. rebuild rate versus the decode-only rate of the same log (baseline: `log.read`, which turns every stored
   event into its pydantic event and does nothing else). Goal >= 0.5; absolute events/s for information.
2. `facts_as_of(T)` on the fact versions of the log versus replaying the same log to T into a fresh DuckDB file
   (baseline: `noumena replay --as-of T`). Goal >= 100x faster.
3. projection lag while a writer process appends facts through the domain path as fast as it can (the event-log
   benchmark's path: batches of 100 AssertFact), with the projector following in this process (baseline: the
   writer's own ingest rate; the ratio is the projector's throughput over it, >= 1 means it keeps up).

Sizes: NOUMENA_BENCH_PROJ_EVENTS (default 1000000 fact events: about 1M fact versions),
NOUMENA_BENCH_LAG_SECONDS (default 10).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import duckdb  # noqa: E402
from eventsourcing.persistence import StoredEvent  # noqa: E402

from api.process_tuning import tune_collector_for_a_long_lived_heap  # noqa: E402
from domain import commands as c  # noqa: E402
from domain.entities import EntityRegistered  # noqa: E402
from domain.facts import FactAsserted, FactCorroborated, FactInvalidated  # noqa: E402
from domain.recalls import FactsRecalled, RecallMode  # noqa: E402
from domain.tenants import TenantCreated  # noqa: E402
from infra.adapters.eventlog import EventsourcingLog  # noqa: E402
from infra.adapters.mapper import stream_id  # noqa: E402
from infra.bootstrap import bootstrap  # noqa: E402
from infra.settings import Settings  # noqa: E402
from projections.projector import Projector  # noqa: E402
from projections.replay import replay  # noqa: E402

EVENTS = int(os.environ.get("NOUMENA_BENCH_PROJ_EVENTS", "1000000"))
LAG_SECONDS = float(os.environ.get("NOUMENA_BENCH_LAG_SECONDS", "10"))
ENTITIES = 2000
TENANT = "bench"
START = datetime(2026, 1, 1, tzinfo=UTC)


def _payloads(n: int) -> Iterator[tuple[str, dict]]:
    """A fact-heavy log: assertions, corroborations, invalidations (each a new fact version) and recalls, as
    (stored topic, payload) in the events' JSON shape (built as dicts: writing 1M pydantic events is slow)."""
    rng = random.Random(42)
    at = START
    tick = timedelta(milliseconds=1)
    base = {"tenant": TENANT, "event_id": None}
    yield TenantCreated.stored_topic(), {**base, "recorded_at": at.isoformat(), "display_name": ""}
    for i in range(ENTITIES):
        yield EntityRegistered.stored_topic(), {**base, "recorded_at": at.isoformat(), "ref": f"thing:e{i}",
                                                "label": f"entity {i}", "aliases": [], "hub": False,
                                                "needs_review": False}
    current: list[str] = []
    provenance = {"session_id": "s", "message_ids": ["m"], "actor": "agent:bench", "event_id": None,
                  "occurred_at": None}
    for k in range(n - ENTITIES - 1):
        at += tick
        stamp = at.isoformat()
        roll = rng.random()
        if roll < 0.70 or len(current) < 100:
            fact_id = f"f{k}"
            current.append(fact_id)
            yield FactAsserted.stored_topic(), {
                **base, "recorded_at": stamp, "fact_id": fact_id, "subject": f"thing:e{rng.randrange(ENTITIES)}",
                "relation": f"r{rng.randrange(7)}", "object": f"thing:e{rng.randrange(ENTITIES)}", "scope": "org",
                "reason": "benchmark", "confidence": 0.8,
                "valid_from": (at - timedelta(days=rng.randrange(30))).isoformat(), "valid_to": None,
                "provenance": provenance, "supersedes": None}
        elif roll < 0.85:
            yield FactCorroborated.stored_topic(), {
                **base, "recorded_at": stamp, "fact_id": rng.choice(current), "provenance": provenance,
                "previous_confidence": 0.8, "confidence": 0.96, "reason": None}
        elif roll < 0.95:
            fact_id = current.pop(rng.randrange(len(current)))
            yield FactInvalidated.stored_topic(), {
                **base, "recorded_at": stamp, "fact_id": fact_id, "reason": "benchmark", "valid_to": stamp,
                "superseded_by": None, "provenance": provenance}
        else:
            yield FactsRecalled.stored_topic(), {
                **base, "recorded_at": stamp, "agent": f"thing:e{rng.randrange(10)}",
                "fact_ids": rng.sample(current, 3), "mode": RecallMode.PUSHED.value, "perspective_id": None}


def build_log(home: Path, n: int) -> EventsourcingLog:
    log = EventsourcingLog(Settings(home=home, event_store="sqlite").event_store_env())
    batch: list[StoredEvent] = []
    for version, (topic, payload) in enumerate(_payloads(n), start=1):
        batch.append(StoredEvent(originator_id=stream_id(TENANT), originator_version=version, topic=topic,
                                 state=json.dumps(payload).encode()))
        if len(batch) == 5000:
            log.recorder.insert_events(batch)
            batch = []
    if batch:
        log.recorder.insert_events(batch)
    return log


def decode_only(log: EventsourcingLog) -> float:
    started, position, count = time.perf_counter(), 0, 0
    while True:
        batch = log.read(position, 50_000)
        if not batch:
            break
        position, count = batch[-1].position, count + len(batch)
    return count / (time.perf_counter() - started)


def rebuild_rate(log: EventsourcingLog, out: Path) -> float:
    started = time.perf_counter()
    done = replay(log, out)
    return done.events / (time.perf_counter() - started)


def as_of_versus_replay(log: EventsourcingLog, live: Path, home: Path) -> None:
    con = duckdb.connect(str(live), read_only=True)
    versions = con.execute("SELECT count(*) FROM fact_versions").fetchall()[0][0]
    moment = con.execute("SELECT recorded_at FROM clock WHERE position = (SELECT max(position) // 2 FROM clock)"
                         ).fetchall()[0][0]
    valid_at = moment - timedelta(days=10)
    timings = {}
    for name, sql, params in (("facts_as_of(T), every row to Arrow", "SELECT * FROM facts_as_of(?)", [moment]),
                              ("facts_as_of(T, valid_at), every row to Arrow",
                               "SELECT * FROM facts_as_of(?, valid_at := ?)", [moment, valid_at]),
                              ("facts_as_of(T) counted by relation",
                               "SELECT relation, count(*) FROM facts_as_of(?) GROUP BY relation", [moment])):
        runs = []
        for _ in range(5):
            started = time.perf_counter()
            rows = con.sql(sql, params=params).to_arrow_table().num_rows
            runs.append(time.perf_counter() - started)
        timings[name] = (statistics.median(runs), rows)
    con.close()
    started = time.perf_counter()
    replayed = replay(log, home / "replayed.duckdb", moment)
    replay_seconds = time.perf_counter() - started
    print(f"  {versions:,} fact versions; T = {moment.isoformat()} (log position {replayed.position:,})")
    print(f"  baseline: replay to T ({replayed.events:,} events into a fresh file): {replay_seconds:.2f} s")
    for name, (seconds, rows) in timings.items():
        print(f"  {name}: {seconds * 1000:.1f} ms, {rows:,} rows -> {replay_seconds / seconds:,.0f}x faster"
              f" than the baseline (goal >= 100x)")


def _writer(home: str, seconds: float, out: str) -> None:
    """Run in a separate process: append facts through the domain path, as fast as possible, for `seconds`."""
    app = bootstrap(Settings(home=Path(home), event_store="sqlite"))
    rng = random.Random(1)
    marks = []
    started = time.perf_counter()
    n = 0
    while time.perf_counter() - started < seconds:
        commands = [c.AssertFact(tenant=TENANT, subject=f"thing:e{rng.randrange(ENTITIES)}",
                                 relation=f"r{rng.randrange(7)}", object=f"thing:e{rng.randrange(ENTITIES)}",
                                 reason=f"lag {n + i}") for i in range(100)]
        n += 100
        result = app.service.execute_batch(commands)
        marks.append(f"{result.last_position} {time.time()} {len(result.positions)}")
    app.close()
    Path(out).write_text("\n".join(marks))


def lag(home: Path) -> None:
    app = bootstrap(Settings(home=home, event_store="sqlite"))
    app.service.execute(c.CreateTenant(tenant=TENANT))
    for start in range(0, ENTITIES, 500):
        app.service.execute_batch([c.RegisterEntity(tenant=TENANT, ref=f"thing:e{i}", label=f"entity {i}")
                                   for i in range(start, start + 500)])
    settings = Settings(home=home)
    projector = Projector(app.log, home / "projections.duckdb", batch_size=settings.projection_batch_size)
    projector.catch_up()
    first = app.log.max_position()
    marks_file = home / "marks.txt"
    writer = multiprocessing.get_context("spawn").Process(target=_writer, args=(str(home), LAG_SECONDS,
                                                                                 str(marks_file)))
    writer.start()
    commits: list[tuple[int, float]] = []
    busy = 0.0
    while writer.is_alive() or projector.position < app.log.max_position():
        started = time.perf_counter()
        if projector.run_once():
            busy += time.perf_counter() - started
            commits.append((projector.position, time.time()))
        else:
            time.sleep(settings.projection_poll_interval)
    writer.join()
    projector.close()
    marks = [line.split() for line in marks_file.read_text().splitlines()]
    written = [(int(p), float(t), int(k)) for p, t, k in marks if p != "None"]
    events = sum(k for _, _, k in written)
    ingest_seconds = written[-1][1] - (written[0][1] - (written[1][1] - written[0][1]))
    ingest_rate = events / ingest_seconds
    lags, j = [], 0
    for position, at, _ in written:
        while commits[j][0] < position:
            j += 1
        lags.append(commits[j][1] - at)
    capacity = (commits[-1][0] - first) / busy
    lags.sort()
    print(f"  baseline: writer ingest {ingest_rate:,.0f} events/s ({events:,} events in {ingest_seconds:.1f} s,"
          f" domain path, batches of 100, another process)")
    mean_batch = (commits[-1][0] - first) / len(commits)
    print(f"  projector capacity while following: {capacity:,.0f} events/s of busy time ->"
          f" {capacity / ingest_rate:.2f}x the ingest rate (>= 1: it keeps up); {len(commits)} commits,"
          f" mean batch {mean_batch:,.0f} events (poll interval {settings.projection_poll_interval} s)")
    print(f"  lag from append to committed in DuckDB: median {statistics.median(lags) * 1000:.0f} ms,"
          f" p95 {lags[int(len(lags) * 0.95)] * 1000:.0f} ms, max {lags[-1] * 1000:.0f} ms")


def main() -> None:
    tune_collector_for_a_long_lived_heap()  # (as the served process does)
    with tempfile.TemporaryDirectory(prefix="noumena-bench-proj-") as tmp:
        home = Path(tmp)
        started = time.perf_counter()
        log = build_log(home / "log", EVENTS)
        print(f"log of {log.max_position():,} events written in {time.perf_counter() - started:.1f} s")

        print("1. rebuild versus decode-only")
        decode = decode_only(log)
        rebuild = rebuild_rate(log, home / "rebuilt.duckdb")
        print(f"  baseline: decode-only (log.read -> pydantic events): {decode:,.0f} events/s")
        print(f"  rebuild (stage the log in DuckDB, derive the tables in SQL): {rebuild:,.0f} events/s"
              " (target >= 100k/s)")
        print(f"  ratio rebuild / decode-only: {rebuild / decode:.2f} (goal >= 0.5)")

        print("2. facts_as_of versus replay to T")
        as_of_versus_replay(log, home / "rebuilt.duckdb", home)
        log.close()

        print("3. projection lag at the domain ingest rate")
        lag(home / "lag")


if __name__ == "__main__":
    main()
