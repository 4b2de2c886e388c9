"""One tenant's content index for recall by content, aligned with its perspective index.

Document k is the perspective index's fact k: the index never decides on its own what a viewer may see, it asks
the perspective index (scope visible to this viewer, fact current, not touching a party a hub viewer must not
reach) for the same facts the perspective would allow, and only those are scored. That is the privacy of the
perspective, enforced where the candidates are made, not in a filter applied afterwards.

A fact's document: its subject's and object's labels and aliases (a `memory:` entity's label is its remembered
statement), the relation, the reason, and the text of the messages in its provenance while they are readable, and
only of those messages whoever may see the fact may read too (`_readable_from`): a fact citing a session it
cannot see would otherwise let a search confirm guesses about that session's words.

- Lexical: BM25 (Lucene's variant, as bm25s computes it) over postings that grow as records are applied, so the
  index follows the log one record at a time (bm25s's own index is built once over a fixed corpus). Terms come
  from `projections.search_text.Analyzer`.
- Semantic: one vector per fact, the mean of the normalised embeddings of its statement and of statement plus
  messages, stored as int8 with a per-vector scale (260 bytes at 256 dimensions). Vectors are computed in batches
  when the index is next queried (`flush`), not per record.

Everything here lives in memory and is derived from the log: a forget folds the tenant again from the log, where
the forgotten content now reads `[forgotten]`, so no text, term statistic or vector of it survives.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from domain.errors import EmbedderUnavailable
from domain.ports import Embedder
from projections.perspective_index import PerspectiveIndex, timestamp
from projections.perspective_scopes import SCOPE_PERSON, SCOPE_SESSION
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


class SearchIndex:
    """Postings, document lengths and vectors of one tenant's facts (document k = perspective fact k)."""

    def __init__(self, tenant: str, analyzer: Analyzer, embedder: Embedder | None = None) -> None:
        self.tenant = tenant
        self.analyzer = analyzer
        self.embedder = embedder
        self.position = 0
        self.vocabulary: dict[str, int] = {}
        self.postings: list[_Posting] = []
        self.doc_len = array("I")
        self.total_len = 0
        self.live_docs = 0
        self.sessions: list[str | None] = []
        self.valid_from = array("d")
        """Epoch seconds, NaN when the fact holds since ever."""
        self.message_ids: list[tuple[str, ...]] = []
        self.aliases: dict[str, tuple[str, ...]] = {}
        self.messages: dict[str, tuple[str, str]] = {}
        """message id -> (its session, its text) while readable (what provenance points at)."""
        self.dimensions = embedder.dimensions if embedder is not None else 0
        self.vectors = np.zeros((0, self.dimensions), dtype=np.int8)
        self.scales = np.zeros(0, dtype=np.float32)
        self.embedded = 0
        """Documents below this one have their vector (they are embedded in order, in batches)."""
        self._pending: list[tuple[str, str]] = []
        self.embed_error: str | None = None
        self._orders: dict[int, ImpactOrder] = {}
        """Long postings in impact order (`projections.search_lexical`), made by `flush` (before a query) as they
        grow."""
        self._due: set[int] = set()
        """Long postings grown enough since they were last ordered (`needs_ordering`)."""
        self._marks = Marks()

    # ------------------------------------------------------------------------------------------ following the log

    def apply(self, pindex: PerspectiveIndex, position: int, topic: str, data: dict[str, Any]) -> None:
        """Apply one record, after `pindex` applied it (the fact is already there, at the same number)."""
        self.position = max(self.position, position)
        if topic in ("entity.registered", "entity.updated"):
            self.aliases[data["ref"]] = tuple(data.get("aliases") or ())
        elif topic == "message.appended":
            self.messages[data["message_id"]] = (data.get("session_id") or "", data.get("content") or "")
        elif topic == "fact.asserted":
            doc = pindex.fact_index(data["fact_id"])
            if doc is not None and doc >= len(self.doc_len):
                for missing in range(len(self.doc_len), doc):  # loaded in bulk before this index followed
                    self._add(pindex, missing, {"fact_id": pindex.fact_id(missing)})
                self._add(pindex, doc, data)
        elif topic == "fact.invalidated" or topic == "fact.archived":
            self._retire(pindex, data["fact_id"])
        elif topic == "fact.corrected" and data.get("valid_from"):  # a timeline moved the fact's start
            doc = pindex.fact_index(data["fact_id"])
            if doc is not None and doc < len(self.valid_from):
                self.valid_from[doc] = timestamp(data["valid_from"])
        elif topic == "fact.restored":
            doc = pindex.fact_index(data["fact_id"])
            if doc is not None and doc < len(self.doc_len):
                self.live_docs += 1
                self.total_len += self.doc_len[doc]

    def _retire(self, pindex: PerspectiveIndex, fact_id: str) -> None:
        """An ended fact leaves the statistics (it is never a candidate: the perspective index says it is not
        current)."""
        doc = pindex.fact_index(fact_id)
        if doc is not None and doc < len(self.doc_len) and self.live_docs > 0:
            self.live_docs -= 1
            self.total_len -= self.doc_len[doc]

    def statement(self, pindex: PerspectiveIndex, doc: int) -> str:
        """The fact in words: subject (and aliases), relation, object (and aliases), reason."""
        subject, obj = int(pindex.src.data[doc]), int(pindex.dst.data[doc])
        relation = pindex.rel_names[int(pindex.rel.data[doc])].replace("_", " ")
        parts = [pindex.labels[subject], *self.aliases.get(pindex.refs[subject], ()), relation,
                 pindex.labels[obj], *self.aliases.get(pindex.refs[obj], ())]
        reason = pindex.reasons.get(doc)
        if reason:
            parts.append(reason)
        return " ".join(parts)

    def _add(self, pindex: PerspectiveIndex, doc: int, data: dict[str, Any]) -> None:
        provenance = data.get("provenance") or {}
        message_ids = tuple(provenance.get("message_ids") or ())
        statement = self.statement(pindex, doc)
        sources = self._sources(pindex, doc, provenance.get("session_id"), message_ids)
        counts: dict[int, int] = {}
        terms = self.analyzer.terms(statement + " " + sources) if sources else self.analyzer.terms(statement)
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
        self.sessions.append(provenance.get("session_id"))
        valid_from = data.get("valid_from")
        self.valid_from.append(timestamp(valid_from) if valid_from else math.nan)
        self.message_ids.append(message_ids)
        if self.embedder is not None:
            self._pending.append((statement, statement + " " + sources if sources else ""))

    def _sources(self, pindex: PerspectiveIndex, doc: int, cited_session: str | None, message_ids: Sequence[str]
                 ) -> str:
        """The text of the cited messages that fact `doc`'s viewers may read (in the cited session, if named)."""
        texts = []
        for message_id in message_ids:
            said = self.messages.get(message_id)
            if said is not None and (cited_session is None or said[0] == cited_session) \
                    and _readable_from(pindex, doc, said[0]):
                texts.append(said[1])
        return " ".join(texts)

    def sync(self, pindex: PerspectiveIndex, asserted: dict[str, dict[str, Any]] | None = None) -> None:
        """Add the facts the perspective index holds and this one does not, from their `fact.asserted` payloads
        when given (else their statements only); ended facts leave the statistics."""
        for doc in range(len(self.doc_len), pindex.fact_count):
            fact_id = pindex.fact_id(doc)
            self._add(pindex, doc, (asserted or {}).get(fact_id) or {"fact_id": fact_id})
            if int(pindex.status.data[doc]) != 0:
                self.live_docs -= 1
                self.total_len -= self.doc_len[doc]
        self.position = max(self.position, pindex.position)

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

    def similarities(self, docs: Sequence[int]) -> Callable[[int, int], float]:
        """The cosine of any two of `docs` (0 for a document not embedded yet); each vector is read once, when first
        compared (de-duplication stops after k results, so most candidates never are)."""
        allowed = set(docs)
        vectors: dict[int, np.ndarray | None] = {}

        def vector(doc: int) -> np.ndarray | None:
            if doc not in vectors:
                ready = doc in allowed and doc < self.embedded
                vectors[doc] = self.vectors[doc].astype(np.float32) * self.scales[doc] if ready else None
            return vectors[doc]

        def similar(a: int, b: int) -> float:
            va, vb = vector(a), vector(b)
            return 0.0 if va is None or vb is None else float(va @ vb)

        return similar

    # ------------------------------------------------------------------------------------------ lexical

    def bm25(self, query_terms: Sequence[str], k1: float, b: float) -> tuple[np.ndarray, np.ndarray]:
        """(documents, BM25 scores) of every document holding a query term (Lucene's idf and saturation),
        accumulated in one dense array over the documents (a term's postings hold each document once). Searches use
        `bm25_top`; this full scoring is the reference the tests hold it and bm25s to."""
        n_docs = max(self.live_docs, 1)
        average = self.total_len / n_docs if self.total_len else 1.0
        lengths = np.frombuffer(self.doc_len, dtype=np.uint32) if len(self.doc_len) else np.zeros(0, np.uint32)
        scores = np.zeros(len(self.doc_len), dtype=np.float32)
        for term, weight in _counted(query_terms).items():
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
                 exact: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Up to `limit` documents by `bm25` among those `allowed`, best first, without scoring every posting of a
        common term (`projections.search_lexical.top_matches`): the first `exact` (default all) are the best of
        all; the rest the best of those read on the way."""
        n_docs = max(self.live_docs, 1)
        average = self.total_len / n_docs if self.total_len else 1.0
        lengths = np.frombuffer(self.doc_len, dtype=np.uint32) if len(self.doc_len) else np.zeros(0, np.uint32)
        terms = []
        for term, weight in _counted(query_terms).items():
            tid = self.vocabulary.get(term)
            if tid is None:
                continue
            posting = self.postings[tid]
            terms.append((posting.docs, posting.tfs, weight * idf(n_docs, len(posting.docs)),
                          self._order(tid, lengths)))
        return top_matches(terms, lengths, average, k1, b, limit, allowed, self._marks, exact=exact)

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

    def nbytes(self) -> int:
        """Bytes held, roughly: postings, lengths, provenance, vectors (messages and aliases are counted too)."""
        postings = sum(p.docs.itemsize * len(p.docs) + p.tfs.itemsize * len(p.tfs) + 120 for p in self.postings)
        vocabulary = sum(len(t) + 90 for t in self.vocabulary)
        provenance = sum(56 + 8 * len(m) for m in self.message_ids) + 8 * len(self.sessions)
        vectors = self.vectors[: self.embedded].nbytes + 4 * self.embedded
        messages = sum(len(k) + len(s) + len(v) + 150 for k, (s, v) in self.messages.items())
        orders = sum(order.nbytes for order in self._orders.values()) + self._marks.nbytes
        return postings + vocabulary + provenance + vectors + messages + orders + len(self.doc_len) * 4


def _readable_from(pindex: PerspectiveIndex, doc: int, session_id: str) -> bool:
    """Whether everyone who may see fact `doc` (by its scope, `projections.perspective_scopes`) may read the
    messages of `session_id`: the session's own scope, or another session of the same agent serving the same
    person; a person's scope for a session serving that person (consolidation writes a person's episodic facts
    from the sessions serving them). Never an org fact: everyone sees it, and no session is everyone's."""
    said_in = pindex.scopes.sessions.get(session_id)
    if said_in is None:
        return False
    agent, serving = said_in
    scopes = pindex.scopes
    code = int(pindex.scope.data[doc])
    kind = int(scopes.kind.data[code])
    if kind == SCOPE_PERSON:
        return serving != -1 and int(scopes.person.data[code]) == serving
    if kind == SCOPE_SESSION:
        if scopes.names[code] == f"session:{session_id}":
            return True
        return agent != -1 and (int(scopes.agent.data[code]), int(scopes.serving.data[code])) == (agent, serving)
    return False


def _counted(terms: Iterable[str]) -> dict[str, int]:
    counted: dict[str, int] = {}
    for term in terms:
        counted[term] = counted.get(term, 0) + 1
    return counted
