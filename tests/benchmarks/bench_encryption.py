"""Benchmark: ingest with content encryption (crypto-shredding) versus without, in one run, SQLite file.

Envelopes go through the whole ingest path (wire parsing, rules, sealing, data keys, append). Baseline: the same
path with NOUMENA_ENCRYPT_CONTENT=false. Two workloads:

- A, the hard case for sealing: every other event a fact with a (short) reason, the others messages of about 40
  characters; each fact needs a key of its own, and the texts are too short for anything else to dominate;
- B, session traffic: messages of about 300 characters (Chinese and English), one fact with a reason per five
  messages (facts come from consolidating a session's turns, so they are the fewer).

Each round sets up a fresh unsealed and a fresh sealed store side by side and feeds them the same batches in turn
(which goes first alternates), so the two sides of every batch pair run within milliseconds of each other: on a
shared two-core machine whose speed drifts by ±20% from minute to minute, alternating whole runs left the ratio
inside that drift. NOUMENA_BENCH_ROUNDS rounds (default 3). Prints each workload's rates over all rounds, their
ratio (the figure held to the goal), and the median and 10th-90th percentile of the per-batch-pair ratios.
Goal: ratio >= 0.8.
Sizes: NOUMENA_BENCH_EVENTS (default 20000), NOUMENA_BENCH_BATCH (default 500).
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from domain import commands as c  # noqa: E402
from infra.bootstrap import bootstrap  # noqa: E402
from infra.settings import Settings  # noqa: E402

EVENTS = int(os.environ.get("NOUMENA_BENCH_EVENTS", "20000"))
BATCH = int(os.environ.get("NOUMENA_BENCH_BATCH", "500"))
ROUNDS = int(os.environ.get("NOUMENA_BENCH_ROUNDS", "3"))
PEOPLE = 500


SHORT = "李总说这一版报价要按月结，汇率按当天的算。"
LONG = ("王总：给李总再出一版报价，上次那版因为汇率没签下来。Li asked whether the new quote can settle monthly "
        "instead of per shipment, and whether freight to Ningbo is included. 合同 v3 还在法务那边等审批，"
        "法务说周三前给意见。Please check the exchange rate on the day we send it and keep the same discount. ")


def _envelopes(fact_every: int, text: str) -> list[dict]:
    out = []
    for i in range(EVENTS):
        person = f"person:p{i % PEOPLE}"
        if i % fact_every:
            out.append({"event_id": f"e{i}", "tenant": "bench", "type": "message.appended",
                        "payload": {"session_id": f"s{i % PEOPLE}", "message_id": f"m{i}", "role": "user",
                                    "content": f"message {i}: {text}"}})
        else:
            out.append({"event_id": f"e{i}", "tenant": "bench", "type": "fact.asserted",
                        "payload": {"subject": person, "relation": f"r{i % 11}", "object": f"memory:m{i % 3000}",
                                    "reason": f"reason {i}: said on call {i % 7}", "scope": person}})
    return out


WORKLOADS = {"A  half facts, short texts    ": (2, SHORT), "B  session traffic, 5:1, long  ": (6, LONG)}


def _app(home: str, encrypt: bool):  # type: ignore[no-untyped-def]
    app = bootstrap(Settings(home=Path(home), event_store="sqlite", encrypt_content=encrypt))
    app.service.execute(c.CreateTenant(tenant="bench"))
    setup = [c.RegisterEntity(tenant="bench", ref=f"person:p{i}", label=f"person {i}") for i in range(PEOPLE)]
    setup += [c.RegisterEntity(tenant="bench", ref=f"memory:m{i}", label=f"memory {i}") for i in range(3000)]
    setup += [c.StartSession(tenant="bench", session_id=f"s{i}", agent=f"person:p{i}",
                             serving=f"person:p{i}") for i in range(PEOPLE)]
    app.service.execute_batch(setup)
    return app


def run(envelopes: list[dict]) -> list[tuple[float, float]]:
    """One round: a fresh unsealed and a fresh sealed store, fed the same batches in turn; (unsealed, sealed)
    seconds for each batch (the order within a pair alternates)."""
    pairs = []
    with tempfile.TemporaryDirectory() as plain_home, tempfile.TemporaryDirectory() as sealed_home:
        apps = _app(plain_home, False), _app(sealed_home, True)
        ingestors = [app.ingestor() for app in apps]
        for number, start in enumerate(range(0, len(envelopes), BATCH)):
            batch = envelopes[start:start + BATCH]
            took = [0.0, 0.0]
            for side in ((0, 1) if number % 2 == 0 else (1, 0)):
                started = time.perf_counter()
                result = ingestors[side].ingest(batch)
                took[side] = time.perf_counter() - started
                assert not result.rejected, result.rejected[0].reason
            pairs.append((took[0], took[1]))
        for app in apps:
            app.close()
    return pairs


def main() -> None:
    print(f"ingest through the whole path, SQLite file, batches of {BATCH}, {EVENTS} envelopes, {ROUNDS} rounds; "
          "each batch goes to an unsealed and a sealed store in turn")
    for name, (fact_every, text) in WORKLOADS.items():
        envelopes = _envelopes(fact_every, text)
        pairs = [pair for _ in range(ROUNDS) for pair in run(envelopes)]
        plain, sealed = sum(p for p, _ in pairs), sum(s for _, s in pairs)
        events = len(envelopes) * ROUNDS
        ratios = sorted(p / s for p, s in pairs)
        low, high = ratios[len(ratios) // 10], ratios[len(ratios) * 9 // 10]
        print(f"  {name} without encryption (baseline) {events / plain:8,.0f} events/s, with {events / sealed:8,.0f} "
              f"events/s: ratio {plain / sealed:.2f} (batch pairs: median {statistics.median(ratios):.2f}, "
              f"10-90% {low:.2f}-{high:.2f}; goal >= 0.80)")


if __name__ == "__main__":
    main()
