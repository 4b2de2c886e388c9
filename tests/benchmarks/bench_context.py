"""Benchmark: `context_for` against `perspective_for` for the same viewer, in the same run.

The organization is the perspective benchmark's generator (tests/benchmarks/bench_perspective.py: persons,
agents with 50 hubs, things, lognormal popularity, org/person/session scopes, invalidated and archived facts,
recalls), written as events to a SQLite event log. On top of it, main sessions: each a non-hub agent serving a
person, with turns that name things and persons, a live worker, 23 compactions with summaries (a summary tree of
two folded nodes and three leaves) and a few hard constraints.

Each query is a message naming a thing and a person to one of those sessions. `context_for` runs (finding the
focus in the message and the turns, selecting constraints, asking the perspective engine, assembling within the
budget), then `perspective_for` for the same agent, person served and focus, with the same budget the context
gave its perspective; the order alternates. Nothing is recorded. Baseline: p95 of `perspective_for`.
Goal: p95 of `context_for` <= 2x the baseline's p95.

Sizes: NOUMENA_BENCH_ENTITIES (default 100000), NOUMENA_BENCH_CONTEXT_FACTS (default 300000 facts: the
ontology service folds every event into Python objects, so the default is a third of the perspective
benchmark's), NOUMENA_BENCH_CONTEXT_QUERIES (default 300), NOUMENA_BENCH_CONTEXT_SESSIONS (default 50).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ["NOUMENA_BENCH_FACTS"] = os.environ.get("NOUMENA_BENCH_CONTEXT_FACTS", "300000")

import bench_perspective as org  # noqa: E402
import numpy as np  # noqa: E402

from api.process_tuning import tune_collector_for_a_long_lived_heap  # noqa: E402
from domain.commands import (  # noqa: E402
    AppendMessage,
    AssertFact,
    CompactSession,
    DispatchWorker,
    ReportWorker,
    StartSession,
)
from domain.entities import EntityRegistered  # noqa: E402
from domain.facts import FactArchived, FactAsserted, FactInvalidated  # noqa: E402
from domain.recalls import FactsRecalled, RecallMode  # noqa: E402
from domain.sessions import SessionKind, SessionStarted  # noqa: E402
from domain.tenants import TenantCreated  # noqa: E402
from domain.values import Provenance  # noqa: E402
from infra.bootstrap import bootstrap  # noqa: E402
from infra.settings import Settings  # noqa: E402
from projections.contexts import Contexts  # noqa: E402
from projections.perspectives import Perspectives  # noqa: E402

QUERIES = int(os.environ.get("NOUMENA_BENCH_CONTEXT_QUERIES", "300"))
SESSIONS = int(os.environ.get("NOUMENA_BENCH_CONTEXT_SESSIONS", "50"))
TENANT = "bench"
NOW = datetime.fromtimestamp(org.NOW, UTC)


def _at(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def org_events() -> tuple[list, list[str], list[str], list[str]]:
    """The generated organization as domain events, in transaction-time order."""
    entities, facts, uses, persons, agents, things, sessions = org.generate()
    start = _at(org.NOW - 400 * 86_400)
    events: list = [TenantCreated(tenant=TENANT, recorded_at=start)]
    for ref, label, hub in entities.iter_rows():
        events.append(EntityRegistered.model_construct(tenant=TENANT, recorded_at=start, event_id=None, ref=ref,
                                                       label=label, aliases=(), hub=hub, needs_review=False))
    for session_id, agent, serving in sessions.iter_rows():
        events.append(SessionStarted.model_construct(
            tenant=TENANT, recorded_at=start, event_id=None, session_id=session_id, agent=agent,
            kind=SessionKind.MAIN, serving=serving, parent_session_id=None, task=None, occurred_at=None))
    provenance = Provenance(actor="bench")
    timed: list[tuple[float, int, object]] = []
    for k, (fact_id, subject, relation, obj, scope, _reason, confidence, status, asserted) in enumerate(
            facts.iter_rows()):
        at = _at(asserted)
        timed.append((asserted, k, FactAsserted.model_construct(
            tenant=TENANT, recorded_at=at, event_id=None, fact_id=fact_id, subject=subject, relation=relation,
            object=obj, scope=scope, reason=None, confidence=float(confidence), valid_from=None, valid_to=None,
            provenance=provenance, supersedes=None)))
        if status == "invalidated":
            timed.append((asserted + 1, k, FactInvalidated.model_construct(
                tenant=TENANT, recorded_at=_at(asserted + 1), event_id=None, fact_id=fact_id,
                reason="benchmark", valid_to=None, superseded_by=None, provenance=provenance)))
        elif status == "archived":
            timed.append((asserted + 1, k, FactArchived.model_construct(
                tenant=TENANT, recorded_at=_at(asserted + 1), event_id=None, fact_id=fact_id, cause="disuse")))
    asserted_at = dict(zip(facts["fact_id"].to_list(), facts["asserted_at"].to_list(), strict=True))
    for k, (agent, fact_id, used_at) in enumerate(uses.iter_rows()):
        used = max(used_at, asserted_at[fact_id] + 2)
        timed.append((used, len(facts) + k, FactsRecalled.model_construct(
            tenant=TENANT, recorded_at=_at(used), event_id=None, agent=agent, fact_ids=(fact_id,),
            mode=RecallMode.USED, perspective_id=None)))
    timed.sort(key=lambda t: (t[0], t[1]))
    events += [event for _at_, _k, event in timed]
    return events, persons, agents, things


def write_log(home: Path, events: list) -> None:
    app = bootstrap(Settings(home=home, event_store="sqlite"))
    log = app.log
    for start in range(0, len(events), 5000):
        log.recorder.insert_events([log.mapper.to_stored(TENANT, i + 1, e)
                                    for i, e in enumerate(events[start:start + 5000], start=start)])
    app.close()


class Clock:
    def __init__(self) -> None:
        self.now = NOW - timedelta(hours=1)

    def __call__(self) -> datetime:
        self.now += timedelta(milliseconds=1)
        return self.now


def add_sessions(app, persons: list[str], agents: list[str], things: list[str]) -> list[str]:  # type: ignore[no-untyped-def]
    """Main sessions of non-hub agents, each with turns, a live worker, 23 compactions and hard constraints."""
    rng = np.random.default_rng(5)
    commands = []
    ids = []
    for k in range(SESSIONS):
        session_id = f"main-{k}"
        agent, person = agents[org.HUBS + k % (len(agents) - org.HUBS)], persons[1000 + k]
        ids.append(session_id)
        commands.append(StartSession(tenant=TENANT, session_id=session_id, agent=agent, serving=person))
        for m in range(10):
            thing, other = things[int(rng.integers(0, len(things)))], persons[int(rng.integers(0, len(persons)))]
            commands.append(AppendMessage(tenant=TENANT, session_id=session_id, message_id=f"m{m}", role="user",
                                          content=f"Turn {m}: what about {thing.split(':')[1]} and "
                                                  f"{other.split(':')[1]}? 还有报价要改。"))
        about = tuple(things[int(rng.integers(0, len(things)))] for _ in range(2))
        commands.append(DispatchWorker(tenant=TENANT, session_id=session_id, worker_session_id=f"w-{k}",
                                       task="a new quote", about=about))
        commands.append(ReportWorker(tenant=TENANT, session_id=f"w-{k}", status="waiting",
                                     summary="draft ready, waiting on freight"))
        for n in range(23):
            commands.append(CompactSession(tenant=TENANT, session_id=session_id, through_message_id="m9",
                                           summary=f"Round {n}: talked about the quote and the contract. Details."))
        commands.append(AssertFact(tenant=TENANT, subject=person, relation="prefers", object=about[0],
                                   reason="said so", scope=person))
        commands.append(AssertFact(tenant=TENANT, subject=agent, relation="must_not", object=about[1],
                                   reason="policy", scope="org"))
    for start in range(0, len(commands), 500):
        result = app.service.execute_batch(commands[start:start + 500], all_or_nothing=True)
        if result.rejected:
            raise RuntimeError(str(result.rejected[0].error))
    return ids


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q))


def main() -> None:
    tune_collector_for_a_long_lived_heap()  # (as the served process does)
    print(f"context benchmark: {org.ENTITIES} entities, {org.FACTS} facts, {SESSIONS} main sessions, "
          f"{QUERIES} queries")
    with tempfile.TemporaryDirectory(prefix="noumena-bench-context-") as tmp:
        home = Path(tmp)
        started = time.perf_counter()
        events, persons, agents, things = org_events()
        write_log(home, events)
        print(f"  {len(events)} events generated and written in {time.perf_counter() - started:.1f} s")
        clock = Clock()
        app = bootstrap(Settings(home=home, event_store="sqlite"), clock=clock)
        started = time.perf_counter()
        app.service.ontology(TENANT)
        print(f"  ontology service folded the log in {time.perf_counter() - started:.1f} s")
        sessions = add_sessions(app, persons, agents, things)
        perspectives = Perspectives(app.log, clock)
        contexts = Contexts(perspectives, app.service, app.log, clock)
        started = time.perf_counter()
        perspectives.catch_up()
        print(f"  perspective index followed the log in {time.perf_counter() - started:.1f} s")
        started = time.perf_counter()
        contexts.context_for(TENANT, sessions[0], "hello")
        print(f"  first context (name and constraint indexes built) in {time.perf_counter() - started:.1f} s")

        rng = np.random.default_rng(9)
        state = app.service.ontology(TENANT)
        queries = []
        for k in range(QUERIES):
            session = state.sessions[sessions[k % len(sessions)]]
            thing, person = things[int(rng.integers(0, len(things)))], persons[int(rng.integers(0, len(persons)))]
            queries.append((session, f"给 {person.split(':')[1]} 再出一版报价, see {thing.split(':')[1]}"))
        for session, message in queries[:20]:  # warm up
            contexts.context_for(TENANT, session.session_id, message)
        context_ms, perspective_ms, tokens, focus_sizes = [], [], [], []
        for k, (session, message) in enumerate(queries):
            # the focus the context finds, so that the perspective is asked for the same viewer (not timed)
            served = contexts.context_for(TENANT, session.session_id, message)
            focus = [f.ref for f in served.focus]
            budget = served.perspective.budget_tokens if served.perspective else 1200
            for which in ((0, 1) if k % 2 == 0 else (1, 0)):
                started = time.perf_counter()
                if which == 0:
                    served = contexts.context_for(TENANT, session.session_id, message)
                    context_ms.append((time.perf_counter() - started) * 1e3)
                else:
                    perspectives.perspective_for(TENANT, session.agent, session.serving, focus,
                                                 budget_tokens=budget)
                    perspective_ms.append((time.perf_counter() - started) * 1e3)
            tokens.append(served.tokens)
            focus_sizes.append(len(focus))
        ratio = pct(context_ms, 95) / pct(perspective_ms, 95)
        print(f"  focus entities per query: median {np.median(focus_sizes):.0f}; block tokens: median "
              f"{np.median(tokens):.0f} of {contexts.parameters.budget_tokens}")
        print(f"  perspective_for (baseline): p50 {pct(perspective_ms, 50):7.2f} ms   p95 "
              f"{pct(perspective_ms, 95):7.2f} ms")
        print(f"  context_for:                p50 {pct(context_ms, 50):7.2f} ms   p95 {pct(context_ms, 95):7.2f} ms")
        print(f"  ratio context_for / perspective_for (p95): {ratio:.2f}x (goal <= 2x: "
              f"{'met' if ratio <= 2 else 'NOT met'})")
        app.close()


if __name__ == "__main__":
    main()
