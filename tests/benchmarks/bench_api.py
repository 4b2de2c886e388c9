"""Benchmark: a perspective over HTTP under concurrent load, against the same call in process, in one run.

1. A server process (`bench_api.py --serve`) builds the generated organization of tests/benchmarks/
   bench_perspective.py (NOUMENA_BENCH_ENTITIES, default 100000; NOUMENA_BENCH_FACTS, default 1000000) into the
   perspective index, and serves `create_app` with uvicorn on a free port: the real routes, auth, problems and
   metrics middleware. The index is built from frames rather than by ingesting a million events, so this engine
   records no recall and keeps no evidence (`record=False`) in both measurements: the numbers are the serving
   path, not the event-log append a served perspective also makes (bench_event_log.py measures that).
2. Baseline: in that process, before it serves, `Application.perspective` (what the route calls) for the
   same viewpoints, one after another: p50/p95.
3. Load: a second process (`bench_api.py --load`) sends GET /v1/perspectives at a constant arrival rate
   (NOUMENA_BENCH_API_RATE, default 200 requests/s, open loop, for NOUMENA_BENCH_API_SECONDS, default 20 s,
   over NOUMENA_BENCH_API_CONNECTIONS keep-alive connections), cycling through the viewpoints. Latency counts
   from each request's scheduled time, so a stall is not hidden by requests that were never sent
   (coordinated omission). Goal: p95 <= 20 ms at 200 requests/s.
4. The same for search: in process `Application.search_for` (k = 10, two to four words of the facts' reasons, drawn
   as tests/benchmarks/bench_search.py draws them), then POST /v1/search at the same rate. Goal: p95 <= 20 ms at
   200 requests/s. The first search indexes and embeds the million facts (minutes); NOUMENA_BENCH_API_SEARCH=0
   leaves search out. Search is loaded again at each rate of NOUMENA_BENCH_API_SEARCH_RATES (default 100): what
   one serving process sustains below the goal's rate.
5. When `wrk` is installed: its closed-loop saturation throughput on the perspective route, for information.

NOUMENA_BENCH_API_REPLICAS (default 1): how many serving processes share the port (SO_REUSEPORT: the kernel spreads
the connections), as replicas of one deployment would behind a balancer; each builds the same organization (the
first measures in process before the others start, the others only warm up). One Python process serves one
request at a time, so the rate one process sustains is about 1 / its mean service time.

Printed: the distributions and the ratio HTTP p95 / in-process p95 of each.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
sys.path.insert(0, str(HERE))

RATE = float(os.environ.get("NOUMENA_BENCH_API_RATE", "200"))
SECONDS = float(os.environ.get("NOUMENA_BENCH_API_SECONDS", "20"))
CONNECTIONS = int(os.environ.get("NOUMENA_BENCH_API_CONNECTIONS", "16"))
VIEWPOINTS = int(os.environ.get("NOUMENA_BENCH_API_VIEWPOINTS", "300"))
SEARCH = os.environ.get("NOUMENA_BENCH_API_SEARCH", "1") != "0"
REPLICAS = int(os.environ.get("NOUMENA_BENCH_API_REPLICAS", "1"))
SEARCH_RATES = [float(r) for r in os.environ.get("NOUMENA_BENCH_API_SEARCH_RATES", "100").split(",") if r.strip()]
TENANT = "bench"


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def query(view: dict[str, Any]) -> str:
    params: list[tuple[str, str]] = [("agent", view["agent"])]
    if view["serving"]:
        params.append(("serving", view["serving"]))
    params += [("focus", ref) for ref in view["focus"]]
    return "/v1/perspectives?" + urlencode(params)


Request = tuple[bytes, bytes]
"""The request line with any headers of its own, and the body."""


def perspective_request(view: dict[str, Any]) -> Request:
    return b"GET " + query(view).encode() + b" HTTP/1.1\r\n", b""


def search_request(view: dict[str, Any]) -> Request:
    body = json.dumps({"agent": view["agent"], "serving": view["serving"], "query": view["query"], "k": 10}).encode()
    return (b"POST /v1/search HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: "
            + str(len(body)).encode() + b"\r\n", body)


# ---------------------------------------------------------------------------------------------- the server


def serve(port: int, home: Path, keys_file: Path | None = None) -> None:
    """Build the organization, measure in process, then serve until terminated. With `keys_file` (another
    replica's API keys): a further replica, which only warms up, then says it is ready (`home/ready`)."""
    import socket

    import numpy as np
    import polars as pl
    import uvicorn
    from bench_perspective import NOW, generate, viewpoints
    from bench_search import words

    from api.app import create_app
    from infra.adapters.api_keys import ApiKeyStore
    from infra.bootstrap import application_reading, bootstrap
    from infra.runtime.perspective_engine import EnginePerspectives
    from infra.settings import Settings
    from projections.perspective_load import from_frames
    from projections.perspectives import Perspectives

    started = time.perf_counter()
    entities, facts, uses, persons, agents, things, sessions = generate()
    rng = np.random.default_rng(3)
    if SEARCH:  # what search finds: a reason per fact, as bench_search.py writes them
        facts = facts.with_columns(pl.Series("reason", words(rng, len(facts), 6)))
    index = from_frames(TENANT, entities, facts, sessions, None, uses)
    built = time.perf_counter() - started
    settings = Settings(home=home, event_store="sqlite", admin_key="bench-admin-key-0123456789", kafka_bootstrap="",
                        environment="production", api_keys_file=keys_file)
    noumena = bootstrap(settings)
    clock = lambda: datetime.fromtimestamp(NOW, UTC)  # noqa: E731  (the organization's "now")
    perspectives = Perspectives(noumena.log, clock)
    perspectives.start_from({TENANT: index}, 0)
    engine = EnginePerspectives(lambda: perspectives)
    key = ApiKeyStore(settings.api_keys_path()).create(TENANT, "bench").key if keys_file is None else ""

    views = [{"agent": v.agent, "serving": v.serving, "focus": list(v.focus), "query": q}
             for v, q in zip(viewpoints(persons, agents, things, VIEWPOINTS), words(rng, VIEWPOINTS, 3), strict=True)]
    memory = application_reading(noumena, None, engine)
    for view in views[:30]:  # warm up
        memory.reading.perspective(TENANT, view["agent"], view["serving"], view["focus"])
    in_process = []
    for view in views if keys_file is None else []:
        t0 = time.perf_counter()
        memory.reading.perspective(TENANT, view["agent"], view["serving"], view["focus"])
        in_process.append((time.perf_counter() - t0) * 1000)
    search_ms: list[float] = []
    search_index_seconds = 0.0
    if SEARCH:
        t0 = time.perf_counter()
        memory.reading.search_for(TENANT, views[0]["agent"], views[0]["query"])  # indexes and embeds every fact
        search_index_seconds = time.perf_counter() - t0
        for view in views[:30]:  # warm up
            memory.reading.search_for(TENANT, view["agent"], view["query"], serving=view["serving"])
        for view in views if keys_file is None else []:
            t0 = time.perf_counter()
            memory.reading.search_for(TENANT, view["agent"], view["query"], serving=view["serving"])
            search_ms.append((time.perf_counter() - t0) * 1000)
    if keys_file is None:
        (home / "setup.json").write_text(json.dumps({
            "key": key, "views": views, "in_process_ms": in_process, "build_seconds": built,
            "facts": index.fact_count, "entities": len(index.refs), "search_ms": search_ms,
            "search_index_seconds": search_index_seconds}))
    app = create_app(noumena, start_projector=False, start_kafka=False, perspective_engine=engine)
    listening = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)  # the replicas share the port
    listening.bind(("127.0.0.1", port))
    listening.listen(1024)
    if keys_file is not None:
        (home / "ready").write_text("ready")
    # keep-alive longer than uvicorn's 5 s: the load opens its connections one request at a time before it starts,
    # and under load the first may idle that long
    uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, timeout_keep_alive=120)
                   ).run(sockets=[listening])


# ---------------------------------------------------------------------------------------------- the load


class _Connection:
    """A minimal HTTP/1.1 keep-alive client on asyncio streams: a load generator must cost far less CPU than
    the server it measures (httpx costs about as much per request as the route itself)."""

    def __init__(self, host: str, port: int, key: str) -> None:
        self.host, self.port = host, port
        self.head = f"Host: {host}:{port}\r\nAuthorization: Bearer {key}\r\n\r\n".encode()
        """The headers every request carries, and the blank line that ends them."""
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def send(self, request: Request) -> int:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        self.writer.write(request[0] + self.head + request[1])
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        length = 0
        for line in head.split(b"\r\n"):
            if line[:15].lower() == b"content-length:":
                length = int(line[15:])
        await self.reader.readexactly(length)
        return status


async def _load(url: str, key: str, requests: list[Request], rate: float, seconds: float) -> dict[str, Any]:
    host, port = url.removeprefix("http://").split(":")
    connections = [_Connection(host, int(port), key) for _ in range(CONNECTIONS)]
    for connection, request in zip(connections, requests, strict=False):  # open the connections
        await connection.send(request)
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    total = int(rate * seconds)
    start = time.perf_counter() + 0.1
    issued = iter(range(total))

    async def worker(connection: _Connection) -> None:
        # A fixed pool of senders, each taking the next scheduled slot: when all are busy, requests queue, and
        # their latency still counts from the scheduled time (open loop, no coordinated omission).
        for k in issued:
            scheduled = start + k / rate
            delay = scheduled - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            status = await connection.send(requests[k % len(requests)])
            latencies.append((time.perf_counter() - scheduled) * 1000)
            statuses[status] = statuses.get(status, 0) + 1

    await asyncio.gather(*(worker(c) for c in connections))
    elapsed = time.perf_counter() - start
    return {"latencies_ms": latencies, "statuses": statuses, "achieved_rate": total / elapsed}


def load(url: str, setup: Path, out: Path, route: str, rate: float) -> None:
    data = json.loads(setup.read_text())
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    build = search_request if route == "search" else perspective_request
    result = asyncio.run(_load(url, data["key"], [build(v) for v in data["views"]], rate, SECONDS))
    out.write_text(json.dumps(result))


def wrk(url: str, key: str, paths: list[str], home: Path) -> str | None:
    """wrk's closed-loop throughput over the same viewpoints (a Lua script rotates the paths)."""
    if shutil.which("wrk") is None:
        return None
    script = home / "rotate.lua"
    quoted = ",".join('"' + p.replace('"', '\\"') + '"' for p in paths)
    script.write_text(f"local paths = {{{quoted}}}\nlocal k = 0\n"
                      f'wrk.headers["Authorization"] = "Bearer {key}"\n'
                      "request = function()\n  k = k % #paths + 1\n  return wrk.format(nil, paths[k])\nend\n")
    done = subprocess.run(["wrk", "-t1", "-c8", "-d8s", "--latency", "-s", str(script), url], capture_output=True,
                          text=True, timeout=60)
    lines = [line.strip() for line in done.stdout.splitlines()
             if line.strip().startswith(("50%", "90%", "99%", "Requests/sec"))]
    return "; ".join(" ".join(line.split()) for line in lines)


# ---------------------------------------------------------------------------------------------- the run


def report(route: str, label: str, local_ms: list[float], result: dict[str, Any], rate: float) -> None:
    http_ms = result["latencies_ms"]
    print(f"  {route} at {rate:g} requests/s:")
    print(f"    {label:<40} p50 {pct(local_ms, 50):6.2f} ms   p95 {pct(local_ms, 95):6.2f} ms"
          f"   mean {statistics.fmean(local_ms):.2f} ms   ({len(local_ms)} calls, one at a time: at most"
          f" {1000 / statistics.fmean(local_ms):.0f}/s on one core)")
    print(f"    {'HTTP under load:':<40} p50 {pct(http_ms, 50):6.2f} ms   p95 {pct(http_ms, 95):6.2f} ms"
          f"   p99 {pct(http_ms, 99):6.2f} ms   max {max(http_ms):.1f} ms")
    print(f"    achieved {result['achieved_rate']:.0f} req/s; statuses {result['statuses']};"
          f" mean {statistics.fmean(http_ms):.2f} ms")
    print(f"    ratio HTTP p95 / in-process p95: {pct(http_ms, 95) / pct(local_ms, 95):.2f}x;"
          f" HTTP overhead at p50: {pct(http_ms, 50) - pct(local_ms, 50):.2f} ms")
    met = pct(http_ms, 95) <= 20 and result["achieved_rate"] >= 0.95 * rate
    if rate == RATE:
        print(f"    goal p95 <= 20 ms at {RATE:g} req/s: {'met' if met else 'NOT met'}")
    else:
        print(f"    p95 <= 20 ms at {rate:g} req/s (below the goal's rate, for information): {'yes' if met else 'no'}")


def main() -> None:
    import httpx

    from tests.api_support import free_port

    entities = os.environ.get("NOUMENA_BENCH_ENTITIES", "100000")
    facts = os.environ.get("NOUMENA_BENCH_FACTS", "1000000")
    print(f"API benchmark: {entities} entities, {facts} facts; load {RATE:g} req/s for {SECONDS:g} s from a"
          f" second process over {CONNECTIONS} connections")
    home = Path(tempfile.mkdtemp(prefix="noumena-bench-api-"))
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("NOUMENA_") or k.startswith("NOUMENA_BENCH")}
    server = subprocess.Popen([sys.executable, __file__, "--serve", str(port), str(home)], env=env)
    servers = [server]
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 900
        while True:
            if server.poll() is not None:
                raise SystemExit(f"the server exited with {server.returncode}")
            try:
                if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit("the server did not start")
            time.sleep(0.5)
        setup = json.loads((home / "setup.json").read_text())
        for replica in range(2, REPLICAS + 1):  # started after the first measured in process, alone
            replica_home = home / f"replica-{replica}"
            replica_home.mkdir(mode=0o700)
            servers.append(subprocess.Popen([sys.executable, __file__, "--serve", str(port), str(replica_home),
                                             str(home / "api_keys.json")], env=env))
            while not (replica_home / "ready").exists():
                if servers[-1].poll() is not None:
                    raise SystemExit(f"replica {replica} exited with {servers[-1].returncode}")
                time.sleep(0.5)
        print(f"  serving processes on the port: {REPLICAS}")
        print(f"  organization: {setup['entities']} entities, {setup['facts']} facts; index built in"
              f" {setup['build_seconds']:.1f} s")
        routes = [("perspective", "in process (Application.perspective)", setup["in_process_ms"], RATE)]
        if setup["search_ms"]:
            print(f"  search index built and embedded at the first search in {setup['search_index_seconds']:.0f} s")
            routes += [("search", "in process (Application.search_for)", setup["search_ms"], rate)
                       for rate in [RATE, *SEARCH_RATES]]
        for route, label, local_ms, rate in routes:
            out = home / f"load-{route}.json"
            subprocess.run([sys.executable, __file__, "--load", url, str(home / "setup.json"), str(out), route,
                            str(rate)], env=env, check=True)
            report(route, label, local_ms, json.loads(out.read_text()), rate)
        saturation = wrk(url, setup["key"], [query(v) for v in setup["views"]], home)
        if saturation:
            print(f"  wrk (closed loop, 8 connections, the same viewpoints): {saturation}")
    finally:
        for process in servers:
            process.terminate()
        for process in servers:
            process.wait(timeout=60)
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        serve(int(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4]) if len(sys.argv) > 4 else None)
    elif len(sys.argv) > 1 and sys.argv[1] == "--load":
        load(sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4]), sys.argv[5], float(sys.argv[6]))
    else:
        main()
