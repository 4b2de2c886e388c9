"""Benchmark: time to the first write after a restart, from a snapshot of the folded state against a full fold.

For each size in NOUMENA_BENCH_RESTART_EVENTS (default "100000,1000000" events in one tenant), a fresh home (SQLite,
or PostgreSQL with NOUMENA_BENCH_STORE=postgres) is given a sealed log written with batched appends: 2,000
entities (a tenth of them persons), then 70% fact assertions, 15% corroborations, 10% invalidations, 5% recalls.
Then, each in a fresh process (spawned, so nothing is warm but the operating system's file cache):

1. first start: the whole log folded, the first write, and the snapshot taken and stored (the process stops);
2. baseline: a restart with snapshots off (NOUMENA_STATE_SNAPSHOT_EVERY=0): bootstrap, the whole log folded, the
   first write (an `AssertFact`) acknowledged;
3. a restart from the snapshot the previous stop left: bootstrap, snapshot loaded, tail folded, the first write;
4. a restart after a crash: the snapshot is `NOUMENA_STATE_SNAPSHOT_EVERY` events (the setting's default unless
   NOUMENA_BENCH_RESTART_EVERY says otherwise) behind the log;
5. a restart after SIGKILL: a process writes NOUMENA_BENCH_RESTART_KILLED (default 30,000) events through the
   service (`AssertFact` batches of 500, as the HTTP API and the Kafka consumer write, asking for snapshots as it
   goes: its snapshotter writes them as delta files) and is killed with SIGKILL right after its last write is
   acknowledged;
6. a restart right after a bulk import: a process writes NOUMENA_BENCH_RESTART_BULK (default 150,000) events the
   same way and stops cleanly, as `noumena import` does (its stop has the snapshotter bring the snapshot to the end).

Cases 5 and 6 print how far the snapshot on disk (with its deltas) was behind the log when the restart began, and
how long the writing process's stop took.

Times are measured inside each process from just before `bootstrap()` to the write's return (the interpreter's
start and imports, the same for all, are printed apart). The ratio baseline / snapshot is the result
(NOUMENA_BENCH_RESTART_BASELINE=0 leaves the baseline out: a whole fold at 1M takes minutes on a busy machine); the
goal is a first write within 1 s at 1M events in cases 3, 5 and 6. The rounds (NOUMENA_BENCH_ROUNDS, default 3)
alternate 2 and 3; medians. A restart from the snapshot reads its buckets on demand: the benchmark prints how many
the first write read, and how long the stop took (the first start stores the snapshot whole).
NOUMENA_BENCH_RESTART_HOME names a folder where the logs are kept and reused by the next run (writing 1M events
takes minutes).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from api.process_tuning import tune_collector_for_a_long_lived_heap  # noqa: E402
from domain.entities import EntityRegistered  # noqa: E402
from domain.facts import FactAsserted, FactCorroborated, FactInvalidated  # noqa: E402
from domain.forgetting import content_key  # noqa: E402
from domain.ontology import Ontology  # noqa: E402
from domain.ports import Pending  # noqa: E402
from domain.recalls import FactsRecalled, RecallMode  # noqa: E402
from domain.tenants import TenantCreated  # noqa: E402
from domain.values import Provenance  # noqa: E402
from infra.settings import Settings  # noqa: E402

SIZES = [int(n) for n in os.environ.get("NOUMENA_BENCH_RESTART_EVENTS", "100000,1000000").split(",")]
ROUNDS = int(os.environ.get("NOUMENA_BENCH_ROUNDS", "3"))
KILLED = int(os.environ.get("NOUMENA_BENCH_RESTART_KILLED", "30000"))
BULK = int(os.environ.get("NOUMENA_BENCH_RESTART_BULK", "150000"))
BASELINE = os.environ.get("NOUMENA_BENCH_RESTART_BASELINE", "1") != "0"
BULK_BATCH = 500
EVERY = int(os.environ.get("NOUMENA_BENCH_RESTART_EVERY", "0")) or Settings.model_fields["state_snapshot_every"].default
STORE = os.environ.get("NOUMENA_BENCH_STORE", "sqlite")
TENANT = "bench"
ENTITIES = 2000
BATCH = 5000
START = datetime(2026, 1, 1, tzinfo=UTC)


def _settings(home: Path, every: int = EVERY) -> Settings:
    if STORE == "postgres":
        from tests.conftest import postgres_settings

        schema_file = home / "schema.txt"
        if schema_file.exists():
            base = Settings(home=home, event_store="postgres", pg_schema=schema_file.read_text())
        else:
            base = postgres_settings(home)
            schema_file.write_text(base.pg_schema)
        return base.model_copy(update={"state_snapshot_every": every, "kek_file": home / "shared.kek"})
    return Settings(home=home, event_store="sqlite", state_snapshot_every=every)


def _events(n: int, rng: random.Random, first: int):  # type: ignore[no-untyped-def]
    """`n` events of the mix above (the tenant and entities first when `first` is 0)."""
    at = START + timedelta(milliseconds=first)
    tick = timedelta(milliseconds=1)
    provenance = Provenance(session_id="s", message_ids=("m",), actor="agent:bench")
    refs = [f"person:p{i}" if i % 10 == 0 else f"thing:e{i}" for i in range(ENTITIES)]
    made = 0
    if first == 0:
        yield TenantCreated(tenant=TENANT, recorded_at=at)
        for ref in refs:
            yield EntityRegistered(tenant=TENANT, recorded_at=at, ref=ref, label=f"label of {ref}")
        made = ENTITIES + 1
    current: list[str] = []
    for k in range(first + made, first + n):
        at += tick
        roll = rng.random()
        if roll < 0.70 or len(current) < 100:
            fact_id = f"f{k}"
            current.append(fact_id)
            yield FactAsserted(tenant=TENANT, recorded_at=at, fact_id=fact_id, subject=rng.choice(refs),
                               relation=f"r{rng.randrange(7)}", object=rng.choice(refs), scope="org",
                               reason=f"reason {k}", confidence=0.8, valid_from=at - timedelta(days=rng.randrange(30)),
                               provenance=provenance)
        elif roll < 0.85:
            yield FactCorroborated(tenant=TENANT, recorded_at=at, fact_id=rng.choice(current), provenance=provenance,
                                   previous_confidence=0.8, confidence=0.96)
        elif roll < 0.95:
            yield FactInvalidated(tenant=TENANT, recorded_at=at, fact_id=current.pop(rng.randrange(len(current))),
                                  reason="no longer", valid_to=at, provenance=provenance)
        else:
            yield FactsRecalled(tenant=TENANT, recorded_at=at, agent=f"agent:a{rng.randrange(10)}",
                                fact_ids=tuple(rng.sample(current, 3)), mode=RecallMode.PUSHED)


def write_log(home: Path, n: int) -> float:
    """Append `n` events to the tenant's stream, sealed, in batches (through the log adapter, not the rules)."""
    from infra.adapters.eventlog import EventsourcingLog
    from infra.adapters.mapper import stream_id

    settings = _settings(home)
    log = EventsourcingLog(settings.event_store_env(), settings.key_store())
    last = list(log.recorder.select_events(stream_id(TENANT), desc=True, limit=1))
    first = last[0].originator_version if last else 0
    empty = Ontology(tenant=TENANT)  # (content keys of these kinds do not depend on the state)
    started = time.perf_counter()
    batch: list[Pending] = []
    for version, event in enumerate(_events(n, random.Random(first + 7), first), start=first + 1):
        batch.append(Pending(TENANT, version, event, content_key(empty, event)))
        if len(batch) == BATCH:
            log.append(batch)
            batch = []
    if batch:
        log.append(batch)
    seconds = time.perf_counter() - started
    log.close()
    return seconds


def _restart(home: str, every: int, out: str) -> None:
    """In a fresh process: bootstrap, the first write, then a clean stop; the times into `out`."""
    imported = time.perf_counter()
    from domain import commands as c
    from infra.bootstrap import bootstrap

    imports = time.perf_counter() - imported
    started = time.perf_counter()
    noumena = bootstrap(_settings(Path(home), every))
    booted = time.perf_counter()
    outcome = noumena.service.execute(c.AssertFact(tenant=TENANT, subject="thing:e1", relation="restarted",
                                                   object=f"thing:e{random.randrange(1, ENTITIES // 10) * 10 + 1}",
                                                   reason="first"))
    written = time.perf_counter()
    assert outcome.events
    from infra.adapters.state_snapshots import FileStateSnapshots

    loaded = FileStateSnapshots.reads(noumena.service.ontology(TENANT))
    noumena.close()
    stopped = time.perf_counter()
    snapshots = noumena.snapshots  # (what the benchmark reports, nothing more)
    Path(out).write_text(json.dumps({"imports": imports, "bootstrap": booted - started,
                                     "first_write": written - started, "stop": stopped - written,
                                     "loaded": loaded, "stored": getattr(snapshots, "stored", [])}))


def _write_through_service(home: str, n: int, kill: bool) -> None:
    """In a fresh process: `n` fact assertions through the service in batches, then SIGKILL or a clean stop."""
    import signal

    from domain import commands as c
    from infra.bootstrap import bootstrap

    noumena = bootstrap(_settings(Path(home)))
    rng = random.Random(n)
    refs = [f"person:p{i}" if i % 10 == 0 else f"thing:e{i}" for i in range(ENTITIES)]
    for first in range(0, n, BULK_BATCH):
        batch = [c.AssertFact(tenant=TENANT, subject=rng.choice(refs), relation=f"bulk{rng.randrange(7)}",
                              object=rng.choice(refs), reason=f"bulk {first + i} {rng.random()}")
                 for i in range(min(BULK_BATCH, n - first))]
        result = noumena.service.execute_batch(batch)
        assert all(o.ok for o in result.outcomes)
    if kill:
        os.kill(os.getpid(), signal.SIGKILL)
    stopping = time.perf_counter()
    noumena.close()
    print(f"  (the writing process's stop took {time.perf_counter() - stopping:.2f} s)", flush=True)


def write_through_service(home: Path, n: int, kill: bool) -> float:
    started = time.perf_counter()
    process = multiprocessing.get_context("spawn").Process(target=_write_through_service, args=(str(home), n, kill))
    process.start()
    process.join()
    if process.exitcode != (-9 if kill else 0):
        raise SystemExit(f"the writing process ended with {process.exitcode}")
    return time.perf_counter() - started


def snapshot_lag(home: Path) -> tuple[int, int]:
    """(the log's length, the stream version of the snapshot on disk) of the benchmark's tenant."""
    from infra.adapters.eventlog import EventsourcingLog
    from infra.adapters.mapper import stream_id
    from infra.adapters.state_snapshots import FileStateSnapshots

    settings = _settings(home)
    log = EventsourcingLog(settings.event_store_env(), settings.key_store())
    last = list(log.recorder.select_events(stream_id(TENANT), desc=True, limit=1))
    snapshots = FileStateSnapshots(home, log, log.keys, EVERY)
    stored = snapshots.stored_version(TENANT)
    snapshots.close()
    log.close()
    return (last[0].originator_version if last else 0), stored


def after_writes(home: Path, n: int, kill: bool, what: str) -> None:
    seconds = write_through_service(home, n, kill)
    length, stored = snapshot_lag(home)
    restarted = restart(home, EVERY)
    print(f"  {what}: {n:,} events written through the service in {seconds:.1f} s ({n / seconds:,.0f}/s), the "
          f"snapshot {length - stored:,} events behind the log ({length:,}): first write after "
          f"{restarted['first_write']:.2f} s; goal <= 1 s: {'met' if restarted['first_write'] <= 1 else 'NOT met'}")


def restart(home: Path, every: int) -> dict:
    out = home / f"restart-{time.monotonic_ns()}.json"
    process = multiprocessing.get_context("spawn").Process(target=_restart, args=(str(home), every, str(out)))
    process.start()
    process.join()
    if process.exitcode != 0:
        raise SystemExit(f"the restarted process failed (exit {process.exitcode})")
    return json.loads(out.read_text())


def measure(n: int, root: Path) -> None:
    home = root / f"log-{n}"
    if (home / "events.sqlite").exists() or (home / "schema.txt").exists():  # (a kept home: its log reused)
        shutil.rmtree(home / "state", ignore_errors=True)
        print(f"{n:,} events: the log of {home} reused (with the events each earlier run added)")
    else:
        home.mkdir()
        written = write_log(home, n)
        print(f"{n:,} events: written in {written:.1f} s ({n / written:,.0f} events/s, batches of {BATCH:,})")
    size = sum(p.stat().st_size for p in home.rglob("*") if p.is_file())
    print(f"  home {size / 1e6:,.0f} MB")
    first = restart(home, EVERY)
    snapshot = home / "state" / f"{TENANT}.snapshot"
    print(f"  first start (whole log folded, first write): {first['first_write']:.2f} s; the snapshot stored at the "
          f"stop (+{first['stop']:.2f} s): {snapshot.stat().st_size / 1e6:,.0f} MB")
    baseline, snapshotted, runs = [], [], []
    for _ in range(ROUNDS):
        if BASELINE:
            baseline.append(restart(home, 0)["first_write"])
        runs.append(restart(home, EVERY))
        snapshotted.append(runs[-1]["first_write"])
    fast = statistics.median(snapshotted)
    if baseline:
        full = statistics.median(baseline)
        print(f"  baseline, whole log folded: first write after {full:.2f} s (median of {ROUNDS}; "
              f"{min(baseline):.2f}-{max(baseline):.2f})")
    print(f"  after a clean stop, from the snapshot: first write after {fast:.3f} s ({min(snapshotted):.3f}-"
          f"{max(snapshotted):.3f})" + (f" -> {full / fast:.0f}x faster" if baseline else "") +
          f"; goal <= 1 s: {'met' if fast <= 1 else 'NOT met'}")
    print(f"  (buckets, entries) read from the snapshot by the first write: {[r['loaded'] for r in runs]}; its changes "
          f"stored at the stop in {statistics.median(r['stop'] for r in runs):.2f} s (median; "
          f"{[kind for r in runs for *_, kind in r['stored']]})")
    behind = EVERY
    write_log(home, behind)
    crashed = restart(home, EVERY)
    print(f"  after a crash, the snapshot {behind:,} events behind: first write after {crashed['first_write']:.2f} s"
          f" (then the stop stores a new one: +{crashed['stop']:.2f} s); interpreter imports "
          f"{first['imports']:.2f} s apart")
    if KILLED:
        after_writes(home, KILLED, True, "after SIGKILL")
    if BULK:
        after_writes(home, BULK, False, "right after a bulk import (clean stop)")


def main() -> None:
    tune_collector_for_a_long_lived_heap()  # (as the served process does)
    os.umask(0o077)  # (a private home, as noumena makes its own)
    print(f"bench_restart: store {STORE}, sizes {SIZES}, rounds {ROUNDS}, killed after {KILLED:,}, bulk {BULK:,}, "
          f"snapshots every {EVERY:,} events, "
          f"load average {os.getloadavg()[0]:.1f}")
    kept = os.environ.get("NOUMENA_BENCH_RESTART_HOME")
    if kept:  # (logs kept there and reused by the next run: writing 1M events takes minutes)
        Path(kept).mkdir(parents=True, exist_ok=True)
        for n in SIZES:
            measure(n, Path(kept))
        return
    with tempfile.TemporaryDirectory(prefix="noumena-bench-restart-") as tmp:
        for n in SIZES:
            measure(n, Path(tmp))


if __name__ == "__main__":
    main()
