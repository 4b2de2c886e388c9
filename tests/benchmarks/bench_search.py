"""Search at scale, against the perspective walk measured in the same run (`make bench`).

The organization of bench_perspective.py (100k entities, 1M facts by default; NOUMENA_BENCH_SEARCH_FACTS to
change) with a reason of six words per fact drawn from a 20k-word vocabulary (Zipf, exponent 1.3), loaded in bulk;
the search index is built from the perspective index (statements: labels, relation, reason), plus as many turns as
facts (NOUMENA_BENCH_SEARCH_TURNS to change): messages of twelve words from the same law, spread over the
organization's 1,000 sessions; embedded with wordllama unless NOUMENA_EMBEDDER=none. Prints:
- build time (terms, impact orders of the long postings, vectors) and the index's bytes per document (fact or
  turn), beside the perspective index's per fact (the baseline);
- in-process search p50/p95, wall and CPU (k = 10, three query words drawn from the same law, random
  viewpoints, every other one a session's own agent and person, so that its turns are searched too) and, same
  viewpoints, the perspective walk's p50/p95: search / walk is the ratio (a search includes one walk, for
  activation); and the same searches without the session signal (`session_weight` 0), alternating with them, for
  what scoring the viewer's sessions as wholes costs.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("NOUMENA_BENCH_FACTS", os.environ.get("NOUMENA_BENCH_SEARCH_FACTS", "1000000"))

import numpy as np  # noqa: E402
import polars as pl  # noqa: E402

from domain.search import DEFAULT_SEARCH_PARAMETERS  # noqa: E402
from projections.perspective_load import from_frames  # noqa: E402
from projections.search_index import SearchIndex  # noqa: E402
from projections.search_text import Analyzer  # noqa: E402
from tests.benchmarks.bench_perspective import NOW, generate, viewpoints  # noqa: E402

QUERIES = 300
VOCABULARY = 20_000


def words(rng: np.random.Generator, n: int, per: int) -> list[str]:
    """`per` words each, drawn from a Zipf law (exponent 1.3) truncated to the vocabulary. (Until 2026-12-02 the
    draws beyond the vocabulary were clipped to its last word, which so became a word in a quarter of the facts.)"""
    vocabulary = np.array([f"w{k}" for k in range(VOCABULARY)], dtype=object)
    weights = np.arange(1, VOCABULARY + 1, dtype=np.float64) ** -1.3
    picks = rng.choice(VOCABULARY, size=(n, per), p=weights / weights.sum())
    return [" ".join(row) for row in vocabulary[picks].tolist()]


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    from infra.adapters.embedders import embedder_from
    from infra.settings import Settings
    from projections.perspectives import Perspectives
    from projections.searches import Searches

    rng = np.random.default_rng(3)
    entities, facts, uses, persons, agents, things, sessions = generate()  # type: ignore[misc]
    facts = facts.with_columns(pl.Series("reason", words(rng, len(facts), 6)))
    t0 = time.perf_counter()
    pindex = from_frames("bench", entities, facts, sessions, None, uses, position=1, clock=NOW)
    p_bytes = sum(pindex.nbytes().values())
    embedder = embedder_from(Settings())
    index = SearchIndex("bench", Analyzer(), embedder)
    t1 = time.perf_counter()
    index.sync(pindex)
    n_turns = int(os.environ.get("NOUMENA_BENCH_SEARCH_TURNS", str(pindex.fact_count)))
    session_ids = sessions["session_id"].to_list()
    said_at = datetime.fromtimestamp(NOW, UTC).isoformat()
    for k, text in enumerate(words(rng, n_turns, 12)):
        said = {"session_id": session_ids[k % len(session_ids)], "message_id": f"t{k}", "role": "user",
                "recorded_at": said_at}
        index.apply(pindex, 1, "message.appended", said | {"content": text})
    t2 = time.perf_counter()
    index.order_postings()
    t3 = time.perf_counter()
    index.flush()
    t4 = time.perf_counter()
    n = pindex.fact_count
    print(f"{n:,} facts and {n_turns:,} turns: perspective index {t1 - t0:.1f} s, search terms {t2 - t1:.1f} s, "
          "impact orders"
          f" {t3 - t2:.1f} s, vectors {t4 - t3:.1f} s ({embedder.name if embedder else 'no embedder'})")
    s_bytes = index.nbytes()
    texts = index.messages_nbytes()
    print(f"memory per document: search index {s_bytes / (n + n_turns):.0f} B (facts and turns; of which the message "
          f"texts kept {texts / (n + n_turns):.0f} B) on top of the perspective index's {p_bytes / n:.0f} B per fact"
          " (goal <= 600 B)")

    class _Fixed(Perspectives):
        def index(self, tenant: str):  # type: ignore[no-untyped-def]
            return pindex

    now = datetime.fromtimestamp(NOW, UTC)
    perspectives = _Fixed(None, lambda: now)  # type: ignore[arg-type]
    searches = Searches(perspectives, lambda: now, embedder=embedder)  # type: ignore[arg-type]
    searches._indexes["bench"] = index
    views = viewpoints(persons, agents, things, QUERIES)
    owners = sessions.rows()
    views = [view if k % 2 else type(view)(owners[k % len(owners)][1], owners[k % len(owners)][2], view.focus)
             for k, view in enumerate(views)]
    queries = words(rng, QUERIES, 3)
    walk_ms, search_ms, search_cpu_ms, unrouted_ms = [], [], [], []
    unrouted = DEFAULT_SEARCH_PARAMETERS.model_copy(update={"session_weight": 0.0})
    for k, (view, query) in enumerate(zip(views, queries, strict=True)):
        started = time.perf_counter()
        pindex.walk(view, perspectives.parameters, NOW)
        walk_ms.append((time.perf_counter() - started) * 1000)
        # the same search without the session signal (its sessions' BM25), the order alternating per query
        for routed in ((True, False) if k % 2 else (False, True)):
            searches.parameters = DEFAULT_SEARCH_PARAMETERS if routed else unrouted
            started, cpu = time.perf_counter(), time.process_time()
            searches.search_for("bench", view.agent, query, serving=view.serving,
                                k=DEFAULT_SEARCH_PARAMETERS.k)
            if routed:
                search_ms.append((time.perf_counter() - started) * 1000)
                search_cpu_ms.append((time.process_time() - cpu) * 1000)
            else:
                unrouted_ms.append((time.perf_counter() - started) * 1000)
    searches.parameters = DEFAULT_SEARCH_PARAMETERS
    print(f"walk (baseline):  p50 {statistics.median(walk_ms):.2f} ms, p95 {pct(walk_ms, 0.95):.2f} ms")
    print(f"search (k=10):    p50 {statistics.median(search_ms):.2f} ms, p95 {pct(search_ms, 0.95):.2f} ms"
          f" (goal <= 10 ms); search / walk at p95: {pct(search_ms, 0.95) / pct(walk_ms, 0.95):.1f}x")
    print(f"without the session signal (same queries, alternating): p50 {statistics.median(unrouted_ms):.2f} ms, "
          f"p95 {pct(unrouted_ms, 0.95):.2f} ms; with / without at p95: "
          f"{pct(search_ms, 0.95) / pct(unrouted_ms, 0.95):.2f}x")
    print(f"search CPU time:  p50 {statistics.median(search_cpu_ms):.2f} ms, p95 {pct(search_cpu_ms, 0.95):.2f} ms;"
          f" load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
