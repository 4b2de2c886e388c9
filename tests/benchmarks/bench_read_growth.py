"""Benchmark: how much the store grows with reads alone (issue 19, "reads do not grow the store without bound").

A small organization (NOUMENA_BENCH_GROWTH_AGENTS agents, each serving a few persons with a few dozen facts) on
a SQLite home; then NOUMENA_BENCH_GROWTH_SERVED (default 1000) perspectives are served through the application
the HTTP route calls, cycling over the viewpoints. Printed per 1,000 served perspectives: log events appended,
bytes of stored events (state and topic) appended, and bytes of evidence files written. The goal in the
issue is <= 1 event and <= 100 KB per 1,000; this prints where the code stands, to compare a change against.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

AGENTS = int(os.environ.get("NOUMENA_BENCH_GROWTH_AGENTS", "10"))
PERSONS = 5
FACTS = 20
SERVED = int(os.environ.get("NOUMENA_BENCH_GROWTH_SERVED", "1000"))
TENANT = "growth"


def _bytes(paths: list[Path]) -> int:
    return sum(p.stat().st_size for p in paths if p.exists())


def _stored_bytes(database: Path) -> int:
    """Bytes of every stored event's state and topic (the file itself grows by pages, and its WAL is reused)."""
    import sqlite3

    with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as con:
        tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return sum(con.execute(f'SELECT coalesce(sum(length(state) + length(topic)), 0) FROM "{t}"').fetchone()[0]
                   for t in tables if "event" in t)


def main() -> None:
    from infra.bootstrap import bootstrap
    from infra.settings import Settings

    home = Path(tempfile.mkdtemp(prefix="noumena-growth-"))
    noumena = bootstrap(Settings(home=home, event_store="sqlite", embedder="none"))
    try:
        memory = noumena.application
        memory.create_tenant(TENANT)
        views = []
        for a in range(AGENTS):
            agent = f"agent:a{a}"
            memory.register_entity(TENANT, agent, f"Agent {a}")
            for p in range(PERSONS):
                person = f"person:a{a}-p{p}"
                memory.register_entity(TENANT, person, f"Person {a}/{p}")
                memory.assert_fact(TENANT, subject=agent, relation="serves", object=person)
                for f in range(FACTS // PERSONS):
                    thing = f"memory:a{a}-p{p}-m{f}"
                    memory.register_entity(TENANT, thing, f"a memory of {a}/{p} number {f}")
                    memory.assert_fact(TENANT, subject=person, relation="prefers", object=thing,
                                       reason=f"said so on call {f}", scope=person)
                views.append((agent, person))
        evidence = home / "perspectives"
        events_before = noumena.log.max_position()
        log_before = _stored_bytes(home / "events.sqlite")
        evidence_before = _bytes(list(evidence.rglob("*"))) if evidence.exists() else 0
        started = time.perf_counter()
        for i in range(SERVED):
            agent, person = views[i % len(views)]
            memory.perspective(TENANT, agent, person)
        elapsed = time.perf_counter() - started
        events = noumena.log.max_position() - events_before
        log_grown = _stored_bytes(home / "events.sqlite") - log_before
        evidence_files = list(evidence.rglob("*.json")) if evidence.exists() else []
        evidence_grown = _bytes(list(evidence.rglob("*"))) - evidence_before
    finally:
        noumena.close()
    per = 1000 / SERVED
    print(f"served {SERVED} perspectives over {len(views)} viewpoints in {elapsed:.1f} s")
    print(f"per 1,000 served: {events * per:.0f} log events, log +{log_grown * per / 1024:.0f} KiB,"
          f" evidence +{evidence_grown * per / 1024:.0f} KiB in {len(evidence_files)} files"
          f" (goal: <= 1 event, <= 100 KB)")


if __name__ == "__main__":
    main()
