"""The best BM25 matches a viewer may see, without scoring every document that holds a common word.

BM25 (Lucene's form, as `SearchIndex.bm25` computes it): a query term t adds w_t · idf_t · tf / (tf + k1 · (1 − b +
b · len / avg)) to each document holding it. Scoring every posting of the query's terms costs as much as those
terms have documents: at a million facts a word found in half of them costs tens of milliseconds. `top_matches`
returns the same best `limit` documents among those `allowed` as scoring everything would, by the threshold
algorithm over impact-ordered postings:

- a term with few documents, and the documents added to a long term since it was last ordered (its tail), are
  scored in full;
- a long term's documents are also kept in impact order (`ImpactOrder`): grouped by tf (1, 2, 3, 4 and more),
  shortest first within a group, so along a group the term's contribution can only fall, whatever the average
  length has become since;
- documents are read from the long terms' groups a block at a time, the group with the highest bound first; each
  document read is scored in full (a binary search in every term's postings) and checked against `allowed`;
  reading stops when the limit-th best allowed score reaches the most an unread document could still score: the
  sum over long terms of the best bound left in their groups (an unread document holds no short term: those were
  all read).

When the reading passes a quarter of the query's postings (a viewer who may see few of the matches), the rest is
scored in full, as is a query whose postings are few. Either way the answer is the full scoring's; a property test
(tests/test_search.py) compares them on random corpora.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

Allowed = Callable[[np.ndarray], np.ndarray]
"""A bool per document (int64 array): may the viewer see it."""

LONG_POSTING = 4096
"""A term with more documents than this is read in impact order; shorter ones are scored in full."""
SCORE_ALL_BELOW = 20_000
"""A query whose terms hold fewer postings than this is scored in full (it is cheaper than ordering)."""
FIRST_BLOCK = 512
TF_GROUPS = 4
"""tf 1, 2, 3, and 4 or more."""


@dataclass(frozen=True)
class ImpactOrder:
    """A long posting's first `size` entries in impact order: by tf group (highest first), shortest first within."""

    size: int
    positions: np.ndarray
    """int32 positions into the posting."""
    starts: np.ndarray
    """Where each group begins in `positions`, and the end: len(groups) + 1 entries."""
    tf_max: np.ndarray
    """The largest tf in each group."""

    @property
    def nbytes(self) -> int:
        return self.positions.nbytes + self.starts.nbytes + self.tf_max.nbytes


def impact_order(docs: np.ndarray, tfs: np.ndarray, lengths: np.ndarray) -> ImpactOrder:
    group = np.minimum(tfs, TF_GROUPS).astype(np.int64)
    positions = np.lexsort((lengths[docs], -group)).astype(np.int32)
    ordered_groups = group[positions]
    boundaries = np.flatnonzero(ordered_groups[1:] != ordered_groups[:-1]) + 1
    starts = np.concatenate([[0], boundaries, [len(positions)]]).astype(np.int64)
    tf_max = np.array([int(tfs[positions[starts[g]:starts[g + 1]]].max()) for g in range(len(starts) - 1)],
                      dtype=np.float64)
    return ImpactOrder(len(docs), positions, starts, tf_max)


def needs_ordering(order: ImpactOrder | None, posting_size: int) -> bool:
    """Order again once the unordered tail passes a quarter of the ordered part (amortised: each entry is sorted a
    bounded number of times as the posting grows)."""
    return order is None or posting_size - order.size > max(LONG_POSTING, order.size // 4)


class Marks:
    """Which documents one reading has seen: a stamp per document, so nothing is cleared between readings (a
    document counts as seen when it holds this reading's stamp). Held by the index, used by one reading at a time
    (searches of a tenant are serialized)."""

    def __init__(self) -> None:
        self.stamps = np.zeros(0, dtype=np.uint32)
        self.stamp = 0

    def start(self, n_docs: int) -> int:
        if len(self.stamps) < n_docs:
            grown = np.zeros(max(n_docs, 2 * len(self.stamps)), dtype=np.uint32)
            grown[: len(self.stamps)] = self.stamps
            self.stamps = grown
        self.stamp += 1
        if self.stamp == 2**32 - 1:  # wrapped: begin again from a clean slate
            self.stamps[:] = 0
            self.stamp = 1
        return self.stamp

    @property
    def nbytes(self) -> int:
        return self.stamps.nbytes


@dataclass
class _Term:
    docs: np.ndarray
    tfs: np.ndarray
    factor: float
    """weight (times the term is in the query) · idf."""
    order: ImpactOrder | None = None


def top_matches(terms: Sequence[tuple[array, array, float, ImpactOrder | None]], lengths: np.ndarray,
                average: float, k1: float, b: float, limit: int, allowed: Allowed, marks: Marks, *,
                exact: int | None = None, score_all_below: int = SCORE_ALL_BELOW, first_block: int = FIRST_BLOCK
                ) -> tuple[np.ndarray, np.ndarray]:
    """(documents, scores) of up to `limit` allowed documents, best first: the first `exact` (default: all) are the
    best of all the allowed documents; the rest are the best of those read on the way. `terms`: each query term's
    postings (documents ascending, tfs), w·idf, and its impact order when it is long."""
    exact = limit if exact is None else min(exact, limit)
    prepared = [_Term(np.frombuffer(d, dtype=np.int32), np.frombuffer(t, dtype=np.uint16), f, o)
                for d, t, f, o in terms if len(d)]
    if not prepared:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
    total = sum(len(t.docs) for t in prepared)

    def impact(tf: np.ndarray | float, length: np.ndarray | float) -> np.ndarray | float:
        return tf / (tf + k1 * (1.0 - b + b * length / average))

    def scored(docs: np.ndarray, known: tuple[_Term, np.ndarray] | None = None) -> np.ndarray:
        """Full scores; `known`: a term whose tf of each document is known already (the list they were read from)."""
        out = np.zeros(len(docs), dtype=np.float64)
        for term in prepared:
            if known is not None and term is known[0]:
                out += term.factor * impact(known[1].astype(np.float64), lengths[docs])
                continue
            at = np.searchsorted(term.docs, docs)
            at[at >= len(term.docs)] = 0
            hit = term.docs[at] == docs
            if hit.any():
                tf = term.tfs[at[hit]].astype(np.float64)
                out[hit] += term.factor * impact(tf, lengths[docs[hit]])
        return out

    def best(docs: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        keep = allowed(docs)
        docs, scores = docs[keep], scores[keep]
        if len(docs) > limit:
            chosen = np.argpartition(-scores, limit - 1)[:limit]
            docs, scores = docs[chosen], scores[chosen]
        order = np.lexsort((docs, -scores))
        return docs[order], scores[order]

    def everything() -> tuple[np.ndarray, np.ndarray]:
        docs = np.unique(np.concatenate([t.docs for t in prepared])).astype(np.int64)
        return best(docs, scored(docs))

    long_terms = [t for t in prepared if t.order is not None]
    if total < score_all_below or not long_terms:
        return everything()
    seeds = [t.docs if t.order is None else t.docs[t.order.size:] for t in prepared]
    seen = np.unique(np.concatenate(seeds)).astype(np.int64)
    stamp = marks.start(len(lengths))
    stamps = marks.stamps
    stamps[seen] = stamp
    found, found_scores = best(seen, scored(seen))
    # a cursor per (long term, group): the next position to read in the term's impact order
    cursors = [(term, g, int(term.order.starts[g]), int(term.order.starts[g + 1]))
               for term in long_terms for g in range(len(term.order.starts) - 1)]  # type: ignore[union-attr]
    block = first_block
    read = len(seen)
    while True:
        bounds = []
        ceilings: dict[int, float] = {}
        for term, g, at, end in cursors:
            bound = 0.0
            if at < end:
                first = term.docs[term.order.positions[at]]  # type: ignore[union-attr]
                bound = term.factor * float(impact(term.order.tf_max[g], float(lengths[first])))  # type: ignore[union-attr]
            bounds.append(bound)
            ceilings[id(term)] = max(ceilings.get(id(term), 0.0), bound)
        ceiling = sum(ceilings.values())
        if ceiling <= 0.0 or (len(found) >= exact and float(found_scores[exact - 1]) >= ceiling):
            return found, found_scores
        if read > total // 4:
            return everything()
        k = int(np.argmax(bounds))
        term, g, at, end = cursors[k]
        stop = min(end, at + block)
        cursors[k] = (term, g, stop, end)
        block = min(block * 2, 65_536)
        positions = term.order.positions[at:stop]  # type: ignore[union-attr]
        chunk = term.docs[positions].astype(np.int64)
        fresh = stamps[chunk] != stamp  # a posting holds a document once: no repeats within a chunk
        new = chunk[fresh]
        read += stop - at
        if not len(new):
            continue
        stamps[new] = stamp
        tfs = term.tfs[positions[fresh]]
        ascending = np.argsort(new)  # in document order, the binary searches in the other postings walk forward
        new, tfs = new[ascending], tfs[ascending]
        more, more_scores = best(new, scored(new, (term, tfs)))
        if len(more):
            found, found_scores = best_of(found, found_scores, more, more_scores, limit)


def best_of(a: np.ndarray, a_scores: np.ndarray, b: np.ndarray, b_scores: np.ndarray, limit: int
            ) -> tuple[np.ndarray, np.ndarray]:
    docs, scores = np.concatenate([a, b]), np.concatenate([a_scores, b_scores])
    order = np.lexsort((docs, -scores))[:limit]
    return docs[order], scores[order]


def idf(n_docs: int, df: int) -> float:
    """Lucene's BM25 idf."""
    return math.log(1.0 + (n_docs - df + 0.5) / (df + 0.5))
