"""Retrieval quality of recall by content on LoCoMo, with same-run baselines: `make eval` or

    python tests/benchmarks/eval_locomo.py --data DIR [--conversations ID ...] [--embedder wordllama|none]
        [--no-ablations] [--set NAME=VALUE ...]

LoCoMo (Maharana et al., ACL 2024; CC BY-NC 4.0, so the project never vendors it): long conversations between
two people, with questions annotated with the turns that answer them. Get it from snap-research/locomo
(`data/locomo10.json`, or the per-conversation files of `locomo10_v2`); the team's development split is
`../shared/data/locomo-dev/` (5 conversations). Use nothing else of LoCoMo to tune.

How a conversation is imported (through the wire format, as a service would send it; docs/search.md):
- tenant `locomo-<id>`; `agent:companion` (the agent that listened); `person:<speaker>` for both speakers;
- each LoCoMo session N: a main session `s<N>` of the companion serving speaker A, `occurred_at` = the session's
  date; its turns as messages (`message_id` = the turn's `dia_id`, content `Speaker: text` plus the shared
  image's caption); its observations as facts `person:<speaker> -observed-> memory:<id>-<N>-<k>` (the memory's
  label is the observation) in speaker A's scope (the person the session serves: a fact's search document takes
  the words of the turns it cites only when its viewers may read them), whose provenance holds the evidence
  turns; its summary as the session's compaction;
- and again **messages only** (tenant `locomo-<id>-turns`): the turns alone, no observations or summaries (what a
  deployment that extracts nothing holds).

What is asked: every question of categories 1-4 (5 is adversarial: no evidence) through
- `search_for(agent:companion, question, serving=person:<A>)`: recall@5/10/20 (a hit: a returned item's
  `message_ids` hold an evidence turn: a fact's provenance, a turn and its window), per category and overall, for
  both imports, and latency p50/p95;
- the same with each signal off in turn (ABLATIONS: its weight 0, or turns not searched), R@5/R@10 and the change;
- `context_for` on a live main session of the companion serving A, with the question as the message: the share of
  questions whose block shows a fact carrying an evidence turn or a recalled turn (or its window) that is one, and
  how many facts it names; and the same share
  for the perspective alone (the block without its "Recalled for this request" part: what the ranking by
  activation shows, without recall by content).
Baselines, same run, same questions: BM25 (bm25s, English stopwords) over raw turns and over observations, and
wordllama cosine over observations.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
KS = (5, 10, 20)
AGENT = "agent:companion"
WHERE = ("LoCoMo is not vendored (CC BY-NC 4.0). Download data/locomo10.json from github.com/snap-research/locomo "
         "and pass --data with the folder of per-conversation JSON files, or the team's ../shared/data/locomo-dev")


def slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "someone"


def session_date(text: str) -> datetime:
    """'1:56 pm on 8 May, 2023' -> an aware datetime (UTC)."""
    return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)


def evidence_ids(value: Any) -> list[str]:
    items = value if isinstance(value, list) else [value]
    return [str(item).strip() for item in items if str(item).strip()]


def sessions_of(conversation: dict[str, Any]) -> list[int]:
    return sorted(int(m.group(1)) for key in conversation if (m := re.fullmatch(r"session_(\d+)", key)))


def turn_text(turn: dict[str, Any]) -> str:
    text = f"{turn['speaker']}: {turn['text']}"
    return text + (f" [shares an image: {turn['blip_caption']}]" if turn.get("blip_caption") else "")


def wire_records(cid: str, conversation: dict[str, Any], messages_only: bool = False
                 ) -> tuple[str, list[dict[str, Any]]]:
    """The conversation as wire envelopes (see the module docstring); `messages_only`: its turns alone, no
    observations or summaries (what a deployment that extracts nothing holds)."""
    tenant = f"locomo-{slug(cid)}" + ("-turns" if messages_only else "")
    a, b = conversation["speaker_a"], conversation["speaker_b"]
    records: list[dict[str, Any]] = []

    def add(kind: str, payload: dict[str, Any], occurred: datetime | None = None) -> None:
        record = {"event_id": f"{tenant}-{len(records)}", "tenant": tenant, "type": kind, "payload": payload}
        if occurred is not None:
            record["occurred_at"] = occurred.isoformat()
        records.append(record)

    add("entity.registered", {"ref": AGENT, "label": "companion"})
    for speaker in (a, b):
        add("entity.registered", {"ref": f"person:{slug(speaker)}", "label": speaker})
    for n in sessions_of(conversation):
        when = session_date(conversation[f"session_{n}_date_time"])
        sid = f"s{n}"
        add("session.started", {"session_id": sid, "agent": AGENT, "serving": f"person:{slug(a)}"}, when)
        turns = conversation[f"session_{n}"]
        for turn in turns:
            add("message.appended", {"session_id": sid, "message_id": turn["dia_id"], "role": "user",
                                     "content": turn_text(turn)}, when)
        observations = {} if messages_only else conversation.get(f"session_{n}_observation") or {}
        k = 0
        for speaker, items in observations.items():
            for text, evidence in items:
                k += 1
                memory = f"memory:{slug(cid)}-{n}-{k}"
                add("entity.registered", {"ref": memory, "label": text[:500]})
                add("fact.asserted", {
                    "subject": f"person:{slug(speaker)}", "relation": "observed", "object": memory,
                    "scope": f"person:{slug(a)}", "valid_from": when.isoformat(),
                    "source": {"session_id": sid, "message_ids": evidence_ids(evidence),
                               "actor": "locomo-observations"}}, when)
        summary = conversation.get(f"session_{n}_summary")
        if summary and turns and not messages_only:
            add("session.compacted", {"session_id": sid, "through_message_id": turns[-1]["dia_id"],
                                      "summary": summary[:50_000]}, when)
        add("session.ended", {"session_id": sid}, when)
    return tenant, records


def questions_of(conversation: dict[str, Any]) -> list[dict[str, Any]]:
    return [q for q in conversation["qa"] if q.get("category") in CATEGORIES and evidence_ids(q.get("evidence"))]


class Tally:
    """Hits per method, k and category."""

    def __init__(self) -> None:
        self.hits: dict[tuple[str, int, int], list[bool]] = defaultdict(list)

    def add(self, method: str, category: int, ranked_provenance: Sequence[Sequence[str]], evidence: set[str]
            ) -> None:
        for k in KS:
            self.hits[(method, k, category)].append(any(evidence & set(p) for p in ranked_provenance[:k]))

    def recall(self, method: str, k: int, category: int | None = None) -> float:
        values = [v for (m, kk, c), vs in self.hits.items() if m == method and kk == k
                  and (category is None or c == category) for v in vs]
        return sum(values) / len(values) if values else float("nan")


def baselines(conversation: dict[str, Any], questions: list[dict[str, Any]], tally: Tally,
              embed: Callable[[list[str]], Any] | None) -> None:
    import bm25s
    import numpy as np

    turns = [(t["dia_id"], turn_text(t)) for n in sessions_of(conversation) for t in conversation[f"session_{n}"]]
    observations = [(text, evidence_ids(ev)) for key, value in conversation.items()
                    if key.endswith("_observation") for items in value.values() for text, ev in items]
    texts = [q["question"] for q in questions]
    for method, units, provenance in (
            ("BM25 over raw turns", [t for _, t in turns], [[i] for i, _ in turns]),
            ("BM25 over observations", [t for t, _ in observations], [e for _, e in observations])):
        retriever = bm25s.BM25()
        retriever.index(bm25s.tokenize(units, stopwords="en", show_progress=False), show_progress=False)
        found, _scores = retriever.retrieve(bm25s.tokenize(texts, stopwords="en", show_progress=False),
                                            k=min(max(KS), len(units)), show_progress=False, n_threads=1)
        for q, row in zip(questions, found, strict=True):
            tally.add(method, q["category"], [provenance[int(d)] for d in row], set(evidence_ids(q["evidence"])))
    if embed is not None:
        docs = np.asarray(embed([t for t, _ in observations]))
        queries = np.asarray(embed(texts))
        for q, sims in zip(questions, queries @ docs.T, strict=True):
            order = np.argsort(-sims)[: max(KS)]
            tally.add("wordllama over observations", q["category"], [observations[int(d)][1] for d in order],
                      set(evidence_ids(q["evidence"])))


ABLATIONS = {
    "lexical": {"lexical_weight": 0.0}, "semantic": {"semantic_weight": 0.0},
    "activation": {"activation_weight": 0.0}, "recency": {"recency_weight": 0.0},
    "context": {"context_weight": 0.0}, "session": {"session_weight": 0.0}, "entity": {"entity_weight": 0.0},
    "names": {"name_weight": 1.0},
    "function words": {"function_weight": 1.0}, "coverage": {"coverage_power": 0.0},
    "time": {"time_weight": 0.0}, "window": {"window_before": 0, "window_after": 0}, "turns": {"turns": False},
    "shown facts last": {"shown_facts_last": False},
}
"""Each signal off in turn (its weight 0, or turns not searched), the rest as configured."""
OURS, MESSAGES_ONLY = "noumena search", "noumena search, messages only"


def _import(noumena: Any, searches: Any, tenant: str, records: list[dict[str, Any]], name: str) -> bool:
    noumena.service.execute(_create_tenant(tenant))
    for at in range(0, len(records), 500):
        result = noumena.application.ingestor.ingest(records[at: at + 500])
        if result.rejected:
            print(f"{name}: rejected {result.rejected[0]}", file=sys.stderr)
            return False
    searches.index(tenant)
    return True


def evaluate(data: Path, ids: Sequence[str] | None, embedder_name: str, ablations: bool = True,
             overrides: dict[str, Any] | None = None) -> int:
    logging.disable(logging.INFO)
    files = sorted(data.glob("*.json"))
    if ids:
        files = [f for f in files if f.stem in set(ids)]
    if not files:
        print(f"no conversation files in {data}. {WHERE}", file=sys.stderr)
        return 2
    from domain.commands import StartSession
    from infra.bootstrap import bootstrap
    from infra.settings import Settings
    from projections.contexts import Contexts
    from projections.perspectives import Perspectives
    from projections.searches import Searches

    embedder = None
    if embedder_name == "wordllama":
        from infra.adapters.embedders import WordLlamaEmbedder

        embedder = WordLlamaEmbedder()
    tally = Tally()
    latencies: list[float] = []
    context_hits: list[bool] = []
    context_facts: list[int] = []
    perspective_hits: list[bool] = []
    with tempfile.TemporaryDirectory(prefix="noumena-locomo-") as home_dir:
        home = Path(home_dir)
        noumena = bootstrap(Settings(home=home, encrypt_content=False))
        try:
            perspectives = Perspectives(noumena.log, lambda: datetime.now(UTC))
            searches = Searches(perspectives, lambda: datetime.now(UTC), embedder=embedder)
            searches.parameters = configured = searches.parameters.model_copy(update=overrides or {})
            contexts = Contexts(perspectives, noumena.service, noumena.log, lambda: datetime.now(UTC),
                                searches=searches)
            for path in files:
                conversation = json.loads(path.read_text(encoding="utf-8"))
                tenant, records = wire_records(path.stem, conversation)
                turns_tenant, turn_records = wire_records(path.stem, conversation, messages_only=True)
                started = time.perf_counter()
                if not (_import(noumena, searches, tenant, records, path.name)
                        and _import(noumena, searches, turns_tenant, turn_records, path.name)):
                    return 1
                serving = f"person:{slug(conversation['speaker_a'])}"
                ask = "ask"
                noumena.service.execute(StartSession(tenant=tenant, session_id=ask, agent=AGENT, serving=serving))
                questions = questions_of(conversation)
                print(f"{path.name}: {len(records)} records ({len(turn_records)} messages only), {len(questions)} "
                      f"questions, imported and indexed in {time.perf_counter() - started:.1f} s", file=sys.stderr)
                for q in questions:
                    evidence = set(evidence_ids(q["evidence"]))
                    t0 = time.perf_counter()
                    answer = searches.search_for(tenant, AGENT, q["question"], serving=serving, k=max(KS))
                    latencies.append((time.perf_counter() - t0) * 1000)
                    tally.add(OURS, q["category"], [i.message_ids for i in answer.items], evidence)
                    only = searches.search_for(turns_tenant, AGENT, q["question"], serving=serving, k=max(KS))
                    tally.add(MESSAGES_ONLY, q["category"], [i.message_ids for i in only.items], evidence)
                    for name, change in (ABLATIONS.items() if ablations else ()):
                        searches.parameters = configured.model_copy(update=change)
                        try:
                            for method, where in ((f"{OURS} without {name}", tenant),
                                                  (f"{MESSAGES_ONLY} without {name}", turns_tenant)):
                                off = searches.search_for(where, AGENT, q["question"], serving=serving, k=max(KS))
                                tally.add(method, q["category"], [i.message_ids for i in off.items], evidence)
                        finally:
                            searches.parameters = configured
                    context = contexts.context_for(tenant, ask, q["question"])
                    shown = context_fact_ids(context)
                    provenance = searches.provenance(tenant, shown)
                    context_hits.append(any(evidence & set(m) for m in provenance)
                                        or bool(evidence & set(context_turn_ids(context))))
                    context_facts.append(len(shown))
                    alone = searches.provenance(tenant, context_fact_ids(context, recalled=False))
                    perspective_hits.append(any(evidence & set(m) for m in alone))
                baselines(conversation, questions, tally, embedder.embed if embedder is not None else None)
        finally:
            noumena.close()
    report(tally, latencies, context_hits, context_facts, perspective_hits)
    return 0


def _create_tenant(tenant: str) -> Any:
    from domain.commands import CreateTenant

    return CreateTenant(tenant=tenant)


def context_fact_ids(context: Any, recalled: bool = True) -> list[str]:
    """The facts a context block shows by name: the fact ids of its lines that name a fact (`[#...]`), not the
    "N more about" count lines. `recalled=False`: without the lines under "Recalled for this request" (the
    perspective alone: what activation ranks, not what recall by content found)."""
    from domain.context.rendering import RECALLED_HEADING

    seen: dict[str, None] = {}
    for block in context.blocks:
        inside_recalled = False
        for line in block.lines:
            if line.text.startswith("#"):
                inside_recalled = line.text.strip() == RECALLED_HEADING
            if "[#" in line.text and (recalled or not inside_recalled):
                for fact_id in line.fact_ids:
                    seen[fact_id] = None
    return list(seen)


def context_turn_ids(context: Any) -> list[str]:
    """The messages a context block shows as recalled turns (lines that carry message ids and name no fact)."""
    return [m for block in context.blocks if block.role.value == "perspective" for line in block.lines
            if not line.fact_ids for m in line.message_ids]


def report(tally: Tally, latencies: list[float], context_hits: list[bool], context_facts: list[int],
           perspective_hits: list[bool]) -> None:
    methods = list(dict.fromkeys(m for m, _, _ in tally.hits))
    ablated = [m for m in methods if " without " in m]
    methods = [m for m in methods if m not in ablated]
    n = len([v for (m, k, _c), vs in tally.hits.items() if m == methods[0] and k == KS[0] for v in vs])
    print(f"\nLoCoMo retrieval recall, {n} questions (categories 1-4); a hit: an item's provenance holds an"
          " evidence turn\n")
    print("| method | questions | " + " | ".join(f"R@{k}" for k in KS) + " |")
    print("|" + " --- |" * (2 + len(KS)))
    for method in methods:
        for category, name in ((None, "all"), *CATEGORIES.items()):
            count = len(tally.hits.get((method, KS[0], category), [])) if category is not None else n
            if not count:
                continue
            cells = [f"{tally.recall(method, k, category):.3f}" for k in KS]
            print(f"| {method} | {name} ({count}) | " + " | ".join(cells) + " |")
    others = [m for m in methods if not m.startswith("noumena")]
    for k in (5, 10):
        best = max(others, key=lambda m: tally.recall(m, k)) if others else None
        if best is not None:
            print(f"\nR@{k}: search {tally.recall(OURS, k):.3f} vs best baseline ({best}) "
                  f"{tally.recall(best, k):.3f}: {tally.recall(OURS, k) - tally.recall(best, k):+.3f}", end="")
    print()
    turns_baseline = "BM25 over raw turns"
    if (MESSAGES_ONLY, 10, 1) in tally.hits or any(m == MESSAGES_ONLY for m in methods):
        print(f"messages only, R@10: search {tally.recall(MESSAGES_ONLY, 10):.3f} vs {turns_baseline} "
              f"{tally.recall(turns_baseline, 10):.3f}: "
              f"{tally.recall(MESSAGES_ONLY, 10) - tally.recall(turns_baseline, 10):+.3f}")
    if ablated:
        print("\nEach signal off (R@5 / R@10, and the change from all signals on):\n")
        print("| signal off | import | R@5 | R@10 | change R@5 | change R@10 |")
        print("| --- | --- | --- | --- | --- | --- |")
        for method in ablated:
            base, _, signal = method.partition(" without ")
            r5, r10 = tally.recall(method, 5), tally.recall(method, 10)
            label = "messages only" if base == MESSAGES_ONLY else "full"
            print(f"| {signal} | {label} | {r5:.3f} | {r10:.3f} | {r5 - tally.recall(base, 5):+.3f} | "
                  f"{r10 - tally.recall(base, 10):+.3f} |")
    if latencies:
        ordered = sorted(latencies)
        print(f"\nsearch latency (k=20, in process): p50 {statistics.median(ordered):.1f} ms, "
              f"p95 {ordered[int(0.95 * (len(ordered) - 1))]:.1f} ms")
    if context_hits:
        print(f"context_for with the question as message: evidence shown (a named fact or a recalled turn carrying "
              f"an evidence turn) for {sum(context_hits) / len(context_hits):.3f} of questions; facts named: mean "
              f"{statistics.mean(context_facts):.1f}, median {statistics.median(context_facts):.0f}, "
              f"max {max(context_facts)}")
    if perspective_hits:
        print(f"the perspective alone (the block without \"Recalled for this request\"): evidence-carrying fact "
              f"shown for {sum(perspective_hits) / len(perspective_hits):.3f} of questions")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=False, help="folder of LoCoMo conversation JSON files")
    parser.add_argument("--conversations", nargs="*", help="conversation ids (file stems) to evaluate")
    parser.add_argument("--embedder", choices=("wordllama", "none"), default="wordllama")
    parser.add_argument("--no-ablations", action="store_true", help="skip the table of each signal off")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="a search parameter other than its default (e.g. context_weight=0.2)")
    args = parser.parse_args(argv)
    if args.data is None or not args.data.is_dir():
        print(WHERE, file=sys.stderr)
        return 2
    overrides = {name: json.loads(value) for name, _, value in (item.partition("=") for item in args.set)}
    return evaluate(args.data, args.conversations, args.embedder, ablations=not args.no_ablations,
                    overrides=overrides)


if __name__ == "__main__":
    sys.exit(main())
