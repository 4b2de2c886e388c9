"""Benchmark: forgetting without an outage. One tenant forgets a person while another tenant's perspectives are asked
over HTTP at a constant rate, against the same load without the forget, in one run.

1. A real `noumena serve` (SQLite, production mode, its own projector) with two tenants: `reader`, a small
   organization (NOUMENA_BENCH_READER_FACTS facts, default 2,000, among 400 people and 8 agents), and `busy`, a
   tenant of NOUMENA_BENCH_FORGET_EVENTS events (default 200,000) where one person is behind
   NOUMENA_BENCH_FORGET_FACTS facts (default 20,000): forgetting them deletes a key per fact, cleans the live
   read model of them and rebuilds it from the whole log behind it.
2. Baseline: GET /v1/perspectives in `reader` at NOUMENA_BENCH_API_RATE (default 200 requests/s, open loop, latency
   from each request's scheduled time, so a pause of the server shows whole) for NOUMENA_BENCH_API_SECONDS
   (default 20 s), with `/healthz` polled every 10 ms beside it. As in bench_api.py, the served perspectives
   record no recall and keep no evidence (NOUMENA_BENCH_RECORD=1: they do, the full path of `noumena serve`).
3. The same load, starting half a second before `POST /v1/forget` in `busy` (and a write in `busy` as soon as it
   answers, which has the tenant's dropped state folded again) and lasting until the forget has
   answered *and* the rebuilt read model is swapped in behind it (`/readyz` lists no tenant as `purging`).
4. Beside it, the forgetting tenant's own reads (`person:li` and another person, one after the other, closed loop):
   their statuses, the longest, and whether Li's label was shown again after a read that no longer showed it.

Printed: the forget call's duration and the rebuild behind it; how long the write after the call took; both
distributions (the loaded one over the call and the rebuild), the longest wait of another tenant's request and of
`/healthz` (a pause of the process shows as a request answered that much after its scheduled time); the served
process's CPU in both windows; the longest waits during the call and after it, and the seconds holding waits over
the goal; the forgetting tenant's own reads. Goals (issue 28): the
call <= 10 s; the forgetting tenant's reads never 503 and never show Li again; no request of another tenant nor
`/healthz` waits more than 100 ms (over the baseline's own noise, printed beside).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
sys.path.insert(0, str(HERE))

from bench_api import CONNECTIONS, RATE, SECONDS, pct, query  # noqa: E402

RECORD = os.environ.get("NOUMENA_BENCH_RECORD", "") == "1"
READER_FACTS = int(os.environ.get("NOUMENA_BENCH_READER_FACTS", "2000"))
FORGET_FACTS = int(os.environ.get("NOUMENA_BENCH_FORGET_FACTS", "20000"))
FORGET_EVENTS = int(os.environ.get("NOUMENA_BENCH_FORGET_EVENTS", "200000"))
PROFILE = os.environ.get("NOUMENA_BENCH_PROFILE", "")
"""A file to write py-spy's samples of the served process to (collapsed stacks per thread, the interpreter lock's
holders only) over NOUMENA_BENCH_PROFILE_SECONDS (default 20) from the forget call on: where the process's time
goes while it forgets. Needs py-spy (not a dependency of the project)."""
PROFILE_SECONDS = int(os.environ.get("NOUMENA_BENCH_PROFILE_SECONDS", "20"))
PAUSE_GOAL_MS = 100.0
CALL_GOAL_SECONDS = 10.0
PEOPLE, AGENTS = 400, 8


def _post_events(client: Any, events: list[dict[str, Any]]) -> int:
    position = 0
    for start in range(0, len(events), 1000):
        written = client.post("/v1/events", json={"events": events[start:start + 1000]}, timeout=600)
        assert written.status_code == 200, written.text
        position = max([position] + [r.get("position") or 0 for r in written.json().get("results", [])])
    return position


def fill_reader(client: Any) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    refs = [f"person:r{i}" for i in range(PEOPLE)]
    agents = [f"agent:a{i}" for i in range(AGENTS)]
    for ref in refs + agents:
        events.append({"event_id": f"reg-{ref}", "tenant": "reader", "type": "entity.registered",
                       "payload": {"ref": ref, "label": f"{ref.split(':')[1]} of the reader tenant"}})
    relations = ("knows", "works_with", "reports_to", "prefers")
    for i in range(READER_FACTS):
        subject, obj = refs[(i * 7) % PEOPLE], refs[(i * 13 + 1) % PEOPLE]
        if subject == obj:
            obj = refs[(i * 13 + 2) % PEOPLE]
        events.append({"event_id": f"fact-{i}", "tenant": "reader", "type": "fact.asserted",
                       "payload": {"subject": subject, "relation": relations[i % 4], "object": obj,
                                   "reason": f"noted in call {i}"}})
    for i, agent in enumerate(agents):
        events.append({"event_id": f"serves-{i}", "tenant": "reader", "type": "fact.asserted",
                       "payload": {"subject": agent, "relation": "serves", "object": refs[i]}})
    _post_events(client, events)
    return [{"agent": agents[i % AGENTS], "serving": refs[i % AGENTS], "focus": [refs[(i * 31 + 5) % PEOPLE]]}
            for i in range(300)]


def fill_busy(client: Any) -> None:
    """`person:li` knows FORGET_FACTS people; the other people's own facts about each other fill the tenant up to
    FORGET_EVENTS events (what a forget must read past, and what the rebuild replays)."""
    events = [{"event_id": "reg-li", "tenant": "busy", "type": "entity.registered",
               "payload": {"ref": "person:li", "label": "Li"}}]
    events += [{"event_id": f"reg-{i}", "tenant": "busy", "type": "entity.registered",
                "payload": {"ref": f"person:b{i}", "label": f"person {i}"}} for i in range(FORGET_FACTS)]
    events += [{"event_id": f"knows-{i}", "tenant": "busy", "type": "fact.asserted",
                "payload": {"subject": "person:li", "relation": "knows", "object": f"person:b{i}",
                            "reason": f"met at fair {i}"}} for i in range(FORGET_FACTS)]
    relations = ("knows", "works_with", "reports_to", "prefers")
    others = max(0, FORGET_EVENTS - len(events))
    people = max(2, FORGET_FACTS)
    events += [{"event_id": f"other-{i}", "tenant": "busy", "type": "fact.asserted",
                "payload": {"subject": f"person:b{i % people}", "relation": relations[i % 4],
                            "object": f"person:b{(i // people + 1 + i) % people}",
                            "reason": f"noted at meeting {i}"}} for i in range(others)]
    _post_events(client, events)


class _Reconnecting:
    """A minimal HTTP/1.1 keep-alive GET client on asyncio streams (a load generator must cost far less CPU than
    the server), which opens its connection again when the server closed it (uvicorn closes one idle for 5 s)."""

    def __init__(self, host: str, port: int, key: str) -> None:
        self.host, self.port = host, port
        self.head = f"Host: {host}:{port}\r\nAuthorization: Bearer {key}\r\n\r\n".encode()
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def _get(self, path: str) -> int:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        self.writer.write(b"GET " + path.encode() + b" HTTP/1.1\r\n" + self.head)
        head = await self.reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            if line[:15].lower() == b"content-length:":
                length = int(line[15:])
        await self.reader.readexactly(length)
        return int(head[9:12])

    async def get(self, path: str) -> int:
        try:
            return await self._get(path)
        except (asyncio.IncompleteReadError, ConnectionError):
            if self.writer is not None:
                self.writer.close()
            self.reader = self.writer = None
            return await self._get(path)


async def _run_load(url: str, key: str, paths: list[str], rate: float, until: threading.Event | None,
                    seconds: float) -> dict[str, Any]:
    """Open-loop load at `rate` until `until` is set (or for `seconds`), plus /healthz every 10 ms."""
    host, port = url.removeprefix("http://").split(":")
    connections = [_Reconnecting(host, int(port), key) for _ in range(CONNECTIONS)]
    await asyncio.gather(*(connection.get(path) for connection, path in zip(connections, paths, strict=False)))
    samples: list[tuple[float, float, int]] = []  # (scheduled, ms, status)
    health: list[tuple[float, float]] = []
    start = time.perf_counter() + 0.1
    counter = iter(range(10**9))
    done = asyncio.Event()

    def finished(now: float) -> bool:
        return (until.is_set() if until is not None else now - start >= seconds)

    async def worker(connection: _Reconnecting) -> None:
        for k in counter:
            scheduled = start + k / rate
            delay = scheduled - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            if finished(time.perf_counter()):
                done.set()
                return
            status = await connection.get(paths[k % len(paths)])
            samples.append((scheduled, (time.perf_counter() - scheduled) * 1000, status))

    async def healthz() -> None:
        connection = _Reconnecting(host, int(port), key)
        while not done.is_set():
            sent = time.perf_counter()
            await connection.get("/healthz")
            health.append((sent, (time.perf_counter() - sent) * 1000))
            await asyncio.sleep(0.01)

    await asyncio.gather(healthz(), *(worker(c) for c in connections))
    return {"samples": samples, "health": health, "start": start, "end": time.perf_counter()}


def _where_the_waits_were(samples: list[tuple[float, float, int]], t0: float, t1: float, t2: float) -> str:
    """The longest wait during the call and during the rebuild behind it, and the seconds (from the call) holding
    waits over the goal: which part of a forget a pause belongs to."""
    call = [ms for scheduled, ms, _ in samples if t0 <= scheduled <= t1]
    rebuild = [ms for scheduled, ms, _ in samples if t1 < scheduled <= t2]
    over: dict[int, list[float]] = {}
    for scheduled, ms, _ in samples:
        if t0 <= scheduled <= t2 and ms > PAUSE_GOAL_MS:
            over.setdefault(int(scheduled - t0), []).append(ms)
    seconds = ", ".join(f"+{second} s: {len(waits)} (longest {max(waits):.0f} ms)"
                        for second, waits in sorted(over.items()))
    return (f"  longest wait during the call {max(call, default=0):.0f} ms, during the rebuild after it"
            f" {max(rebuild, default=0):.0f} ms; waits over {PAUSE_GOAL_MS:g} ms by second from the call:"
            f" {seconds or 'none'}")


def _cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of a process so far, all its threads (/proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _summary(name: str, ms: list[float], health: list[float], elapsed: float, statuses: dict[int, int]) -> str:
    return (f"  {name}: {len(ms)} perspectives in {elapsed:.1f} s ({len(ms) / elapsed:.0f}/s), statuses {statuses};"
            f" p50 {pct(ms, 50):.2f} ms  p95 {pct(ms, 95):.2f} ms  p99 {pct(ms, 99):.2f} ms  max {max(ms):.0f} ms;"
            f" /healthz p99 {pct(health, 99):.1f} ms, max {max(health):.0f} ms ({len(health)} polls)")


def serve(port: int, home: Path) -> None:
    """The served process: `noumena serve`'s app (its projector, the real routes), perspectives recording no
    recall unless NOUMENA_BENCH_RECORD=1. Tuned as `noumena serve` is (api/cli.py's main): the collector's
    thresholds and one BLAS thread, set before numpy loads."""
    from api.process_tuning import one_thread_per_numeric_call, tune_collector_for_a_long_lived_heap

    one_thread_per_numeric_call()
    tune_collector_for_a_long_lived_heap()
    import uvicorn

    from api.app import create_app
    from infra.bootstrap import bootstrap

    app = create_app(bootstrap())

    async def served(scope: Any, receive: Any, send: Any) -> None:
        served = getattr(app.state, "served", None)
        if served is not None and not RECORD:
            served.engines.perspectives.records_recalls = False
        await app(scope, receive, send)

    uvicorn.run(served, host="127.0.0.1", port=port, log_level="warning", access_log=False)


def _profile(pid: int) -> None:
    import subprocess

    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(spy).exists():
        print("  (NOUMENA_BENCH_PROFILE: py-spy is not installed here; no profile taken)")
        return
    subprocess.Popen([spy, "record", "--pid", str(pid), "--duration", str(PROFILE_SECONDS), "--rate", "200",
                      "--threads", "--gil", "--format", "raw", "--output", PROFILE, "--nonblocking"],
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def start(home: Path) -> Any:
    import subprocess

    import httpx

    from tests.api_support import Server, free_port, server_env

    port = free_port()
    home.mkdir(parents=True, exist_ok=True)
    log = home / "server.log"
    # (server_env passes no NOUMENA_ variable of this process on: the served process is told RECORD itself)
    process = subprocess.Popen([sys.executable, __file__, "--serve", str(port), str(home)],
                               env=server_env(home, NOUMENA_BENCH_RECORD="1" if RECORD else ""),
                               stdout=log.open("wb"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"the server exited with {process.returncode}:\n{log.read_text()}")
        try:
            if httpx.get(url + "/readyz", timeout=1).status_code == 200:
                return Server(url, process, home, log)
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    process.kill()
    raise SystemExit("the server did not start")


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # (so the served process is stopped too)
    import httpx

    from tests.api_support import stop_server

    print(f"forget isolation: perspectives in one tenant at {RATE:g} req/s over {CONNECTIONS} connections, while"
          f" another of {FORGET_EVENTS:,} events forgets a person behind {FORGET_FACTS:,} facts (baseline:"
          f" {SECONDS:g} s without the forget);"
          f" recalls {'recorded' if RECORD else 'not recorded'}")
    home = Path(tempfile.mkdtemp(prefix="noumena-bench-forget-"))
    server = start(home / "home")
    ok = False
    try:
        reader, busy = server.tenant("reader"), server.tenant("busy")
        started = time.perf_counter()
        views = fill_reader(reader.client)
        fill_busy(busy.client)
        position = httpx.get(server.url + "/readyz", timeout=30).json()["log_position"]
        deadline = time.monotonic() + 1800
        while httpx.get(server.url + "/readyz", timeout=60).json().get("projection_position", 0) < position:
            if time.monotonic() > deadline:
                raise SystemExit("the projector did not catch up with the filled log in 30 minutes")
            time.sleep(1)
        for view in views[:20]:  # warm up, and wait for the projector to have everything
            answer = reader.client.get(query(view) + f"&min_position={position}", timeout=300)
            assert answer.status_code == 200, answer.text
        print(f"  filled in {time.perf_counter() - started:.1f} s: log at position {position}")
        paths = [query(v) for v in views]

        cpu_before = _cpu_seconds(server.process.pid)
        base = asyncio.run(_run_load(server.url, reader.key, paths, RATE, None, SECONDS))
        base_cpu = (_cpu_seconds(server.process.pid) - cpu_before) / (base["end"] - base["start"])
        base_ms = [ms for _, ms, _ in base["samples"]]
        base_statuses: dict[int, int] = {}
        for _, _, status in base["samples"]:
            base_statuses[status] = base_statuses.get(status, 0) + 1

        forgotten = threading.Event()
        receipt: dict[str, Any] = {}

        def forget() -> None:
            time.sleep(0.6)
            if PROFILE:
                _profile(server.process.pid)
            t0 = time.perf_counter()
            receipt["response"] = busy.client.post("/v1/forget", json={"subject": "person:li"}, timeout=900)
            t1 = time.perf_counter()
            # a write of the forgetting tenant right after: its state, dropped by the forget, is folded again
            written = busy.client.post("/v1/events", json={"events": [{
                "event_id": "after-the-forget", "tenant": "busy", "type": "fact.asserted",
                "payload": {"subject": "person:b1", "relation": "knows", "object": "person:b2",
                            "reason": "met again after the forget"}}]}, timeout=900)
            receipt["write"] = (time.perf_counter() - t1, written.status_code)
            # the forget answers before the rebuilt read model is in: the load goes on until it is
            with httpx.Client(base_url=server.url, timeout=60) as client:
                while "busy" in client.get("/readyz").json().get("purging", []):
                    time.sleep(0.1)
            receipt["window"] = (t0, t1, time.perf_counter())
            time.sleep(0.2)
            forgotten.set()

        own: list[tuple[float, float, str, int, bool]] = []  # (sent, seconds, ref, status, Li's label shown)
        refused: dict[int, str] = {}  # status -> the first answer of it

        def read_own() -> None:
            with httpx.Client(base_url=server.url, timeout=300,
                              headers={"Authorization": f"Bearer {busy.key}"}) as client:
                while not forgotten.is_set():
                    for ref in ("person:li", "person:b1"):
                        sent = time.perf_counter()
                        answer = client.get(f"/v1/entities/{ref}")
                        own.append((sent, time.perf_counter() - sent, ref, answer.status_code,
                                    '"label":"Li"' in answer.text.replace(" ", "")))
                        if answer.status_code != 200:
                            refused.setdefault(answer.status_code, f"{ref}: {answer.text[:300]}")
                    time.sleep(0.05)

        thread, own_reader = threading.Thread(target=forget), threading.Thread(target=read_own)
        thread.start()
        own_reader.start()
        cpu_before = _cpu_seconds(server.process.pid)
        loaded = asyncio.run(_run_load(server.url, reader.key, paths, RATE, forgotten, SECONDS))
        loaded_cpu = (_cpu_seconds(server.process.pid) - cpu_before) / (loaded["end"] - loaded["start"])
        thread.join()
        own_reader.join()
        response = receipt["response"]
        assert response.status_code == 200, response.text
        t0, t1, t2 = receipt["window"]
        during = [(ms, status) for scheduled, ms, status in loaded["samples"] if t0 <= scheduled <= t2]
        during_ms = [ms for ms, _ in during]
        statuses: dict[int, int] = {}
        for _, status in during:
            statuses[status] = statuses.get(status, 0) + 1
        health_during = [ms for sent, ms in loaded["health"] if t0 <= sent <= t2]
        base_health = [ms for _, ms in base["health"]]
        print(f"  the forget: the call {t1 - t0:.2f} s ({response.json()['keys_deleted']:,} keys deleted,"
              f" {response.json()['events_affected']:,} events affected), the rebuilt read model in"
              f" {t2 - t0:.2f} s after it was asked; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
        write_seconds, write_status = receipt["write"]
        print(f"  the forgetting tenant's first write after the call: {write_status} in {write_seconds:.2f} s"
              " (its state, dropped by the forget, folded again first)")
        print(_summary("without a forget", base_ms, base_health, base["end"] - base["start"], base_statuses))
        print(_summary("while it forgets (call and rebuild)", during_ms, health_during, t2 - t0, statuses))
        print(f"  the served process's CPU (its threads together, in cores): {base_cpu:.2f} without a forget,"
              f" {loaded_cpu:.2f} while it forgets (one interpreter: what its Python threads can use is about 1)")
        print(f"  ratio p95 while forgetting / without: {pct(during_ms, 95) / pct(base_ms, 95):.2f}x")
        print(_where_the_waits_were(loaded["samples"], t0, t1, t2))
        own_during = [r for r in own if t0 <= r[0] <= t2]
        own_statuses: dict[int, int] = {}
        for _, _, _, status, _ in own_during:
            own_statuses[status] = own_statuses.get(status, 0) + 1
        li = [shown for _, _, ref, status, shown in own if ref == "person:li" and status == 200]
        again = False in li and True in li[li.index(False):]
        after_call = [shown for sent, _, ref, status, shown in own if ref == "person:li" and sent >= t1]
        print(f"  the forgetting tenant's own reads meanwhile: {len(own_during)}, statuses {own_statuses}, longest"
              f" {max((r[1] for r in own_during), default=0):.2f} s; Li's label shown again after a read without it:"
              f" {'YES' if again else 'no'}; shown after the call answered: {'YES' if any(after_call) else 'no'}")
        for status, answer in sorted(refused.items()):
            print(f"    the first {status} answer: {answer}")
        longest, health_longest = max(during_ms), max(health_during, default=0.0)
        goals = {
            f"the call <= {CALL_GOAL_SECONDS:g} s": t1 - t0 <= CALL_GOAL_SECONDS,
            "the forgetting tenant's reads never 503, Li never shown again":
                bool(own_during) and set(own_statuses) == {200} and not again and not any(after_call),
            f"another tenant's requests wait <= {PAUSE_GOAL_MS:g} ms (longest {longest:.0f} ms; without a forget"
            f" {max(base_ms):.0f} ms)": longest <= PAUSE_GOAL_MS and set(statuses) == {200},
            f"/healthz waits <= {PAUSE_GOAL_MS:g} ms (longest {health_longest:.0f} ms; without a forget"
            f" {max(base_health, default=0):.0f} ms)": health_longest <= PAUSE_GOAL_MS,
            f"{RATE:g} req/s kept": len(during_ms) >= 0.95 * RATE * (t2 - t0),
            "the forgetting tenant's first write after the call answered 200": write_status == 200,
        }
        for goal, met in goals.items():
            print(f"  goal {goal}: {'met' if met else 'NOT met'}")
        ok = True
    finally:
        stop_server(server)
        if ok:
            shutil.rmtree(home, ignore_errors=True)
        else:
            print(f"the server exited with {server.process.returncode}; its log: {server.log}\n"
                  f"{server.log.read_text()[-3000:]}")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        serve(int(sys.argv[2]), Path(sys.argv[3]))
    else:
        main()
