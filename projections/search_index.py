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
from collections.abc import Sequence
from typing import Any

from domain.ports import Embedder
from projections.perspective_index import PerspectiveIndex, timestamp
from projections.perspective_scopes import SCOPE_PERSON, SCOPE_SESSION
from projections.search_documents import EMBED_BATCH, Documents, _Posting, counted
from projections.search_text import Analyzer
from projections.search_turns import TurnIndex

__all__ = ["EMBED_BATCH", "SearchIndex", "_Posting", "counted"]


class SearchIndex(Documents):
    """Postings, document lengths and vectors of one tenant's facts (document k = perspective fact k), and its
    turns (`turns`, a document space of their own)."""

    def __init__(self, tenant: str, analyzer: Analyzer, embedder: Embedder | None = None) -> None:
        super().__init__(analyzer, embedder)
        self.tenant = tenant
        self.position = 0
        self.sessions: list[str | None] = []
        self.valid_from = array("d")
        """Epoch seconds, NaN when the fact holds since ever."""
        self.message_ids: list[tuple[str, ...]] = []
        self.aliases: dict[str, tuple[str, ...]] = {}
        self.messages = Messages()
        """Each message's session, text and turn's number in `turns` (or -1) while readable (what provenance points
        at, and what a turn says)."""
        self.turns = TurnIndex(analyzer, embedder)
        self.names: dict[str, list[tuple[tuple[str, ...], int]]] = {}
        """First term of a name -> (the name's terms, entity id): the labels and aliases of entities other than
        `memory:` ones (whose label is a statement, not a name), to link a query's words to what they name."""

    # ------------------------------------------------------------------------------------------ following the log

    def apply(self, pindex: PerspectiveIndex, position: int, topic: str, data: dict[str, Any]) -> None:
        """Apply one record, after `pindex` applied it (the fact is already there, at the same number)."""
        self.position = max(self.position, position)
        if topic in ("entity.registered", "entity.updated"):
            self.aliases[data["ref"]] = tuple(data.get("aliases") or ())
            self._name(pindex, data)
        elif topic == "message.appended":
            content = data.get("content") or ""
            known = self.messages.turn(data["message_id"])
            turn = known if known is not None and known >= 0 else self.turns.add(pindex, data, content)
            self.messages.put(data["message_id"], data.get("session_id") or "", content, turn)
        elif topic == "fact.asserted":
            doc = pindex.fact_ids.find(data["fact_id"])
            if doc is not None and doc >= len(self.doc_len):
                for missing in range(len(self.doc_len), doc):  # loaded in bulk before this index followed
                    self._add(pindex, missing, {"fact_id": pindex.fact_ids.at(missing)})
                self._add(pindex, doc, data)
        elif topic == "fact.invalidated" or topic == "fact.archived":
            self._retire(pindex, data["fact_id"])
        elif topic == "fact.corrected" and data.get("valid_from"):  # a timeline moved the fact's start
            doc = pindex.fact_ids.find(data["fact_id"])
            if doc is not None and doc < len(self.valid_from):
                self.valid_from[doc] = timestamp(data["valid_from"])
        elif topic == "fact.restored":
            doc = pindex.fact_ids.find(data["fact_id"])
            if doc is not None and doc < len(self.doc_len):
                self.live_docs += 1
                self.total_len += self.doc_len[doc]

    def _name(self, pindex: PerspectiveIndex, data: dict[str, Any]) -> None:
        ref = data["ref"]
        entity = pindex.lookup(ref)
        if entity is None or ref.startswith("memory:"):
            return
        for name in (data.get("label"), *(data.get("aliases") or ())):
            terms = tuple(dict.fromkeys(self.analyzer.terms(name or "")))
            if terms and 0 < len(terms) <= 4:
                known = self.names.setdefault(terms[0], [])
                if (terms, entity) not in known:
                    known.append((terms, entity))

    def linked(self, pindex: PerspectiveIndex, query_terms: Sequence[str]) -> tuple[list[int], set[str]]:
        """The entities a query names (every term of one of their names is among the query's terms), and those
        terms."""
        present = set(query_terms)
        entities: list[int] = []
        terms: set[str] = set()
        for term in present:
            for name, entity in self.names.get(term, ()):
                if present.issuperset(name):
                    entities.append(pindex.resolve(entity))
                    terms.update(name)
        return sorted(set(entities)), terms

    def _retire(self, pindex: PerspectiveIndex, fact_id: str) -> None:
        """An ended fact leaves the statistics (it is never a candidate: the perspective index says it is not
        current)."""
        doc = pindex.fact_ids.find(fact_id)
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
        terms = self.analyzer.terms(statement + " " + sources) if sources else self.analyzer.terms(statement)
        self._index_terms(doc, terms)
        self.sessions.append(provenance.get("session_id"))
        valid_from = data.get("valid_from")
        self.valid_from.append(timestamp(valid_from) if valid_from else math.nan)
        self.message_ids.append(message_ids)
        if self.embedder is not None:
            self._pending.append((statement, statement + " " + sources if sources else ""))

    def said(self, message_id: str) -> str:
        """A message's text ('' when unknown)."""
        return self.messages.text(message_id) or ""

    def turn_of(self, message_id: str) -> int | None:
        """The turn a message is (None when it is none)."""
        turn = self.messages.turn(message_id)
        return turn if turn is not None and turn >= 0 else None

    def _sources(self, pindex: PerspectiveIndex, doc: int, cited_session: str | None, message_ids: Sequence[str]
                 ) -> str:
        """The text of the cited messages that fact `doc`'s viewers may read (in the cited session, if named)."""
        texts = []
        for message_id in message_ids:
            session = self.messages.session(message_id)
            if session is not None and (cited_session is None or session == cited_session) \
                    and _readable_from(pindex, doc, session):
                texts.append(self.messages.text(message_id) or "")
        return " ".join(texts)

    def sync(self, pindex: PerspectiveIndex, asserted: dict[str, dict[str, Any]] | None = None) -> None:
        """Add the facts the perspective index holds and this one does not, from their `fact.asserted` payloads
        when given (else their statements only); ended facts leave the statistics."""
        for doc in range(len(self.doc_len), pindex.fact_count):
            fact_id = pindex.fact_ids.at(doc)
            self._add(pindex, doc, (asserted or {}).get(fact_id) or {"fact_id": fact_id})
            if int(pindex.status.data[doc]) != 0:
                self.live_docs -= 1
                self.total_len -= self.doc_len[doc]
        self.position = max(self.position, pindex.position)

    def flush(self) -> None:
        """Embed what was added since the last flush, facts and turns (`Documents.flush`)."""
        super().flush()
        self.turns.flush()

    def nbytes(self) -> int:
        """Bytes held, roughly: postings, lengths, provenance, vectors, message texts and aliases, and the turns."""
        provenance = sum(56 + 8 * len(m) for m in self.message_ids) + 8 * len(self.sessions)
        return self.documents_nbytes() + provenance + self.messages_nbytes() + self.turns.nbytes()

    def messages_nbytes(self) -> int:
        """Bytes held by the message texts (and ids) kept for fact documents and for showing turns, roughly."""
        return self.messages.nbytes()


class Messages:
    """The messages' texts kept for the facts' documents and to show turns, in columns: one UTF-8 buffer with each
    message's offset and length, its session as a code, its turn's number; a dict from message id to its row. (A
    tuple of a session, a `str` and an int per message costs some 120 bytes more than its text: at a million turns,
    most of what the index holds beyond postings and vectors.)"""

    def __init__(self) -> None:
        self._row: dict[str, int] = {}
        self.buffer = bytearray()
        self._start = array("Q")
        self._length = array("I")
        self._session = array("i")
        self._turn = array("i")
        self._sessions: list[str] = []
        self._session_codes: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._row)

    def put(self, message_id: str, session: str, text: str, turn: int) -> None:
        """Keep (or replace) a message: its text goes at the end of the buffer (a replaced text's bytes stay
        behind it until the tenant is folded again: rare, a message id sent twice)."""
        code = self._session_codes.get(session)
        if code is None:
            code = self._session_codes[session] = len(self._sessions)
            self._sessions.append(session)
        said = text.encode("utf-8")
        row = self._row.get(message_id)
        if row is None:
            row = self._row[message_id] = len(self._start)
            self._start.append(len(self.buffer))
            self._length.append(len(said))
            self._session.append(code)
            self._turn.append(turn)
        else:
            self._start[row], self._length[row] = len(self.buffer), len(said)
            self._session[row], self._turn[row] = code, turn
        self.buffer += said

    def text(self, message_id: str) -> str | None:
        row = self._row.get(message_id)
        if row is None:
            return None
        start = self._start[row]
        return self.buffer[start:start + self._length[row]].decode("utf-8")

    def session(self, message_id: str) -> str | None:
        row = self._row.get(message_id)
        return None if row is None else self._sessions[self._session[row]]

    def turn(self, message_id: str) -> int | None:
        row = self._row.get(message_id)
        return None if row is None else self._turn[row]

    def nbytes(self) -> int:
        """Bytes held, roughly: the buffer and columns, each id (a `str`: 49 bytes and its length), its row (an
        int: 28) and the dict's slot (about 90 with the table's spare room); the session ids."""
        ids = sum(49 + len(k) + 28 + 90 for k in self._row)
        columns = len(self.buffer) + 20 * len(self._start)
        return ids + columns + sum(49 + len(s) + 8 + 90 for s in self._sessions)


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


def owned_containers(index: SearchIndex) -> list[Any]:
    """The index's own large containers, per fact, turn or term (what a dropped index hands to
    `domain.release`): never the analyzer or embedder it shares with the other tenants' indexes, nor the
    perspective index's session map its turns keep a reference to (`TurnIndex.session_owners`)."""
    turns, messages = index.turns, index.messages
    return [index.vocabulary, index.postings, index.message_ids, index.sessions, index.names, index.aliases,
            turns.vocabulary, turns.postings, turns.message_ids, turns.session_ids, turns.session_turns, turns.roles,
            turns.session_codes, messages._row, messages._sessions, messages._session_codes]
