"""Benchmark: finding entities by name (domain/entity_names.py) among generated entities, against a named
baseline in the same run.

1. The index: p50/p95 of `EntityNames.find` for four kinds of query, mixed: an exact Latin label, a Chinese
   alias, the start of a name, and a name with one typo. Goal (issue 31): p95 <= 5 ms at 100,000 entities.
2. Baseline: a linear scan of every normalized name per query (equality, prefix, word, then one edit by the
   same check), the way `domain/resolution.py`'s `NameIndex.fuzzy` looks at every name.
3. Build time and the index's entries per entity.

Sizes: NOUMENA_BENCH_ENTITIES (default 100000), NOUMENA_BENCH_QUERIES (default 400),
NOUMENA_BENCH_BASELINE_QUERIES (default 20).
"""

from __future__ import annotations

import gc
import os
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from domain.entity_names import EntityNames, NamedEntity, _edit_distance_at_most_one, words_of  # noqa: E402
from domain.resolution import normalize  # noqa: E402

ENTITIES = int(os.environ.get("NOUMENA_BENCH_ENTITIES", "100000"))
QUERIES = int(os.environ.get("NOUMENA_BENCH_QUERIES", "400"))
BASELINE_QUERIES = int(os.environ.get("NOUMENA_BENCH_BASELINE_QUERIES", "20"))

SYLLABLES = ("wang li zhang liu chen yang zhao huang zhou wu xu sun hu zhu gao lin he guo ma luo liang song zheng"
             " xie han tang feng yu dong xiao cheng cao yuan deng fu shen zeng peng lu su jiang cai jia ding wei"
             " xue ye yan pan du dai xia zhong tian ren fan fang shi yao tan liao zou xiong jin kong bai qiu qin"
             " jiang yin lei min hao jun fei ting an anna john mary mark ella noah liam ivan olga").split()
SURNAMES = ("王李张刘陈杨赵黄周吴徐孙胡朱高林何郭马罗梁宋郑谢韩唐冯于董萧程曹袁邓许傅沈曾彭吕苏卢蒋蔡贾丁魏薛叶阎"
            "余潘杜戴夏钟汪田任姜范方石姚谭廖邹熊金陆郝孔白崔康毛邱秦江史顾侯邵孟龙万段漕钱汤尹黎易常武乔贺赖龚文")
GIVEN = "伟芳娜敏静丽强磊军洋勇艳杰娟涛明超秀霞平刚桂英华玉兰萍红梅鹏飞宇浩凯健俊帆帅旭宁龙林欣"
TITLES = ("总", "经理", "老师", "工", "姐", "哥")


def generate(count: int, rng: random.Random) -> list[NamedEntity]:
    entities = []
    for i in range(count):
        first, last = rng.choice(SYLLABLES), rng.choice(SYLLABLES)
        surname = rng.choice(SURNAMES)
        chinese = surname + "".join(rng.choice(GIVEN) for _ in range(rng.choice((1, 2))))
        label = f"{first.title()} {last.title()}{'' if i % 3 else f' {rng.choice(SYLLABLES).title()}'}"
        aliases = (chinese, surname + rng.choice(TITLES))
        kind = "person" if i % 5 else rng.choice(("agent", "ticket", "file"))
        entities.append(NamedEntity(f"{kind}:{first}-{last}-{i}", label, aliases))
    return entities


def typo(word: str, rng: random.Random) -> str:
    if len(word) < 4:
        return word
    i = rng.randrange(1, len(word) - 1)
    return word[:i] + word[i + 1] + word[i] + word[i + 2:]


def queries(entities: list[NamedEntity], count: int, rng: random.Random) -> list[str]:
    out = []
    for n in range(count):
        entity = rng.choice(entities)
        kind = n % 4
        if kind == 0:
            out.append(entity.label)
        elif kind == 1:
            out.append(entity.aliases[0])
        elif kind == 2:
            out.append(entity.label[:max(3, len(entity.label) // 2)])
        else:
            words = entity.label.split()
            out.append(" ".join([*words[:1], typo(words[1], rng)]))
    return out


def linear_scan(entities: list[NamedEntity], text: str) -> list[tuple[float, str]]:
    """Baseline: every name of every entity looked at for each query, with the same kinds of match."""
    key = normalize(text)
    best: dict[str, float] = {}
    for entity in entities:
        for name in (entity.label, *entity.aliases, entity.identifier):
            folded = normalize(name)
            score = 0.0
            if folded == key:
                score = 0.98
            elif folded.startswith(key):
                score = 0.85
            elif key in words_of(name):
                score = 0.75
            elif len(key) >= 3 and _edit_distance_at_most_one(key, folded):
                score = 0.5
            if score > best.get(entity.ref, 0.0):
                best[entity.ref] = score
    return sorted(((s, r) for r, s in best.items() if s > 0), reverse=True)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def main() -> None:
    gc.set_threshold(5_000, 10, 100)  # as infra/bootstrap.py sets it for a served process
    rng = random.Random(31)
    entities = generate(ENTITIES, rng)
    started = time.perf_counter()
    index = EntityNames(entities)
    build = time.perf_counter() - started
    asked = queries(entities, QUERIES, rng)
    index.find(asked[0])  # (sorts the name lists once)
    times, cpu, empty = [], [], 0
    for text in asked:
        c0, t0 = time.thread_time(), time.perf_counter()
        found, _ = index.find(text, 10)
        times.append((time.perf_counter() - t0) * 1000)
        cpu.append((time.thread_time() - c0) * 1000)
        empty += not found
    baseline = []
    for text in asked[:BASELINE_QUERIES]:
        t0 = time.perf_counter()
        linear_scan(entities, text)
        baseline.append((time.perf_counter() - t0) * 1000)
    p50, p95 = statistics.median(times), percentile(times, 0.95)
    b50 = statistics.median(baseline)
    print(f"entities {ENTITIES:,}, queries {QUERIES} (exact label, Chinese alias, prefix, typo), build {build:.1f} s,"
          f" {len(index._deleted):,} deletion keys")
    print(f"index:    p50 {p50:.3f} ms  p95 {p95:.3f} ms  (goal p95 <= 5 ms: {'met' if p95 <= 5 else 'NOT met'});"
          f" {empty} queries found nothing")
    print(f"          CPU time of the querying thread: p50 {statistics.median(cpu):.3f} ms"
          f"  p95 {percentile(cpu, 0.95):.3f} ms (what a loaded machine's wall clock hides)")
    print(f"baseline: linear scan p50 {b50:.1f} ms over {len(baseline)} queries; index {b50 / p50:.0f}x faster at p50")


if __name__ == "__main__":
    main()
