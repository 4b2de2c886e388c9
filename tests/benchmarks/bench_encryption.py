"""Benchmark: ingest with content encryption (crypto-shredding) versus without, in one run, SQLite file.

Envelopes like a session's traffic — facts with reasons, messages — go through the whole ingest path (wire
parsing, rules, sealing, data keys, append). Baseline: the same path with NOUMENA_ENCRYPT_CONTENT=false.
The two alternate for NOUMENA_BENCH_ROUNDS rounds (default 5), so both see the same machine (single runs on a
busy two-core machine scatter by ±20%); prints the median ratio and its range. Goal: ratio >= 0.8.
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
ROUNDS = int(os.environ.get("NOUMENA_BENCH_ROUNDS", "5"))
PEOPLE = 500


def _envelopes() -> list[dict]:
    out = []
    for i in range(EVENTS):
        person = f"person:p{i % PEOPLE}"
        if i % 2:
            out.append({"event_id": f"e{i}", "tenant": "bench", "type": "message.appended",
                        "payload": {"session_id": f"s{i % PEOPLE}", "message_id": f"m{i}", "role": "user",
                                    "content": f"message {i}: 李总说这一版报价要按月结，汇率按当天的算。"}})
        else:
            out.append({"event_id": f"e{i}", "tenant": "bench", "type": "fact.asserted",
                        "payload": {"subject": person, "relation": f"r{i % 11}", "object": f"memory:m{i % 3000}",
                                    "reason": f"reason {i}: said on call {i % 7}", "scope": person}})
    return out


def run(encrypt: bool, envelopes: list[dict]) -> float:
    with tempfile.TemporaryDirectory() as home:
        app = bootstrap(Settings(home=Path(home), event_store="sqlite", encrypt_content=encrypt))
        app.service.execute(c.CreateTenant(tenant="bench"))
        setup = [c.RegisterEntity(tenant="bench", ref=f"person:p{i}", label=f"person {i}") for i in range(PEOPLE)]
        setup += [c.RegisterEntity(tenant="bench", ref=f"memory:m{i}", label=f"memory {i}") for i in range(3000)]
        setup += [c.StartSession(tenant="bench", session_id=f"s{i}", agent=f"person:p{i}",
                                 serving=f"person:p{i}") for i in range(PEOPLE)]
        app.service.execute_batch(setup)
        ingestor = app.ingestor()
        started = time.perf_counter()
        for start in range(0, len(envelopes), BATCH):
            result = ingestor.ingest(envelopes[start:start + BATCH])
            assert not result.rejected, result.rejected[0].reason
        elapsed = time.perf_counter() - started
        app.close()
    return len(envelopes) / elapsed


def main() -> None:
    envelopes = _envelopes()
    rounds = [(run(False, envelopes), run(True, envelopes)) for _ in range(ROUNDS)]
    plain, sealed = statistics.median(p for p, _ in rounds), statistics.median(s for _, s in rounds)
    ratios = sorted(s / p for p, s in rounds)
    print(f"ingest through the whole path, SQLite file, batches of {BATCH}, {EVENTS} envelopes, {ROUNDS} alternating "
          "rounds (medians)")
    print(f"  baseline  without encryption : {plain:10,.0f} events/s")
    print(f"  sealed    with encryption    : {sealed:10,.0f} events/s")
    print(f"  ratio sealed/plain = {statistics.median(ratios):.2f}  (rounds {ratios[0]:.2f}-{ratios[-1]:.2f}; "
          "goal >= 0.80)")


if __name__ == "__main__":
    main()
