"""Search over HTTP from a real `noumena serve` at a fixed arrival rate, against the same searches in process.

1. Build: one SQLite home, a tenant with PERSONS persons, AGENTS agents, a thing per ten facts, SESSIONS sessions
   (each of an agent serving a person), then NOUMENA_BENCH_HTTP_FACTS facts (default 1,000,000; a person's relation
   to a thing, with a reason of six words) and as many turns (NOUMENA_BENCH_HTTP_TURNS: messages of twelve words
   spread over the sessions), the words drawn as tests/benchmarks/bench_search.py draws them (Zipf over 20k
   words). Everything goes through the application's ingestor in batches: the path of `POST /v1/events`.
2. In process, in that home before it is served: the reading service's `search_for` (what the route calls;
   k = 10, three words of the same law, each viewpoint a session's agent serving its person, so its turns are
   searched too) one after another: p50/p95. A current search records its use (mode `looked_up`), as the route's does.
3. `noumena serve` on that home, started as an operator would (its environment: NOUMENA_HOME, an admin key, no
   Kafka); once `/readyz` says ready (caught up, indexes loaded and embedded), POST /v1/search for the same
   viewpoints at NOUMENA_BENCH_HTTP_RATE requests/s (default 200) for NOUMENA_BENCH_HTTP_SECONDS (default 20), open
   loop from this process over NOUMENA_BENCH_HTTP_CONNECTIONS keep-alive connections (bench_api.py's load: latency
   from each request's scheduled time, so a stall is not hidden by requests never sent).

Printed: build and ready times, both distributions, the achieved rate and statuses, the ratio HTTP p95 / in-process
p95, the CPU time per search in process and in the server (its CPU time during the load over the requests: what
one serving process could sustain, whatever else the machine runs), and the goal (p95 <= 20 ms at 200
requests/s), with the load average beside them.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
sys.path.insert(0, str(HERE))

FACTS = int(os.environ.get("NOUMENA_BENCH_HTTP_FACTS", "1000000"))
TURNS = int(os.environ.get("NOUMENA_BENCH_HTTP_TURNS", str(FACTS)))
RATE = float(os.environ.get("NOUMENA_BENCH_HTTP_RATE", "200"))
SECONDS = float(os.environ.get("NOUMENA_BENCH_HTTP_SECONDS", "20"))
CONNECTIONS = int(os.environ.get("NOUMENA_BENCH_HTTP_CONNECTIONS", "16"))
VIEWPOINTS = 300
PERSONS, AGENTS, SESSIONS = 1_000, 20, 1_000
BATCH = 2_000
TENANT = "bench"
ADMIN_KEY = "bench-admin-key-" + "0123456789abcdef" * 2
RELATIONS = ("prefers", "asked_about", "owns", "works_with", "complained_about")
SAID_AT = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def envelopes() -> Any:
    """The organization as wire envelopes, in batches (entities and sessions first, then facts and turns mixed)."""
    import numpy as np
    from bench_search import words

    rng = np.random.default_rng(11)
    things = max(10, FACTS // 10)
    out: list[dict[str, Any]] = []
    count = 0

    def add(kind: str, payload: dict[str, Any], occurred: datetime | None = None) -> None:
        nonlocal count
        record = {"event_id": f"b{count}", "tenant": TENANT, "type": kind, "payload": payload}
        if occurred is not None:
            record["occurred_at"] = occurred.isoformat()
        out.append(record)
        count += 1

    for a in range(AGENTS):
        add("entity.registered", {"ref": f"agent:a{a}", "label": f"agent {a}"})
    for p in range(PERSONS):
        add("entity.registered", {"ref": f"person:p{p}", "label": f"person {p}"})
    for t in range(things):
        add("entity.registered", {"ref": f"thing:t{t}", "label": f"thing {t}"})
    for s in range(SESSIONS):
        add("session.started", {"session_id": f"s{s}", "agent": f"agent:a{s % AGENTS}", "serving": f"person:p{s}"})
    yield out
    out = []
    reasons = iter(words(rng, FACTS, 6))
    said = iter(words(rng, TURNS, 12))
    subjects = rng.integers(0, PERSONS, FACTS)
    objects = rng.integers(0, things, FACTS)
    person_scoped = rng.random(FACTS) < 0.5
    for k in range(max(FACTS, TURNS)):
        when = SAID_AT + timedelta(minutes=k % 50_000)
        if k < FACTS:
            subject = int(subjects[k])
            add("fact.asserted", {
                "subject": f"person:p{subject}", "relation": RELATIONS[k % len(RELATIONS)],
                "object": f"thing:t{int(objects[k])}", "reason": next(reasons),
                "scope": f"person:p{subject}" if person_scoped[k] else "org",
                "source": {"session_id": f"s{subject % SESSIONS}", "actor": "bench"}}, when)
        if k < TURNS:
            add("message.appended", {"session_id": f"s{k % SESSIONS}", "message_id": f"m{k}", "role": "user",
                                     "content": next(said)}, when)
        if len(out) >= BATCH:
            yield out
            out = []
    if out:
        yield out


def views() -> list[dict[str, Any]]:
    import numpy as np
    from bench_search import words

    rng = np.random.default_rng(5)
    sessions = rng.integers(0, SESSIONS, VIEWPOINTS)
    return [{"agent": f"agent:a{int(s) % AGENTS}", "serving": f"person:p{int(s)}", "query": q}
            for s, q in zip(sessions, words(rng, VIEWPOINTS, 3), strict=True)]


def build(home: Path) -> dict[str, Any]:
    """Ingest the organization into `home`, measure searches in process, issue an API key."""
    from infra.adapters.api_keys import ApiKeyStore
    from infra.bootstrap import bootstrap
    from infra.settings import Settings

    settings = Settings(home=home, event_store="sqlite", admin_key=ADMIN_KEY, kafka_bootstrap="",
                        environment="production")
    noumena = bootstrap(settings)
    try:
        from domain.commands import CreateTenant

        noumena.service.execute(CreateTenant(tenant=TENANT))
        started = time.perf_counter()
        for batch in envelopes():
            result = noumena.application.ingestor.ingest(batch)
            if result.rejected:
                raise SystemExit(f"rejected: {result.rejected[0]}")
        ingested = time.perf_counter() - started
        asked = views()
        started = time.perf_counter()
        reading = noumena.application.reading
        reading.search_for(TENANT, asked[0]["agent"], asked[0]["query"], serving=asked[0]["serving"])
        indexed = time.perf_counter() - started
        for view in asked[:30]:  # warm up
            reading.search_for(TENANT, view["agent"], view["query"], serving=view["serving"])
        in_process, cpu = [], time.process_time()
        for view in asked:
            t0 = time.perf_counter()
            reading.search_for(TENANT, view["agent"], view["query"], serving=view["serving"])
            in_process.append((time.perf_counter() - t0) * 1000)
        cpu_ms = (time.process_time() - cpu) * 1000 / len(asked)
        key = ApiKeyStore(settings.api_keys_path()).create(TENANT, "bench").key
    finally:
        noumena.close()
    return {"key": key, "views": asked, "in_process_ms": in_process, "ingest_seconds": ingested,
            "index_seconds": indexed, "cpu_ms": cpu_ms}


def cpu_seconds(pid: int) -> float:
    """The CPU time (user + system) a process has used so far (Linux: /proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def serve(home: Path, port: int) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NOUMENA_") or k.startswith("NOUMENA_BENCH")}
    env |= {"NOUMENA_HOME": str(home), "NOUMENA_EVENT_STORE": "sqlite", "NOUMENA_ADMIN_KEY": ADMIN_KEY,
            "NOUMENA_ENVIRONMENT": "production", "NOUMENA_KAFKA_BOOTSTRAP": ""}
    if "NOUMENA_EMBEDDER" in os.environ:
        env["NOUMENA_EMBEDDER"] = os.environ["NOUMENA_EMBEDDER"]
    noumena = Path(sys.executable).with_name("noumena")
    return subprocess.Popen([str(noumena), "serve", "--host", "127.0.0.1", "--port", str(port)], env=env,
                            start_new_session=True)


def ready(url: str, server: subprocess.Popen[bytes], timeout: float = 3_600) -> float:
    import httpx

    started = time.monotonic()
    while True:
        if server.poll() is not None:
            raise SystemExit(f"noumena serve exited with {server.returncode}")
        try:
            if httpx.get(url + "/readyz", timeout=2).status_code == 200:
                return time.monotonic() - started
        except httpx.HTTPError:
            pass
        if time.monotonic() - started > timeout:
            raise SystemExit("noumena serve did not get ready")
        time.sleep(0.5)


def main() -> None:
    import bench_api
    import httpx
    from bench_api import _load, search_request

    from tests.api_support import free_port

    print(f"search over HTTP: {FACTS:,} facts and {TURNS:,} turns; {RATE:g} requests/s for {SECONDS:g} s over"
          f" {CONNECTIONS} connections; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    home = Path(tempfile.mkdtemp(prefix="noumena-bench-search-http-"))
    server = None
    try:
        setup = build(home)
        print(f"  ingested in {setup['ingest_seconds']:.0f} s; first search (indexes, embeds)"
              f" {setup['index_seconds']:.1f} s")
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        server = serve(home, port)
        print(f"  noumena serve ready after {ready(url, server):.0f} s")
        headers = {"Authorization": f"Bearer {setup['key']}"}
        for view in setup["views"][:30]:  # warm up the route
            response = httpx.post(url + "/v1/search", json={**view, "k": 10}, headers=headers, timeout=30)
            response.raise_for_status()
        bench_api.CONNECTIONS = CONNECTIONS  # (its load opens that many connections)
        requests = [search_request(view) for view in setup["views"]]
        served_cpu = cpu_seconds(server.pid)
        result = asyncio.run(_load(url, setup["key"], requests, RATE, SECONDS))
        served_cpu = cpu_seconds(server.pid) - served_cpu
        local_ms, http_ms = setup["in_process_ms"], result["latencies_ms"]
        print(f"  in process (reading.search_for):     p50 {pct(local_ms, 50):6.2f} ms   p95"
              f" {pct(local_ms, 95):6.2f} ms   mean {statistics.fmean(local_ms):.2f} ms ({len(local_ms)} searches,"
              " one at a time)")
        print(f"  HTTP at {RATE:g} req/s:                p50 {pct(http_ms, 50):6.2f} ms   p95"
              f" {pct(http_ms, 95):6.2f} ms   p99 {pct(http_ms, 99):6.2f} ms   max {max(http_ms):.1f} ms")
        print(f"  achieved {result['achieved_rate']:.0f} req/s; statuses {result['statuses']}")
        served = sum(result["statuses"].values())
        print(f"  CPU per search: in process {setup['cpu_ms']:.2f} ms, served {served_cpu * 1000 / served:.2f} ms"
              f" (the server's CPU time under the load / requests: at most {served / served_cpu:.0f} req/s on one"
              " core, whatever else runs on the machine)")
        print(f"  ratio HTTP p95 / in-process p95: {pct(http_ms, 95) / pct(local_ms, 95):.2f}x")
        met = pct(http_ms, 95) <= 20 and result["achieved_rate"] >= 0.95 * RATE and set(result["statuses"]) == {200}
        print(f"  goal p95 <= 20 ms at 200 req/s{'' if RATE == 200 else f' (run at {RATE:g})'}:"
              f" {'met' if met else 'NOT met'}; load average {os.getloadavg()[0]:.1f}")
    finally:
        if server is not None:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=60)
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    from api.process_tuning import one_thread_per_numeric_call, tune_collector_for_a_long_lived_heap

    one_thread_per_numeric_call()  # in process as `noumena serve` runs (before numpy is imported)
    tune_collector_for_a_long_lived_heap()
    main()
