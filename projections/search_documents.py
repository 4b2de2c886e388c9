"""What every kind of search document shares: BM25 postings that grow one document at a time, and int8 vectors.

A tenant's facts (`projections.search_index.SearchIndex`) and its turns (`projections.search_turns.TurnIndex`)
are two document spaces, each with its own statistics (a long conversation must not change what a word weighs in
facts, and the other way round), ranked together by `projections.searches`.

- Lexical: BM25 (Lucene's variant, as bm25s computes it) over postings that grow as records are applied, so the
  index follows the log one record at a time (bm25s's own index is built once over a fixed corpus). Terms come
  from `projections.search_text.Analyzer`.
- Semantic: one vector per document, stored as int8 with a per-vector scale (260 bytes at 256 dimensions),
  computed in batches when the index is next queried (`flush`), not per record.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from domain.errors import EmbedderUnavailable
from domain.ports import Embedder
from projections.search_lexical import (
    LONG_POSTING,
    Allowed,
    ImpactOrder,
    Marks,
    idf,
    impact_order,
    needs_ordering,
    top_matches,
)
from projections.search_text import Analyzer

EMBED_BATCH = 256


@dataclass
class _Posting:
    docs: array
    tfs: array


class Documents:
    """Postings, document lengths and vectors of one document space (documents numbered 0.. as added)."""

    def __init__(self, analyzer: Analyzer, embedder: Embedder | None = None) -> None:
        self.analyzer = analyzer
        self.embedder = embedder
        self.vocabulary: dict[str, int] = {}
        self.postings: list[_Posting] = []
        self.doc_len = array("I")
        self.total_len = 0
        self.live_docs = 0
        self.dimensions = embedder.dimensions if embedder is not None else 0
        self.vectors = np.zeros((0, self.dimensions), dtype=np.int8)
        self.scales = np.zeros(0, dtype=np.float32)
        self.embedded = 0
        """Documents below this one have their vector (they are embedded in order, in batches)."""
        self._pending: list[tuple[str, str]] = []
        """Per document not embedded yet: its main text, and a longer text whose embedding is averaged in ('': none)."""
        self.embed_error: str | None = None
        self._orders: dict[int, ImpactOrder] = {}
        """Long postings in impact order (`projections.search_lexical`), made by `flush` (before a query) as they
        grow."""
        self._due: set[int] = set()
        """Long postings grown enough since they were last ordered (`needs_ordering`)."""
        self._marks = Marks()

    def _index_terms(self, doc: int, terms: Sequence[str]) -> None:
        """Append document `doc` (the next number) to the postings of its terms."""
        counts: dict[int, int] = {}
        for term in terms:
            tid = self.vocabulary.get(term)
            if tid is None:
                tid = self.vocabulary[term] = len(self.postings)
                self.postings.append(_Posting(array("i"), array("H")))
            counts[tid] = counts.get(tid, 0) + 1
        for tid, tf in counts.items():
            posting = self.postings[tid]
            posting.docs.append(doc)
            posting.tfs.append(min(tf, 65_535))
            if len(posting.docs) > LONG_POSTING and tid not in self._due \
                    and needs_ordering(self._orders.get(tid), len(posting.docs)):
                self._due.add(tid)
        self.doc_len.append(len(terms))
        self.total_len += len(terms)
        self.live_docs += 1

    # ------------------------------------------------------------------------------------------ vectors

    def flush(self) -> None:
        """Embed the documents added since the last flush (in batches). An embedder failure leaves them pending
        (lexical search still finds them) and is reported by `embed_error`. Long postings are put in impact order
        first."""
        self.order_postings()
        if self.embedder is None or not self._pending:
            return
        while self._pending:
            batch = self._pending[:EMBED_BATCH]
            texts = [s for s, _ in batch] + [w for _, w in batch if w]
            try:
                vectors = np.asarray(self.embedder.embed(texts), dtype=np.float32)
            except EmbedderUnavailable as error:  # outside our control: keep the documents, say why
                self.embed_error = str(error)
                return
            self.embed_error = None
            statement_vectors = vectors[: len(batch)]
            whole = iter(vectors[len(batch):])
            combined = np.array([s + next(whole) if w else s for s, (_, w) in zip(statement_vectors, batch,
                                                                                     strict=True)])
            self._store(combined)
            del self._pending[: len(batch)]

    def _store(self, vectors: np.ndarray) -> None:
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        vectors = np.divide(vectors, norms, out=np.zeros_like(vectors), where=norms > 0)
        peak = np.abs(vectors).max(axis=1)
        scales = np.where(peak > 0, peak / 127.0, 1.0).astype(np.float32)
        quantized = np.round(vectors / scales[:, None]).astype(np.int8)
        n = self.embedded + len(vectors)
        if n > len(self.vectors):
            capacity = max(n, 2 * len(self.vectors), 64)
            grown = np.zeros((capacity, self.dimensions), dtype=np.int8)
            grown[: self.embedded] = self.vectors[: self.embedded]
            self.vectors = grown
            grown_scales = np.zeros(capacity, dtype=np.float32)
            grown_scales[: self.embedded] = self.scales[: self.embedded]
            self.scales = grown_scales
        self.vectors[self.embedded: n] = quantized
        self.scales[self.embedded: n] = scales
        self.embedded = n

    def cosines(self, query: np.ndarray, docs: np.ndarray) -> np.ndarray:
        """Cosine of the (normalised) query vector with each document's; 0 for a document not embedded yet."""
        out = np.zeros(len(docs), dtype=np.float32)
        ready = docs < self.embedded
        if ready.any():
            chosen = docs[ready]
            out[ready] = (self.vectors[chosen].astype(np.float32) @ query) * self.scales[chosen]
        return out

    def vector(self, doc: int) -> np.ndarray | None:
        """Document `doc`'s vector (widened), None when it has none yet."""
        if doc >= self.embedded:
            return None
        return self.vectors[doc].astype(np.float32) * self.scales[doc]

    def similarities(self, docs: Sequence[int]) -> Callable[[int, int], float]:
        """The cosine of any two of `docs` (0 for a document not embedded yet); each vector is read once, when first
        compared (de-duplication stops after k results, so most candidates never are)."""
        allowed = set(docs)
        vectors: dict[int, np.ndarray | None] = {}

        def vector(doc: int) -> np.ndarray | None:
            if doc not in vectors:
                vectors[doc] = self.vector(doc) if doc in allowed else None
            return vectors[doc]

        def similar(a: int, b: int) -> float:
            va, vb = vector(a), vector(b)
            return 0.0 if va is None or vb is None else float(va @ vb)

        return similar

    # ------------------------------------------------------------------------------------------ lexical

    def _lengths(self) -> np.ndarray:
        return np.frombuffer(self.doc_len, dtype=np.uint32) if len(self.doc_len) else np.zeros(0, np.uint32)

    def bm25(self, query_terms: Sequence[str], k1: float, b: float) -> tuple[np.ndarray, np.ndarray]:
        """(documents, BM25 scores) of every document holding a query term (Lucene's idf and saturation),
        accumulated in one dense array over the documents (a term's postings hold each document once). Searches use
        `bm25_top`; this full scoring is the reference the tests hold it and bm25s to."""
        n_docs = max(self.live_docs, 1)
        average = self.total_len / n_docs if self.total_len else 1.0
        lengths = self._lengths()
        scores = np.zeros(len(self.doc_len), dtype=np.float32)
        for term, weight in counted(query_terms).items():
            tid = self.vocabulary.get(term)
            if tid is None:
                continue
            posting = self.postings[tid]
            docs = np.frombuffer(posting.docs, dtype=np.int32)
            tfs = np.frombuffer(posting.tfs, dtype=np.uint16).astype(np.float32)
            norm = k1 * (1.0 - b + b * lengths[docs] / average)
            scores[docs] += weight * idf(n_docs, len(docs)) * tfs / (tfs + norm)
        found = np.flatnonzero(scores)
        return found, scores[found]

    def bm25_top(self, query_terms: Sequence[str], k1: float, b: float, limit: int, allowed: Allowed,
                 exact: int | None = None, weights: Mapping[str, float] | None = None
                 ) -> tuple[np.ndarray, np.ndarray]:
        """Up to `limit` documents by `bm25` among those `allowed`, best first, without scoring every posting of a
        common term (`projections.search_lexical.top_matches`): the first `exact` (default all) are the best of
        all; the rest the best of those read on the way. `weights`: a factor for some query terms (default 1)."""
        n_docs = max(self.live_docs, 1)
        average = self.total_len / n_docs if self.total_len else 1.0
        lengths = self._lengths()
        terms = []
        for term, weight in counted(query_terms).items():
            tid = self.vocabulary.get(term)
            if tid is None:
                continue
            posting = self.postings[tid]
            factor = weights.get(term, 1.0) if weights else 1.0
            terms.append((posting.docs, posting.tfs, factor * weight * idf(n_docs, len(posting.docs)),
                          self._order(tid, lengths)))
        return top_matches(terms, lengths, average, k1, b, limit, allowed, self._marks, exact=exact)

    def bm25_among(self, query_terms: Sequence[str], k1: float, b: float, docs: np.ndarray, limit: int,
                   weights: Mapping[str, float] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The best `limit` of `docs` (ascending) by `bm25`, best first, each term's count looked up in its
        posting (documents ascending) instead of reading the posting: for a few documents among many."""
        n_docs = max(self.live_docs, 1)
        average = self.total_len / n_docs if self.total_len else 1.0
        scores = np.zeros(len(docs), dtype=np.float64)
        if not len(docs):
            return docs, scores
        norm = k1 * (1.0 - b + b * self._lengths()[docs] / average)
        for weight, held, tfs in self._counts_among(query_terms, docs, weights):
            scores += weight * idf(n_docs, held) * tfs / (tfs + norm)
        hit = np.flatnonzero(scores > 0)
        order = hit[np.lexsort((docs[hit], -scores[hit]))][:limit]
        return docs[order], scores[order]

    def bm25_grouped(self, query_terms: Sequence[str], k1: float, b: float, docs: np.ndarray, groups: np.ndarray,
                     n_groups: int, weights: Mapping[str, float] | None = None) -> np.ndarray:
        """BM25 of each group of `docs` (ascending; `groups[i]` is doc i's group) as one document: its term counts
        and length the sums of its documents', its statistics those of the groups."""
        scores = np.zeros(n_groups, dtype=np.float64)
        if not len(docs):
            return scores
        lengths = np.bincount(groups, weights=self._lengths()[docs].astype(np.float64), minlength=n_groups)
        present = np.bincount(groups, minlength=n_groups) > 0
        n = max(int(present.sum()), 1)
        average = float(lengths[present].mean()) or 1.0
        norm = k1 * (1.0 - b + b * lengths / average)
        for weight, _, tfs in self._counts_among(query_terms, docs, weights):
            tf = np.bincount(groups, weights=tfs, minlength=n_groups)
            scores += weight * idf(n, int((tf > 0).sum())) * tf / (tf + norm)
        return scores

    def _counts_among(self, query_terms: Sequence[str], docs: np.ndarray, weights: Mapping[str, float] | None
                      ) -> Iterator[tuple[float, int, np.ndarray]]:
        """For each query term found in any of `docs` (ascending): its weight (times the caller's for it), how many
        documents hold it, and its count in each of `docs` (0 where absent), looked up in its posting."""
        for term, weight in counted(query_terms).items():
            tid = self.vocabulary.get(term)
            if tid is None:
                continue
            posting = self.postings[tid]
            held = np.frombuffer(posting.docs, dtype=np.int32)
            at = np.minimum(np.searchsorted(held, docs), len(held) - 1)
            found = held[at] == docs
            if found.any():
                tfs = np.where(found, np.frombuffer(posting.tfs, dtype=np.uint16)[at], 0).astype(np.float64)
                yield (weights.get(term, 1.0) if weights else 1.0) * weight, len(held), tfs

    def _order(self, tid: int, lengths: np.ndarray) -> ImpactOrder | None:
        """The term's impact order when its posting is long, made again when it has grown since."""
        posting = self.postings[tid]
        if len(posting.docs) <= LONG_POSTING:
            return None
        order = self._orders.get(tid)
        if needs_ordering(order, len(posting.docs)):
            order = self._orders[tid] = impact_order(np.frombuffer(posting.docs, dtype=np.int32),
                                                     np.frombuffer(posting.tfs, dtype=np.uint16), lengths,
                                                     n_docs=len(self.doc_len))
        return order

    def order_postings(self) -> None:
        """Put every long posting that needs it in impact order now (done by `flush`, before queries, so no query
        pays for sorting a long posting)."""
        if not self._due:
            return
        lengths = np.frombuffer(self.doc_len, dtype=np.uint32)
        for tid in sorted(self._due):
            self._order(tid, lengths)
        self._due.clear()

    def documents_nbytes(self) -> int:
        """Bytes held by the postings, vocabulary, lengths, orders and vectors, roughly."""
        postings = sum(p.docs.itemsize * len(p.docs) + p.tfs.itemsize * len(p.tfs) + 120 for p in self.postings)
        vocabulary = sum(len(t) + 90 for t in self.vocabulary)
        vectors = self.vectors[: self.embedded].nbytes + 4 * self.embedded
        orders = sum(order.nbytes for order in self._orders.values()) + self._marks.nbytes
        return postings + vocabulary + vectors + orders + len(self.doc_len) * 4


def counted(terms: Iterable[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for term in terms:
        out[term] = out.get(term, 0) + 1
    return out
