"""Benchmark: writer processes on one PostgreSQL tenant, all writing at once for a while.

A fresh PostgreSQL schema holds one tenant with 200 entities. Baseline: 1 writer process; then
NOUMENA_BENCH_WRITERS (default 8) processes at once, each for NOUMENA_BENCH_SECONDS (default 60). Every process
writes `AssertFact` batches of NOUMENA_BENCH_BATCH (default 1: one HTTP-sized write) in a tight loop until its time
is up, counting the writes acknowledged, the writes refused (a ConcurrencyError: retryable, the loop goes on) and
each write's latency. The goal: 0 refused writes and every process finished; the log then holds exactly the
acknowledged writes. Printed: acknowledged writes per second against the 1-writer baseline measured in the same
run, refused writes, each writer's share (the fewest and the most acknowledged: a starved writer shows there) and
the p50 / p99 / max latency of a write.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from domain import commands as c  # noqa: E402
from domain.facts import FactAsserted  # noqa: E402
from infra.bootstrap import bootstrap  # noqa: E402

WRITERS = int(os.environ.get("NOUMENA_BENCH_WRITERS", "8"))
SECONDS = float(os.environ.get("NOUMENA_BENCH_SECONDS", "60"))
BATCH = int(os.environ.get("NOUMENA_BENCH_BATCH", "1"))
TENANT = "bench"
ENTITIES = 200

WRITER = """
import json, sys, time
from pathlib import Path
from domain import commands as c
from domain.errors import ConcurrencyError
from infra.bootstrap import bootstrap
from infra.settings import Settings
home, schema, name, seconds, batch, entities = sys.argv[1:7]
app = bootstrap(Settings(home=Path(home), event_store="postgres", pg_schema=schema,
                         kek_file=Path(home) / "shared.kek"))
print("ready", flush=True)
sys.stdin.readline()  # (all start together)
end = time.monotonic() + float(seconds)
acknowledged = refused = n = 0
latencies = []
while time.monotonic() < end:
    commands = [c.AssertFact(tenant="bench", subject=f"person:p{(n + i) % int(entities)}", relation=f"{name}_{n}_{i}",
                             object=f"thing:t{(n * 7 + i) % int(entities)}", reason=f"{name} wrote {n}")
                for i in range(int(batch))]
    began = time.perf_counter()
    try:
        app.service.execute_batch(commands, all_or_nothing=True)
        acknowledged += 1
    except ConcurrencyError:
        refused += 1
    latencies.append(time.perf_counter() - began)
    n += 1
app.close()
print(json.dumps({"acknowledged": acknowledged, "refused": refused, "latencies": latencies}), flush=True)
"""


def _run(home: Path, schema: str, writers: int, label: str) -> dict[str, object]:
    processes = [subprocess.Popen([sys.executable, "-c", WRITER, str(home), schema, f"{label}{i}", str(SECONDS),
                                   str(BATCH), str(ENTITIES)], cwd=ROOT, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True) for i in range(writers)]
    for process in processes:
        assert process.stdout is not None and process.stdout.readline().strip() == "ready"
    for process in processes:
        assert process.stdin is not None
        process.stdin.write("go\n")
        process.stdin.flush()
    results, failed = [], 0
    for process in processes:
        out, _ = process.communicate()
        if process.returncode != 0:
            failed += 1
            continue
        results.append(json.loads(out.strip().splitlines()[-1]))
    latencies = sorted(x for r in results for x in r["latencies"])
    acknowledged = [int(r["acknowledged"]) for r in results]
    return {"writers": writers, "failed_processes": failed, "acknowledged": sum(acknowledged),
            "refused": sum(int(r["refused"]) for r in results), "per_second": sum(acknowledged) / SECONDS,
            "fewest": min(acknowledged, default=0), "most": max(acknowledged, default=0),
            "p50_ms": 1000 * statistics.median(latencies) if latencies else 0.0,
            "p99_ms": 1000 * latencies[int(0.99 * (len(latencies) - 1))] if latencies else 0.0,
            "max_ms": 1000 * latencies[-1] if latencies else 0.0}


def main() -> None:
    from tests.conftest import postgres_settings

    home = Path(tempfile.mkdtemp(prefix="bench-writers-"))
    settings = postgres_settings(home).model_copy(update={"kek_file": home / "shared.kek"})
    app = bootstrap(settings)
    app.service.execute(c.CreateTenant(tenant=TENANT))
    app.service.execute_batch([c.RegisterEntity(tenant=TENANT, ref=ref, label=ref) for i in range(ENTITIES)
                               for ref in (f"person:p{i}", f"thing:t{i}")], all_or_nothing=True)
    facts_before = 0
    rows = []
    for writers, label in ((1, "one"), (WRITERS, "many")):
        row = _run(home, settings.pg_schema, writers, label)
        facts = sum(isinstance(x.event, FactAsserted) for x in app.log.read(0, 10_000_000))
        row["logged_as_acknowledged"] = facts - facts_before == row["acknowledged"] * BATCH
        facts_before = facts
        rows.append(row)
    app.close()
    print(f"{WRITERS} writer processes x {SECONDS:g} s on one PostgreSQL tenant, batches of {BATCH}; "
          f"load {os.getloadavg()[0]:.1f}")
    for row in rows:
        print(f"  {row['writers']} writer(s): {row['per_second']:.0f} writes/s, refused {row['refused']}, "
              f"processes failed {row['failed_processes']}, per writer {row['fewest']}-{row['most']}, "
              f"latency p50 {row['p50_ms']:.1f} ms p99 {row['p99_ms']:.1f} ms max {row['max_ms']:.0f} ms, "
              f"log equals the acknowledged writes: {row['logged_as_acknowledged']}")
    base, many = rows
    print(f"throughput {WRITERS} writers / 1 writer (baseline): "
          f"{float(many['per_second']) / max(float(base['per_second']), 1e-9):.2f}x")


if __name__ == "__main__":
    main()
