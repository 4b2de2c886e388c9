"""Benchmark: how much the store grows with reads alone ("reads do not grow the store without bound"),
and how much coalescing the recalls changes what agents see.

Growth. A small organization (NOUMENA_BENCH_GROWTH_AGENTS agents, each serving five persons with four facts each)
on a SQLite home; NOUMENA_BENCH_GROWTH_SERVED (default 1000) perspectives are served through the application the
HTTP route calls, cycling over the viewpoints, then the process closes (a clean shutdown flushes the held uses).
Twice in the same run: the baseline (NOUMENA_RECALL_FLUSH_SECONDS=0, one `facts.recalled` per read, and
NOUMENA_EVIDENCE=full, every answer kept whole) and the defaults (uses coalesced, perspectives kept as their
request). Printed per 1,000 served perspectives: log events appended, bytes of stored events (state and topic)
appended, bytes of evidence rows kept (live pages of evidence.sqlite). Goal: <= 1 event and <= 100 KB.

Rankings. Coalescing keeps one use per agent, fact and hour, so a fact shown many times in an hour gets a lower
base level than before. On a simulated week (the same organization, NOUMENA_BENCH_GROWTH_RANKED reads at random
moments, viewpoints drawn with Zipf-like weights so some are read every few minutes and some a few times a
day) served twice, uncoalesced and coalesced, with the same moments: for every viewpoint at the end, the overlap
of the top k (full and gist, k = 11) and Kendall's tau over the facts both rankings show.
"""

from __future__ import annotations

import os
import random
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

from api.process_tuning import tune_collector_for_a_long_lived_heap  # noqa: E402

AGENTS = int(os.environ.get("NOUMENA_BENCH_GROWTH_AGENTS", "10"))
PERSONS = 5
FACTS = 20
SERVED = int(os.environ.get("NOUMENA_BENCH_GROWTH_SERVED", "1000"))
RANKED = int(os.environ.get("NOUMENA_BENCH_GROWTH_RANKED", "3000"))
TENANT = "growth"
TOP = 11


def _stored_bytes(database: Path) -> int:
    """Bytes of every stored event's state and topic (the file itself grows by pages, and its WAL is reused)."""
    import sqlite3

    with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as con:
        tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return sum(con.execute(f'SELECT coalesce(sum(length(state) + length(topic)), 0) FROM "{t}"').fetchone()[0]
                   for t in tables if "event" in t)


def _stored_events(database: Path) -> int:
    import sqlite3

    with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as con:
        return int(con.execute("SELECT count(*) FROM stored_events").fetchone()[0])


def _evidence_bytes(home: Path) -> int:
    from infra.adapters.evidence import EvidenceStore

    store = EvidenceStore(home / "evidence.sqlite")
    try:
        return store.live_bytes() if store.path.exists() else 0
    finally:
        store.close()


def _organization(memory: Any) -> list[tuple[str, str]]:
    memory.tenants.create_tenant(TENANT)
    views = []
    for a in range(AGENTS):
        agent = f"agent:a{a}"
        memory.facts.register_entity(TENANT, agent, f"Agent {a}")
        for p in range(PERSONS):
            person = f"person:a{a}-p{p}"
            memory.facts.register_entity(TENANT, person, f"Person {a}/{p}")
            memory.facts.assert_fact(TENANT, subject=agent, relation="serves", object=person)
            for f in range(FACTS // PERSONS):
                thing = f"memory:a{a}-p{p}-m{f}"
                memory.facts.register_entity(TENANT, thing, f"a memory of {a}/{p} number {f}")
                memory.facts.assert_fact(TENANT, subject=person, relation="prefers", object=thing,
                                         reason=f"said so on call {f}", scope=person)
            views.append((agent, person))
    return views


def _environment(flush: str, evidence: str) -> dict[str, str | None]:
    saved = {k: os.environ.get(k) for k in ("NOUMENA_RECALL_FLUSH_SECONDS", "NOUMENA_EVIDENCE")}
    os.environ["NOUMENA_RECALL_FLUSH_SECONDS"], os.environ["NOUMENA_EVIDENCE"] = flush, evidence
    return saved


def _restore(saved: dict[str, str | None]) -> None:
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def growth(flush: str, evidence: str) -> dict[str, float]:
    """Serve SERVED perspectives on a fresh home; what the log and the evidence grew by, per 1,000."""
    from infra.bootstrap import bootstrap
    from infra.settings import Settings

    saved = _environment(flush, evidence)
    home = Path(tempfile.mkdtemp(prefix="noumena-growth-"))
    try:
        noumena = bootstrap(Settings(home=home, event_store="sqlite", embedder="none"))
        try:
            memory = noumena.application
            views = _organization(memory)
            events_before = _stored_events(home / "events.sqlite")
            log_before = _stored_bytes(home / "events.sqlite")
            started = time.perf_counter()
            for i in range(SERVED):
                agent, person = views[i % len(views)]
                memory.reading.perspective(TENANT, agent, person)
            elapsed = time.perf_counter() - started
        finally:
            noumena.close()  # a clean shutdown: the held uses are written
        events = _stored_events(home / "events.sqlite") - events_before
        per = 1000 / SERVED
        return {"events": events * per, "log_kib": (_stored_bytes(home / "events.sqlite") - log_before) * per / 1024,
                "evidence_kib": _evidence_bytes(home) * per / 1024, "ms": elapsed * 1000 / SERVED,
                "views": len(views)}
    finally:
        _restore(saved)


class _Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def _served_week(flush: str, moments: list[tuple[datetime, int]]) -> dict[tuple[str, str], list[str]]:
    """Serve the reads at their moments (uncoalesced, or coalesced with a flush at least every minute of the
    simulated time); each viewpoint's ranked facts at the end."""
    from infra.bootstrap import bootstrap
    from infra.settings import Settings

    saved = _environment(flush, "reproducible")
    home = Path(tempfile.mkdtemp(prefix="noumena-ranks-"))
    clock = _Clock(moments[0][0] - timedelta(days=1))
    try:
        noumena = bootstrap(Settings(home=home, event_store="sqlite", embedder="none"), clock=clock)
        try:
            memory = noumena.application
            views = _organization(memory)
            flushed = clock.now
            for moment, view in moments:
                if flush != "0" and (moment - flushed).total_seconds() >= float(flush):
                    clock.now = flushed = moment
                    memory.reading.flush_recalls()  # the buffer's timer, on the simulated clock
                clock.now = moment
                agent, person = views[view]
                memory.reading.perspective(TENANT, agent, person)
            memory.reading.flush_recalls()
            clock.now = moments[-1][0] + timedelta(minutes=5)
            ranked = {}
            for agent, person in views:
                served = memory.reading.perspective(TENANT, agent, person)
                ranked[(agent, person)] = [i.fact_id for i in served.items]
            return ranked
        finally:
            noumena.close()
    finally:
        _restore(saved)


def _kendall_tau(a: list[str], b: list[str]) -> float:
    """Kendall's tau-a over the items both rankings hold (1: the same order)."""
    common = [x for x in a if x in set(b)]
    where = {x: i for i, x in enumerate(b)}
    n = len(common)
    if n < 2:
        return 1.0
    concordant = discordant = 0
    for i in range(n):
        for j in range(i + 1, n):
            if where[common[i]] < where[common[j]]:
                concordant += 1
            else:
                discordant += 1
    return (concordant - discordant) / (n * (n - 1) / 2)


def rankings() -> dict[str, float]:
    rng = random.Random(19)
    views = AGENTS * PERSONS
    weights = [1 / (k + 1) for k in range(views)]  # Zipf-like: the first viewpoint is read ~50x the last
    start = datetime(2026, 11, 2, 8, tzinfo=UTC)
    week = 7 * 86_400
    moments = sorted((start + timedelta(seconds=rng.uniform(0, week)), rng.choices(range(views), weights)[0])
                     for _ in range(RANKED))
    plain = _served_week("0", moments)
    coalesced = _served_week("60", moments)
    overlaps, taus = [], []
    for key, ranked in plain.items():
        other = coalesced[key]
        overlaps.append(len(set(ranked[:TOP]) & set(other[:TOP])) / max(1, min(TOP, len(ranked))))
        taus.append(_kendall_tau(ranked, other))
    return {"overlap_mean": sum(overlaps) / len(overlaps), "overlap_min": min(overlaps),
            "tau_mean": sum(taus) / len(taus), "tau_min": min(taus), "views": len(plain), "reads": len(moments)}


def main() -> None:
    tune_collector_for_a_long_lived_heap()  # (as the served process does)
    before = growth("0", "full")
    after = growth("60", "reproducible")
    print(f"served {SERVED} perspectives over {after['views']:.0f} viewpoints on SQLite, per 1,000 served:")
    for name, row in (("baseline (a recall event per read, whole answers kept)", before),
                      ("coalesced uses, perspectives kept as their request", after)):
        print(f"  {name}: {row['events']:.0f} log events, log +{row['log_kib']:.1f} KiB, evidence"
              f" +{row['evidence_kib']:.1f} KiB ({row['ms']:.2f} ms per perspective)")
    total = after["log_kib"] + after["evidence_kib"]
    print(f"  after/before: events {after['events'] / max(before['events'], 1):.4f}, bytes"
          f" {total / max(before['log_kib'] + before['evidence_kib'], 1e-9):.4f}"
          f" (goal: <= 1 event and <= 100 KB per 1,000: {after['events']:.0f} events, {total:.1f} KiB)")
    ranks = rankings()
    print(f"rankings after a simulated week of {ranks['reads']:.0f} reads over {ranks['views']:.0f} viewpoints,"
          f" coalesced vs one use per read: top-{TOP} overlap mean {ranks['overlap_mean']:.3f}"
          f" (min {ranks['overlap_min']:.3f}), Kendall tau mean {ranks['tau_mean']:.3f} (min {ranks['tau_min']:.3f})")


if __name__ == "__main__":
    main()
