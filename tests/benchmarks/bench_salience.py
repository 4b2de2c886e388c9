"""Benchmark: views of an organization's imported year of history, never read, by the tiers' salience against the
calendar model (the baseline, same run, same index).

A generated organization (NOUMENA_BENCH_SALIENCE_ENTITIES, default 800; NOUMENA_BENCH_SALIENCE_FACTS, default
6000; 80% org-scoped) whose history spans the 12 months before now, imported through the wire format into a fresh
home. For every agent x person view with at least 11 reachable facts (reached with a spread that would put them
above tau with one fresh use): how many show a full budget (4 full, 7 gist), the median full / gist / marker
counts, and the walk's p50/p95 under both models; then the same views from the index a restart loads from the read
model (DuckDB), which must equal the fold.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from domain.activation import DEFAULT_PARAMETERS  # noqa: E402
from projections.perspective_index import Viewpoint  # noqa: E402
from tests.salience_support import check_views, dated_org  # noqa: E402

ENTITIES = int(os.environ.get("NOUMENA_BENCH_SALIENCE_ENTITIES", "800"))
FACTS = int(os.environ.get("NOUMENA_BENCH_SALIENCE_FACTS", "6000"))


def _walk_ms(index, agents, persons, now, p) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    times = []
    for agent in agents:
        for person in persons[:20]:
            t0 = time.perf_counter()
            index.walk(Viewpoint(agent, serving=person), p, now)
            times.append((time.perf_counter() - t0) * 1000)
    times.sort()
    return statistics.median(times), times[int(0.95 * (len(times) - 1))]


def main() -> int:
    from domain.commands import CreateTenant
    from infra.bootstrap import bootstrap
    from infra.settings import Settings
    from projections.perspective_load import from_duckdb
    from projections.perspectives import Perspectives
    from projections.projector import Projector

    now_dt = datetime.now(UTC)
    org = dated_org(now_dt, entities=ENTITIES, facts=FACTS)
    calendar = DEFAULT_PARAMETERS.model_copy(update={"salience": "calendar"})
    with tempfile.TemporaryDirectory(prefix="noumena-salience-") as home_dir:
        home = Path(home_dir)
        noumena = bootstrap(Settings(home=home / "home", encrypt_content=False))
        try:
            noumena.service.execute(CreateTenant(tenant=org.tenant))
            started = time.perf_counter()
            for at in range(0, len(org.envelopes), 500):
                result = noumena.application.ingestor.ingest(org.envelopes[at: at + 500])
                if result.rejected:
                    print(f"rejected: {result.rejected[0]}", file=sys.stderr)
                    return 1
            print(f"imported {len(org.envelopes)} envelopes ({len(org.agents)} agents, {len(org.persons)} persons)"
                  f" in {time.perf_counter() - started:.1f} s")
            index = Perspectives(noumena.log, lambda: datetime.now(UTC)).index(org.tenant)
            now = datetime.now(UTC).timestamp()
            rows = []
            for name, p in (("tiers", DEFAULT_PARAMETERS), ("calendar (baseline)", calendar)):
                check = check_views(index, org.agents, org.persons, now, p)
                p50, p95 = _walk_ms(index, org.agents, org.persons, now, p)
                rows.append((name, check, p50, p95))
            with Projector(noumena.log, home / "read.duckdb") as projector:
                projector.catch_up()
                loaded = from_duckdb(projector.con, org.tenant)  # type: ignore[attr-defined]
            restarted = check_views(loaded, org.agents, org.persons, now)
        finally:
            noumena.close()
    print("\n| model | views (>= 11 reachable) | with 4 full + 7 gist | full / gist / marker (median) |"
          " walk p50 / p95 ms |")
    print("| --- | --- | --- | --- | --- |")
    for name, check, p50, p95 in rows:
        print(f"| {name} | {check.views} | {check.views - len(check.short)} | {check.full_median:.0f} / "
              f"{check.gist_median:.0f} / {check.marker_median:.0f} | {p50:.2f} / {p95:.2f} |")
    tiers = rows[0][1]
    print(f"\nafter a restart (index loaded from the read model): {restarted.views - len(restarted.short)} of "
          f"{restarted.views} views full; equal to the fold: {restarted == tiers}")
    print(f"walk p95, tiers / calendar: {rows[0][3] / rows[1][3]:.2f}x")
    return 0 if not tiers.short and restarted == tiers else 1


if __name__ == "__main__":
    sys.exit(main())
