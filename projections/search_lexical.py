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
- documents are read from the long terms' groups a block at a time: a group that one block reads whole first when
  it is a term's best group left (exhausting it lowers the bound at once), else the group with the highest bound;
  each document read is scored in full (a dense tf array for a very common term, else a binary search in the
  term's postings) and checked against `allowed` when its score could enter the list;
- reading stops when the `exact`-th best allowed score reaches the most an unread document could still score: the
  sum over long terms of the best bound left in their groups (an unread document holds no short term: those were
  all read). Before that, as in MaxScore: the terms whose bounds together stay at or below that score cannot lift
  an unread document above it alone, so the best left must hold one of the others; when those have no more than
  a block left, that rest is read and the answer is complete.

When the reading passes a quarter of the query's postings (a viewer who may see few of the matches), the rest is
scored in full, as is a query whose postings are few. Either way the answer is the full scoring's; a property test
(tests/unit/test_search_lexical.py) compares them on random corpora.
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
DENSE_SHARE = 64
"""A term held by at least one document in this many also keeps its tf per document in a dense array (a byte per
document, while no document holds it 255 times or more), so scoring a document read from another term's list looks
it up directly instead of by a binary search through hundreds of thousands of postings."""


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
    dense: np.ndarray | None = None
    """For a very common term (`DENSE_SHARE`): the tf of every document up to the last ordered one (uint8, 0: not
    held); None otherwise."""

    @property
    def nbytes(self) -> int:
        dense = 0 if self.dense is None else self.dense.nbytes
        return self.positions.nbytes + self.starts.nbytes + self.tf_max.nbytes + dense

    def tfs_of(self, docs: np.ndarray, posting_docs: np.ndarray, posting_tfs: np.ndarray) -> np.ndarray:
        """The tf of each of `docs` (ascending) in this term's posting, 0 where it is not held: looked up in the
        dense array for the ordered part, by binary search in the unordered tail (documents are appended in
        order, so the tail holds only later ones)."""
        assert self.dense is not None
        out = np.zeros(len(docs), dtype=np.uint16)  # a tail's tf may pass 255
        inside = docs < len(self.dense)
        out[inside] = self.dense[docs[inside]]
        if not inside.all() and len(posting_docs) > self.size:
            tail, tail_tfs, later = posting_docs[self.size:], posting_tfs[self.size:], docs[~inside]
            at = np.searchsorted(tail, later)
            at[at >= len(tail)] = 0
            hit = tail[at] == later
            found = np.zeros(len(later), dtype=np.uint16)
            found[hit] = tail_tfs[at[hit]]
            out[~inside] = found
        return out


def impact_order(docs: np.ndarray, tfs: np.ndarray, lengths: np.ndarray, n_docs: int | None = None) -> ImpactOrder:
    """`n_docs`: the documents in the index, to decide whether the term is common enough for a dense tf array."""
    group = np.minimum(tfs, TF_GROUPS).astype(np.int64)
    positions = np.lexsort((lengths[docs], -group)).astype(np.int32)
    ordered_groups = group[positions]
    boundaries = np.flatnonzero(ordered_groups[1:] != ordered_groups[:-1]) + 1
    starts = np.concatenate([[0], boundaries, [len(positions)]]).astype(np.int64)
    tf_max = np.array([int(tfs[positions[starts[g]:starts[g + 1]]].max()) for g in range(len(starts) - 1)],
                      dtype=np.float64)
    dense = None
    if n_docs is not None and len(docs) and len(docs) * DENSE_SHARE >= n_docs and int(tfs.max()) < 255:
        dense = np.zeros(int(docs[-1]) + 1, dtype=np.uint8)
        dense[docs] = tfs
    return ImpactOrder(len(docs), positions, starts, tf_max, dense)


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
            if term.order is not None and term.order.dense is not None:
                tf = term.order.tfs_of(docs, term.docs, term.tfs)
                hit = tf > 0
                if hit.any():
                    out[hit] += term.factor * impact(tf[hit].astype(np.float64), lengths[docs[hit]])
                continue
            at = np.searchsorted(term.docs, docs)
            at[at >= len(term.docs)] = 0
            hit = term.docs[at] == docs
            if hit.any():
                tf = term.tfs[at[hit]].astype(np.float64)
                out[hit] += term.factor * impact(tf, lengths[docs[hit]])
        return out

    def best(docs: np.ndarray, scores: np.ndarray, floor: float | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The best `limit` allowed of `docs`; `floor`: the score a document must reach to enter the list being
        kept (one below it is not asked of `allowed`)."""
        if floor is not None:
            above = scores >= floor
            docs, scores = docs[above], scores[above]
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
    cursors = [_Cursor(term, g, int(term.order.starts[g]), int(term.order.starts[g + 1]))
               for term in long_terms for g in range(len(term.order.starts) - 1)]  # type: ignore[union-attr]
    block = first_block
    read = len(seen)

    def take(cursor: _Cursor, stop: int) -> None:
        """Read the cursor's group up to `stop`: every document not seen yet is scored in full."""
        nonlocal found, found_scores
        term = cursor.term
        positions = term.order.positions[cursor.at:stop]  # type: ignore[union-attr]
        cursor.at = stop
        chunk = term.docs[positions].astype(np.int64)
        fresh = stamps[chunk] != stamp  # a posting holds a document once: no repeats within a chunk
        new = chunk[fresh]
        if not len(new):
            return
        stamps[new] = stamp
        tfs = term.tfs[positions[fresh]]
        ascending = np.argsort(new)  # in document order, the binary searches in the other postings walk forward
        new, tfs = new[ascending], tfs[ascending]
        floor = float(found_scores[limit - 1]) if len(found) >= limit else None
        more, more_scores = best(new, scored(new, (term, tfs)), floor)
        if len(more):
            found, found_scores = best_of(found, found_scores, more, more_scores, limit)

    while True:
        bounds = [cursor.bound(lengths, impact) for cursor in cursors]
        ceilings: dict[int, float] = {}
        for cursor, bound in zip(cursors, bounds, strict=True):
            ceilings[id(cursor.term)] = max(ceilings.get(id(cursor.term), 0.0), bound)
        ceiling = sum(ceilings.values())
        kth = float(found_scores[exact - 1]) if len(found) >= exact else None
        if ceiling <= 0.0 or (kth is not None and kth >= ceiling):
            return found, found_scores
        if kth is not None:
            # an unread document holding only terms whose bounds sum to at most kth cannot pass it: the best left
            # must hold one of the other ("essential") terms, so when those have few entries left, read them all
            # and the answer is complete
            by_bound = sorted(ceilings.items(), key=lambda item: item[1])
            held = 0.0
            essential = set()
            for key, bound in by_bound:
                if held + bound <= kth and not essential:
                    held += bound
                else:
                    essential.add(key)
            rest = [c for c in cursors if id(c.term) in essential and c.at < c.end]
            if sum(c.end - c.at for c in rest) <= block:
                for cursor in rest:
                    take(cursor, cursor.end)
                return found, found_scores
        if read > total // 4:
            return everything()
        # a term's bound is that of its best group left: a group that one block reads whole is read first (it
        # lowers the ceiling at once); otherwise a block of the group with the highest bound
        leading = [c for c, bound in zip(cursors, bounds, strict=True)
                   if bound > 0.0 and bound == ceilings[id(c.term)] and c.end - c.at <= block]
        cursor = min(leading, key=lambda c: c.end - c.at) if leading else cursors[int(np.argmax(bounds))]
        stop = min(cursor.end, cursor.at + block)
        block = min(block * 2, 65_536)
        read += stop - cursor.at
        take(cursor, stop)


@dataclass
class _Cursor:
    """The next position to read in one group of a long term's impact order, and where the group ends."""

    term: _Term
    group: int
    at: int
    end: int

    def bound(self, lengths: np.ndarray, impact: Callable[[float, float], float]) -> float:
        """The most the term can add to a document not read yet in this group (0 when the group is read)."""
        if self.at >= self.end:
            return 0.0
        order = self.term.order
        assert order is not None
        first = self.term.docs[order.positions[self.at]]
        return self.term.factor * float(impact(order.tf_max[self.group], float(lengths[first])))


def best_of(a: np.ndarray, a_scores: np.ndarray, b: np.ndarray, b_scores: np.ndarray, limit: int
            ) -> tuple[np.ndarray, np.ndarray]:
    docs, scores = np.concatenate([a, b]), np.concatenate([a_scores, b_scores])
    order = np.lexsort((docs, -scores))[:limit]
    return docs[order], scores[order]


def idf(n_docs: int, df: int) -> float:
    """Lucene's BM25 idf."""
    return math.log(1.0 + (n_docs - df + 0.5) / (df + 0.5))
