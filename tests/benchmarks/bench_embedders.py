"""Benchmark: WordLlamaEmbedder.embed against wordllama's own `embed(texts, norm=True)`, same model, same texts,
same run.

Texts: NOUMENA_BENCH_EMBED_TEXTS (default 5000) generated sentences of 5 to 60 words (English with some Chinese),
and the same with one long message (20,000 words) among them, where padding a batch to its longest text costs
wordllama's own path most. Each measurement alternates the two, NOUMENA_BENCH_EMBED_ROUNDS (default 7) rounds;
printed: texts/s by the fastest and the median round, and the ratio ours / wordllama's (above 1: ours is faster).
Also the time to load the model (once a process).
"""

from __future__ import annotations

import os
import random
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

from infra.adapters.embedders import WordLlamaEmbedder  # noqa: E402

WORDS = ("the invoice payment monthly settlement prefers quarterly report meeting customer order shipped Friday "
         "Caroline adopted a puppy named Oscar last spring and Li wants to pay by card she painted mountains "
         "李总 月结 客户 发货 合同").split()


def corpus(count: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 60))) for _ in range(count)]


def measure(label: str, texts: list[str], ours: WordLlamaEmbedder, theirs: object, rounds: int) -> None:
    ours_times, theirs_times = [], []
    for _ in range(rounds):
        started = time.perf_counter()
        ours.embed(texts)
        ours_times.append(time.perf_counter() - started)
        started = time.perf_counter()
        theirs.embed(texts, norm=True)  # type: ignore[attr-defined]
        theirs_times.append(time.perf_counter() - started)
    for name, times in (("WordLlamaEmbedder", ours_times), ("wordllama embed (baseline)", theirs_times)):
        print(f"  {name:28s} fastest {len(texts) / min(times):9.0f} texts/s, median "
              f"{len(texts) / statistics.median(times):9.0f} texts/s")
    print(f"  ratio ours/baseline: fastest {min(theirs_times) / min(ours_times):.2f}, median "
          f"{statistics.median(theirs_times) / statistics.median(ours_times):.2f}  ({label})")


def main() -> None:
    count = int(os.environ.get("NOUMENA_BENCH_EMBED_TEXTS", "5000"))
    rounds = int(os.environ.get("NOUMENA_BENCH_EMBED_ROUNDS", "7"))
    ours = WordLlamaEmbedder()
    started = time.perf_counter()
    ours.embed(["load"])
    print(f"wordllama l2_supercat 256: model loaded in {time.perf_counter() - started:.2f} s")
    import wordllama

    theirs = wordllama.WordLlama.load(cache_dir=Path(wordllama.__file__).parent, disable_download=True)
    texts = corpus(count)
    print(f"{count} texts of 5-60 words:")
    measure("short texts", texts, ours, theirs, rounds)
    with_long = texts[:]
    with_long[len(with_long) // 2] = " ".join(corpus(1, seed=1)[0] for _ in range(600))[:150_000]
    print(f"the same with one long message ({len(with_long[len(with_long) // 2].split())} words) among them:")
    measure("one long message", with_long, ours, theirs, rounds)


if __name__ == "__main__":
    main()
