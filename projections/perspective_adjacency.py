"""The adjacency of a perspective index: a CSR over the undirected graph of its facts, for the walk.

Each entry of a node's row is one fact at that node, with what the walk reads of it at every hop (`Entries`:
the neighbour across the fact, the fact's `live` code, the fact, its relation weight), one plain numpy column
each, so a hop reads contiguous rows instead of scattered fact columns. The CSR is rebuilt in
bulk (`build`); facts appended since are a short delta tail that `expand` and `between` scan with vectorized
comparisons until the next build. Per scope, the (end, fact) pairs of its facts outside org scope: what a
viewer's own scopes add to the fan of each node (`viewer_fan_extra`).

The facts' columns live in the index (`src`, `dst`, `rel`, `scope`, `conf`, `live`, `asserted`, `hashes`,
`rel_weight`); the methods here read them from the index they are given.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from projections.perspective_index import PerspectiveIndex

@dataclass(frozen=True, slots=True)
class Entries:
    """Adjacency entries, one column per field (the same length): the neighbour across the fact, the fact's
    `live` code (its scope code + 1 while current, else 0; kept current), the fact, and its relation's weight
    (rewritten when a relation's weight changes)."""

    neighbour: np.ndarray
    live: np.ndarray
    fact: np.ndarray
    weight: np.ndarray

    def take(self, which: Any) -> Entries:
        """The entries at `which` (indexes, a mask or a slice)."""
        return Entries(self.neighbour[which], self.live[which], self.fact[which], self.weight[which])

    def __len__(self) -> int:
        return len(self.fact)

    @staticmethod
    def empty() -> Entries:
        return Entries(np.zeros(0, np.int32), np.zeros(0, np.int32), np.zeros(0, np.int32), np.zeros(0, np.float32))

    @staticmethod
    def concatenate(parts: Sequence[Entries]) -> Entries:
        return Entries(*(np.concatenate([getattr(part, name) for part in parts])
                         for name in ("neighbour", "live", "fact", "weight")))

    @property
    def nbytes(self) -> int:
        return self.neighbour.nbytes + self.live.nbytes + self.fact.nbytes + self.weight.nbytes


class Adjacency:
    def __init__(self) -> None:
        self.indptr = np.zeros(1, dtype=np.int64)
        self.degree = np.zeros(0, dtype=np.int64)
        """Row lengths (`indptr[k + 1] - indptr[k]`)."""
        self.entries = Entries.empty()
        self.facts = 0
        """Facts in the CSR: the first `facts` facts of the index; the rest are the delta tail."""
        self.scope_indptr = np.zeros(1, dtype=np.int64)
        self.scope_ends = np.zeros(0, dtype=np.int32)
        self.scope_end_facts = np.zeros(0, dtype=np.int32)
        """The CSR's facts outside org scope as (entity end, fact) pairs grouped by scope code (a self-loop
        once)."""
        self.weights_stale = False
        """A relation's weight changed since the entries were written."""
        self.rows_stale = False
        """Facts moved between entities (a merge) since the build: rebuild before the next walk."""

    @property
    def rows(self) -> int:
        return len(self.degree)

    def build(self, index: PerspectiveIndex) -> None:
        """Rebuild over every fact of the index (bulk, vectorized)."""
        n_facts, n_entities = index.fact_count, len(index.refs)
        src, dst = index.src.view, index.dst.view
        all_facts = np.arange(n_facts, dtype=np.int32)
        not_loop = src != dst  # a self-loop is one edge, listed once
        ends = np.concatenate([src, dst[not_loop]])
        others = np.concatenate([dst, src[not_loop]])
        facts = np.concatenate([all_facts, all_facts[not_loop]])
        order = np.argsort(ends, kind="stable")
        counts = np.bincount(ends, minlength=n_entities)
        self.indptr = np.zeros(n_entities + 1, dtype=np.int64)
        np.cumsum(counts, out=self.indptr[1:])
        self.entries = self.entries_of(index, others[order], facts[order])
        self.weights_stale = False
        self.degree = counts.astype(np.int64)
        scoped = index.scope.view[facts] != 0  # each (end, fact) pair of the CSR once
        entry_scope = index.scope.view[facts[scoped]]
        by_scope = np.argsort(entry_scope, kind="stable")
        self.scope_ends = ends[scoped][by_scope].astype(np.int32)
        self.scope_end_facts = facts[scoped][by_scope].astype(np.int32)
        self.scope_indptr = np.zeros(len(index.scopes.names) + 1, dtype=np.int64)
        np.cumsum(np.bincount(entry_scope, minlength=len(index.scopes.names)), out=self.scope_indptr[1:])
        self.facts = n_facts
        self.rows_stale = False

    @staticmethod
    def entries_of(index: PerspectiveIndex, neighbours: np.ndarray, facts: np.ndarray) -> Entries:
        """The entries for (neighbour, fact) pairs."""
        return Entries(neighbours.astype(np.int32), index.live.view[facts], facts.astype(np.int32),
                       index.rel_weight.view[index.rel.view[facts]])

    def refresh_weights(self, index: PerspectiveIndex) -> None:
        """Write the relation weights into the entries again after a relation's weight changed."""
        if self.weights_stale:
            self.entries.weight[:] = index.rel_weight.view[index.rel.view[self.entries.fact]]
            self.weights_stale = False

    def update_live(self, index: PerspectiveIndex, fact: int, live: int) -> None:
        """Keep a fact's `live` code in its entries current (both ends' rows, when it is in the CSR)."""
        if fact >= self.facts:
            return
        for end in {int(index.src.data[fact]), int(index.dst.data[fact])}:
            lo, hi = int(self.indptr[end]), int(self.indptr[end + 1])
            self.entries.live[lo + np.flatnonzero(self.entries.fact[lo:hi] == fact)] = live

    def expand(self, index: PerspectiveIndex, frontier: np.ndarray, out: np.ndarray
               ) -> tuple[Entries, np.ndarray, np.ndarray]:
        """The entries of the sorted unique `frontier` with the `out` of each entry's owner and the owner, in
        order: the rows owner by owner, then the delta tail from the subject end, then from the object end (a
        self-loop once). One set of numpy calls for the whole frontier, reading contiguous rows."""
        self.refresh_weights(index)
        n_csr = self.rows
        if n_csr == len(index.refs) or (len(frontier) and frontier[-1] < n_csr):
            nodes = frontier
            lengths = self.degree[frontier]
        else:
            inside = frontier < n_csr
            lengths = np.zeros(len(frontier), dtype=np.int64)
            lengths[inside] = self.degree[frontier[inside]]
            nodes = np.where(inside, frontier, 0)
        offsets: Any
        if len(frontier) == 1:
            start = int(self.indptr[nodes[0]])
            offsets = slice(start, start + int(lengths[0]))
        else:
            ends = np.cumsum(lengths)
            total = int(ends[-1]) if len(ends) else 0
            offsets = np.repeat(self.indptr[nodes] - ends + lengths, lengths) + np.arange(total)
        entries = self.entries.take(offsets)
        x, via = np.repeat(out, lengths), np.repeat(frontier, lengths)
        if index.fact_count > self.facts:
            tail = np.arange(self.facts, index.fact_count, dtype=np.int32)
            parts = [(entries, x, via)]
            tail_src, tail_dst = index.src.view[tail], index.dst.view[tail]
            not_loop = tail_src != tail_dst  # a self-loop is one edge, found from its subject end
            for ends_, others, facts in ((tail_src, tail_dst, tail),
                                         (tail_dst[not_loop], tail_src[not_loop], tail[not_loop])):
                at = np.searchsorted(frontier, ends_)
                at[at >= len(frontier)] = 0
                hit = frontier[at] == ends_
                parts.append((self.entries_of(index, others[hit], facts[hit]), out[at[hit]], frontier[at[hit]]))
            entries = Entries.concatenate([part[0] for part in parts])
            x, via = (np.concatenate([part[k] for part in parts]) for k in (1, 2))
        return entries, x, via

    def between(self, index: PerspectiveIndex, a: int, b: int) -> list[int]:
        """The facts joining entities a and b, either way round (any status)."""
        found: list[int] = []
        if a < self.rows:
            row = self.entries.take(slice(int(self.indptr[a]), int(self.indptr[a + 1])))
            found = row.fact[row.neighbour == b].tolist()
        if index.fact_count > self.facts:
            src, dst = index.src.view[self.facts:], index.dst.view[self.facts:]
            hits = np.flatnonzero(((src == a) & (dst == b)) | ((src == b) & (dst == a)))
            found += (hits + self.facts).tolist()
        return found

    def viewer_fan_extra(self, index: PerspectiveIndex, codes: np.ndarray) -> np.ndarray:
        """The entity ends (one entry per fact end, a self-loop once) of the current facts in the viewer's
        non-org scopes `codes`: what the viewer's fan adds to the org fan."""
        ends: list[np.ndarray] = []
        facts: list[np.ndarray] = []
        n_rows = len(self.scope_indptr) - 1
        for code in codes.tolist():
            if code < n_rows:
                lo, hi = int(self.scope_indptr[code]), int(self.scope_indptr[code + 1])
                if hi > lo:
                    ends.append(self.scope_ends[lo:hi])
                    facts.append(self.scope_end_facts[lo:hi])
        if len(codes) and index.fact_count > self.facts:
            tail = index.scope.view[self.facts:]
            hit = np.zeros(len(tail), dtype=bool)
            for code in codes.tolist():
                hit |= tail == code
            tail_facts = (np.flatnonzero(hit) + self.facts).astype(np.int32)
            src, dst = index.src.view[tail_facts], index.dst.view[tail_facts]
            not_loop = src != dst
            ends += [src, dst[not_loop]]
            facts += [tail_facts, tail_facts[not_loop]]
        if not ends:
            return np.zeros(0, dtype=np.int64)
        all_ends = ends[0] if len(ends) == 1 else np.concatenate(ends)
        all_facts = facts[0] if len(facts) == 1 else np.concatenate(facts)
        return all_ends[index.live.view[all_facts] != 0].astype(np.int64)

    def scope_facts(self, index: PerspectiveIndex, codes: np.ndarray) -> np.ndarray:
        """The current facts in the scopes `codes` (sorted, each once)."""
        found: list[np.ndarray] = []
        n_rows = len(self.scope_indptr) - 1
        for code in codes.tolist():
            if code < n_rows:
                found.append(self.scope_end_facts[int(self.scope_indptr[code]): int(self.scope_indptr[code + 1])])
        if len(codes) and index.fact_count > self.facts:
            tail = index.scope.view[self.facts:]
            found.append((np.flatnonzero(np.isin(tail, codes)) + self.facts).astype(np.int32))
        if not found:
            return np.zeros(0, dtype=np.int64)
        facts = np.unique(np.concatenate(found)).astype(np.int64)
        return facts[index.live.view[facts] != 0]

    @property
    def nbytes(self) -> int:
        return (self.indptr.nbytes + self.entries.nbytes + self.degree.nbytes + self.scope_indptr.nbytes
                + self.scope_ends.nbytes + self.scope_end_facts.nbytes)
