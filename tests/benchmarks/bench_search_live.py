"""Search on a live log: how soon a written fact is found, and what serving searches costs the ingest path.

One SQLite home and one process, as `noumena serve` runs them: the application with its perspective and search
engines. A tenant with PEOPLE persons and an agent. A writer ingests envelopes through the application's ingestor
(the path of `POST /v1/events`, `noumena import` and the Kafka consumer), in batches of BATCH: facts about a person
with a reason holding a word written nowhere else (one word per batch), and messages. Meanwhile a reader thread in
the same process asks READS_PER_SECOND times a second:

- baseline: the agent's perspective (the perspective index follows the log; no search index exists);
- search on: a search for the word of the newest batch acknowledged (the search index follows the log too, and
  embeds the new facts). The time from a batch's acknowledgement to the first search that returns one of its facts
  is the batch's "searchable after".

In both modes the writer writes its next batch once the reader has read this one (read your writes, then write
again): in the baseline once a perspective has applied the batch's last position, with search on once a search
found one of its facts (or 2 s passed). So both writers pause between batches alike and only what the reader serves
differs: a thread that resumes after a pause runs slower for a while (docs/benchmarks.md measures it), which a writer
that paused with search on only would count against search.

Whole runs of the two modes alternate on fresh homes, NOUMENA_BENCH_ROUNDS rounds (default 3), after a base of
NOUMENA_BENCH_LIVE_BASE facts (default 20000); each round runs both, the order alternating (off-on, on-off, ...:
a machine that gets busier or quieter favours neither). Printed: each mode's ingest rate (the fastest batches
summed, as in bench_encryption.py, and the median of the rounds) and the writer thread's own CPU time per event
(what other processes on a shared machine do not change); the ratio search on / baseline (goal >= 0.9) of the
fastest batches, per round (the two runs of one round were next to each other in time) with their median, and
of the writer's CPU time; the searchable-after p50/p95 (goal p95 <= 1 s), and the baseline's time until a
perspective has applied the batch.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from api.process_tuning import (  # noqa: E402
    one_thread_per_numeric_call,
    tune_collector_for_a_long_lived_heap,
)

one_thread_per_numeric_call()  # as `noumena serve` runs: before numpy is imported

from domain import commands as c  # noqa: E402
from infra.bootstrap import bootstrap  # noqa: E402
from infra.settings import Settings  # noqa: E402

T = "bench"
AGENT = "agent:assistant"
PEOPLE = 200
BASE = int(os.environ.get("NOUMENA_BENCH_LIVE_BASE", "20000"))
EVENTS = int(os.environ.get("NOUMENA_BENCH_EVENTS", "10000"))
BATCH = int(os.environ.get("NOUMENA_BENCH_BATCH", "200"))
ROUNDS = int(os.environ.get("NOUMENA_BENCH_ROUNDS", "3"))
READS_PER_SECOND = float(os.environ.get("NOUMENA_BENCH_READS_PER_SECOND", "20"))
WORDS = ("invoice", "freight", "discount", "contract", "warehouse", "customs", "quote", "deadline", "sample",
         "pallet", "container", "payment", "settlement", "shipment", "supplier", "audit")


def marker(batch: int) -> str:
    """A word of the batch's own (letters only, so the analyzer keeps it whole)."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    word, n = "", batch + 26 * 26
    while n:
        word, n = letters[n % 26] + word, n // 26
    return "zq" + word


def envelopes(start: int, count: int, batch: int | None) -> list[dict]:
    out = []
    for i in range(start, start + count):
        person = f"person:p{i % PEOPLE}"
        word = WORDS[i % len(WORDS)]
        if i % 3 == 2:
            out.append({"event_id": f"e{i}", "tenant": T, "type": "message.appended",
                        "payload": {"session_id": f"s{i % PEOPLE}", "message_id": f"m{i}", "role": "user",
                                    "content": f"about the {word} for order {i}, please check it today"}})
        else:
            reason = f"said on call {i % 7} about the {word}" + (f" {marker(batch)}" if batch is not None else "")
            out.append({"event_id": f"e{i}", "tenant": T, "type": "fact.asserted",
                        "payload": {"subject": person, "relation": f"r{i % 11}", "object": f"memory:m{i % 3000}",
                                    "reason": reason, "scope": "org"}})
    return out


def run(search: bool) -> tuple[list[float], list[float], list[float]]:
    """One whole run on a fresh home: the seconds of each batch, the writer's CPU seconds of each (its thread's
    own time: what the machine's other work does not change), and each batch's time until the reader read it (in a
    perspective, or found by a search)."""
    with tempfile.TemporaryDirectory() as home:
        app = bootstrap(Settings(home=Path(home), event_store="sqlite"))
        app.service.execute(c.CreateTenant(tenant=T))
        setup = [c.RegisterEntity(tenant=T, ref=AGENT, label="the assistant")]
        setup += [c.RegisterEntity(tenant=T, ref=f"person:p{i}", label=f"person {i}") for i in range(PEOPLE)]
        setup += [c.RegisterEntity(tenant=T, ref=f"memory:m{i}", label=f"memory {i}") for i in range(3000)]
        setup += [c.StartSession(tenant=T, session_id=f"s{i}", agent=AGENT, serving=f"person:p{i}")
                  for i in range(PEOPLE)]
        app.service.execute_batch(setup)
        memory = app.application
        for start in range(0, BASE, 1000):
            memory.ingestor.ingest(envelopes(start, 1000, None))
        read = (lambda: memory.reading.search_for(T, AGENT, "freight discount")) if search else \
            (lambda: memory.reading.perspective(T, AGENT, None, []))
        read()  # the engines load the tenant (and, with search on, index and embed the base)
        acknowledged: dict[int, float] = {}
        last_position: dict[int, int] = {}
        found: dict[int, float] = {}
        done = threading.Event()

        def reader() -> None:
            while not done.is_set():
                started = time.perf_counter()
                newest = max(acknowledged, default=None)
                if search and newest is not None and newest not in found:
                    answer = memory.reading.search_for(T, AGENT, marker(newest), k=5)
                    if any(marker(newest) in (item.reason or "") for item in answer.items):
                        found[newest] = time.perf_counter() - acknowledged[newest]
                elif search:
                    read()
                else:
                    seen = read().log_position
                    if newest is not None and newest not in found and seen >= last_position[newest]:
                        found[newest] = time.perf_counter() - acknowledged[newest]
                time.sleep(max(0.0, 1.0 / READS_PER_SECOND - (time.perf_counter() - started)))

        thread = threading.Thread(target=reader, daemon=True)
        thread.start()
        times, cpu = [], []
        for n, start in enumerate(range(BASE, BASE + EVENTS, BATCH)):
            batch = envelopes(start, BATCH, n)
            started, used = time.perf_counter(), time.thread_time()
            result = memory.ingestor.ingest(batch)
            times.append(time.perf_counter() - started)
            cpu.append(time.thread_time() - used)
            assert not result.rejected, result.rejected[0].reason
            assert result.last_position is not None
            last_position[n] = result.last_position
            acknowledged[n] = time.perf_counter()
            # the next batch is written once the reader read this one (or 2 s passed: counted as 2 s)
            deadline = time.perf_counter() + 2.0
            while n not in found and time.perf_counter() < deadline:
                time.sleep(0.005)
        done.set()
        thread.join()
        app.close()
        waits = [found.get(n, 2.0) for n in range(len(times))]
    return times, cpu, waits


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    tune_collector_for_a_long_lived_heap()  # (as the served process does)
    print(f"search on a live log: SQLite, base {BASE} envelopes, then {EVENTS} in batches of {BATCH} while a reader"
          f" asks {READS_PER_SECOND:g} times a second; {ROUNDS} rounds of both modes, in turn first (ABBA);"
          f" load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    best: dict[bool, list[float]] = {}
    rates: dict[bool, list[float]] = {False: [], True: []}
    cpu: dict[bool, list[float]] = {False: [], True: []}
    waits: dict[bool, list[float]] = {False: [], True: []}
    for round_ in range(ROUNDS):
        # the order alternates, so a machine getting busier or quieter during a round favours neither mode
        for search in (False, True) if round_ % 2 == 0 else (True, False):
            times, used, found = run(search)
            best[search] = times if search not in best else [min(a, b) for a, b in zip(best[search], times,
                                                                                      strict=True)]
            rates[search].append(EVENTS / sum(times))
            cpu[search].append(sum(used) / EVENTS * 1e6)
            waits[search] += found
    base_rate, search_rate = EVENTS / sum(best[False]), EVENTS / sum(best[True])
    paired = [on / off for on, off in zip(rates[True], rates[False], strict=True)]
    print(f"  ingest, reader serving perspectives (baseline): {base_rate:8,.0f} events/s"
          f" (median of rounds {statistics.median(rates[False]):,.0f}); writer CPU"
          f" {statistics.median(cpu[False]):.0f} us per event (median of rounds)")
    print(f"  ingest, reader serving searches:                {search_rate:8,.0f} events/s"
          f" (median of rounds {statistics.median(rates[True]):,.0f}); writer CPU"
          f" {statistics.median(cpu[True]):.0f} us per event")
    print(f"  ratio search on / baseline (goal >= 0.9): {search_rate / base_rate:.2f} of the fastest batches;"
          f" per round {', '.join(f'{r:.2f}' for r in paired)} (median {statistics.median(paired):.2f});"
          f" writer CPU {statistics.median(cpu[False]) / statistics.median(cpu[True]):.2f}")
    for search, what in ((True, "searchable"), (False, "in a perspective")):
        print(f"  {what} after the batch is acknowledged: p50 {pct(waits[search], 0.5) * 1000:.0f} ms,"
              f" p95 {pct(waits[search], 0.95) * 1000:.0f} ms, max {max(waits[search]) * 1000:.0f} ms over"
              f" {len(waits[search])} batches" + (" (goal p95 <= 1 s)" if search else " (the writer waits for it too)"))


if __name__ == "__main__":
    main()
