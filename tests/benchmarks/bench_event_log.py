"""Benchmark: facts appended per second through our domain path versus raw eventsourcing appends of the
equivalent events, in one run, both into fresh SQLite files, batched. The two alternate for
NOUMENA_BENCH_ROUNDS rounds (default 5) so that both see the same machine; prints the median ratio and its
range (goal >= 0.7). Our path takes state snapshots as a server does (NOUMENA_STATE_SNAPSHOT_EVERY, default
10,000: asked for at 10,000 and 20,000 events here, taken by the snapshotter process); it prints how many were
stored while the writes ran and once it was done (untimed). A third series, alternating with the two, is our path
without state snapshots (every = 0): what they cost the writes, in the same run.

Sizes: NOUMENA_BENCH_FACTS (default 30000), NOUMENA_BENCH_BATCH (default 100).
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from datetime import datetime  # noqa: E402

from eventsourcing.domain import DomainEvent  # noqa: E402
from eventsourcing.persistence import (  # noqa: E402
    DatetimeAsISO,
    InfrastructureFactory,
    JSONTranscoder,
    Mapper,
)
from eventsourcing.utils import Environment  # noqa: E402

from api.process_tuning import tune_collector_for_a_long_lived_heap  # noqa: E402
from domain import commands as c  # noqa: E402
from infra.adapters.eventlog import EventsourcingLog  # noqa: E402
from infra.bootstrap import bootstrap  # noqa: E402
from infra.settings import Settings  # noqa: E402

FACTS = int(os.environ.get("NOUMENA_BENCH_FACTS", "30000"))
BATCH = int(os.environ.get("NOUMENA_BENCH_BATCH", "100"))
ROUNDS = int(os.environ.get("NOUMENA_BENCH_ROUNDS", "5"))
ENTITIES = 2000


def _commands() -> list[c.AssertFact]:
    return [c.AssertFact(tenant="bench", subject=f"person:p{i % ENTITIES}", relation=f"r{i % 7}",
                         object=f"thing:t{(i * 7919) % ENTITIES}", reason=f"benchmark fact {i}",
                         source=c.Source(session_id=None, message_ids=(f"m{i}",)))
            for i in range(FACTS)]


SNAPSHOTS_DURING: list[tuple[int, int]] = []
"""By round: state snapshots the snapshotter stored while our timed writes ran, and by the time it was done."""


def ours(home: Path, commands: list[c.AssertFact], snapshots: bool = True) -> tuple[float, list]:
    # Sealing content (crypto-shredding) is measured on its own in bench_encryption.py.
    settings = Settings(home=home, event_store="sqlite", encrypt_content=False)
    if not snapshots:
        settings = settings.model_copy(update={"state_snapshot_every": 0})
    app = bootstrap(settings)
    app.service.execute(c.CreateTenant(tenant="bench"))
    for start in range(0, ENTITIES * 2, 500):
        app.service.execute_batch([
            c.RegisterEntity(tenant="bench", ref=f"{'person:p' if i < ENTITIES else 'thing:t'}{i % ENTITIES}",
                             label=f"entity {i}") for i in range(start, min(start + 500, ENTITIES * 2))])
    started = time.perf_counter()
    events = []
    for start in range(0, len(commands), BATCH):
        result = app.service.execute_batch(commands[start:start + BATCH])
        events.extend(e for o in result.outcomes for e in o.events)
    elapsed = time.perf_counter() - started
    if snapshots:  # (how many were in place as the writes ended, and once the snapshotter is done: untimed)
        store = app.snapshots
        during = len(store.stored)  # type: ignore[union-attr]
        store.wait(120)  # type: ignore[union-attr]
        SNAPSHOTS_DURING.append((during, len(store.stored)))  # type: ignore[union-attr]
    app.close()
    return len(commands) / elapsed, events


def raw(home: Path, events: list) -> float:
    """The baseline: the same events, already serialized, handed straight to eventsourcing's recorder."""
    home.mkdir(parents=True, exist_ok=True)
    log = EventsourcingLog(Settings(home=home, event_store="sqlite").event_store_env())
    stored = [log.mapper.to_stored("bench", i + 1, e) for i, e in enumerate(events)]
    started = time.perf_counter()
    for start in range(0, len(stored), BATCH):
        log.recorder.insert_events(stored[start:start + BATCH])
    elapsed = time.perf_counter() - started
    log.close()
    return len(stored) / elapsed


class FactWasAsserted(DomainEvent):
    """eventsourcing's own kind of event, with the same fields as our FactAsserted."""

    tenant: str
    event_id: str | None
    fact_id: str
    subject: str
    relation: str
    object: str
    scope: str
    reason: str | None
    confidence: float
    valid_from: datetime | None
    valid_to: datetime | None
    provenance: dict
    supersedes: str | None


def library_path(home: Path, events: list) -> float:
    """Baseline: the same facts as eventsourcing's own events, through its mapper and recorder, no rules."""
    home.mkdir(parents=True, exist_ok=True)
    env = Settings(home=home, event_store="sqlite").event_store_env()
    factory = InfrastructureFactory.construct(Environment(env=env))
    recorder = factory.process_recorder()
    transcoder = JSONTranscoder()
    transcoder.register(DatetimeAsISO())
    mapper = Mapper(transcoder=transcoder)
    payloads = [e.model_dump() for e in events]
    stream = uuid.uuid5(uuid.NAMESPACE_URL, "tenant:bench")
    started = time.perf_counter()
    for start in range(0, len(payloads), BATCH):
        batch = []
        for i, p in enumerate(payloads[start:start + BATCH], start=start):
            event = FactWasAsserted(originator_id=stream, originator_version=i + 1, timestamp=p["recorded_at"],
                                    tenant=p["tenant"], event_id=p["event_id"], fact_id=p["fact_id"],
                                    subject=p["subject"], relation=p["relation"], object=p["object"],
                                    scope=p["scope"], reason=p["reason"], confidence=p["confidence"],
                                    valid_from=p["valid_from"], valid_to=p["valid_to"],
                                    provenance={k: v for k, v in p["provenance"].items() if v is not None},
                                    supersedes=p["supersedes"])
            batch.append(mapper.to_stored_event(event))
        recorder.insert_events(batch)
    elapsed = time.perf_counter() - started
    factory.close()
    return len(payloads) / elapsed


def main() -> None:
    tune_collector_for_a_long_lived_heap()  # (as the served process does)
    commands = _commands()
    rounds: list[tuple[float, float]] = []  # (ours, baseline A), alternating so both see the same machine
    without: list[float] = []  # ours without state snapshots, in the same alternation
    with tempfile.TemporaryDirectory() as tmp:
        for n in range(ROUNDS):
            ours_rate, events = ours(Path(tmp) / f"ours{n}", commands)
            asserted = [e for e in events if e.topic == "fact.asserted"]
            rounds.append((ours_rate, library_path(Path(tmp) / f"library{n}", asserted)))
            without.append(ours(Path(tmp) / f"plain{n}", commands, snapshots=False)[0])
        raw_rate = raw(Path(tmp) / "raw", events)
    ratios = sorted(o / a for o, a in rounds)
    ours_rate, library_rate = statistics.median(o for o, _ in rounds), statistics.median(a for _, a in rounds)
    print(f"facts appended, SQLite file, batches of {BATCH}, {FACTS} facts, {ROUNDS} alternating rounds (medians)")
    print(f"  baseline A  eventsourcing events + mapper + insert_events : {library_rate:10,.0f} events/s")
    print(f"  baseline B  insert_events of pre-serialized bytes         : {raw_rate:10,.0f} events/s")
    print(f"  ours        rules + state + our mapper + insert_events    : {ours_rate:10,.0f} facts/s")
    print(f"  ratio ours/A = {statistics.median(ratios):.2f}  (rounds {ratios[0]:.2f}-{ratios[-1]:.2f}; goal >= 0.70)")
    best = max(o for o, _ in rounds) / max(a for _, a in rounds)
    print(f"  ratio of the best rounds = {best:.2f}  (each side's fastest round: the least disturbed by other work)")
    print(f"  ratio ours/B = {ours_rate / raw_rate:.2f}  (lower bound: B does no work but the write)")
    print(f"  state snapshots stored by the snapshotter (by the end of the timed writes, once it was done), by round: "
          f"{SNAPSHOTS_DURING}")
    plain = sorted(w / a for w, (_, a) in zip(without, rounds, strict=True))
    print(f"  without state snapshots: {statistics.median(without):,.0f} facts/s, ratio /A = "
          f"{statistics.median(plain):.2f} (rounds {plain[0]:.2f}-{plain[-1]:.2f}); with / without = "
          f"{ours_rate / statistics.median(without):.2f}")


if __name__ == "__main__":
    main()
