"""Turns as episodic records: every message of a session is a search document of its own.

Seed 004's episodic memory is "what happened, with a timestamp", found by an exact filter and similarity. A
deployment that extracts no facts (no LLM configured) still has every turn in the log; here each one is findable by
its words (and meaning), with its speaker (role), session and time.

Privacy is the session's, read from the perspective index when asked (so a merge of entities is followed): a
turn is visible exactly as its session's scope is (`projections.perspective_scopes.Scopes.visible`): to the
session's agent, while it serves the person the session serves, or when the session served no one. A forgotten
message (its session's key deleted: it reads `[forgotten]` once the tenant is folded again) is no document at all,
so it adds nothing to the statistics either. As-of: a turn exists from the record that appended it.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from domain.forgetting import FORGOTTEN
from domain.ports import Embedder
from projections.perspective_index import PerspectiveIndex, timestamp
from projections.search_documents import Documents
from projections.search_text import Analyzer


class TurnIndex(Documents):
    """One tenant's turns: document t is the t-th readable message appended."""

    def __init__(self, analyzer: Analyzer, embedder: Embedder | None = None) -> None:
        super().__init__(analyzer, embedder)
        self.message_ids: list[str] = []
        self.session = array("i")
        """Each turn's session, as a code into `session_ids`."""
        self.session_ids: list[str] = []
        self.session_codes: dict[str, int] = {}
        self.session_turns: list[array] = []
        """Per session code, its turns in the order they were appended (adjacent turns are neighbours here)."""
        self.seq = array("I")
        """Each turn's place in its session."""
        self.occurred = array("d")
        """When the source says the turn was said (epoch seconds), else when it was recorded."""
        self.roles: list[str] = []
        self.role = array("B")
        self.owner_agent = array("i")
        """Per session code, the session's agent (-1: not started), as the perspective index knew it when the
        session's first turn came (read again whole after a merge of entities: `session_owners`)."""
        self.owner_serving = array("i")
        """Per session code, the person the session serves (-1: no one)."""
        self._owners_of: dict[str, tuple[int, int]] | None = None

    def add(self, pindex: PerspectiveIndex, data: dict[str, Any], text: str) -> int:
        """A message appended (`message.appended`'s payload, `text` its content), after `pindex` applied it: its
        turn's number, -1 when it is none (empty, or forgotten)."""
        if not text.strip() or text == FORGOTTEN:
            return -1
        message_id = data["message_id"]
        sid = data["session_id"]
        code = self.session_codes.get(sid)
        if code is None:
            self.session_owners(pindex)  # (the owners known so far, as the index's map has them now)
            code = self.session_codes[sid] = len(self.session_ids)
            self.session_ids.append(sid)
            self.session_turns.append(array("i"))
            agent, serving = pindex.scopes.sessions.get(sid, (-1, -1))
            self.owner_agent.append(agent)
            self.owner_serving.append(serving)
        doc = len(self.doc_len)
        self._index_terms(doc, self.analyzer.terms(text))
        self.message_ids.append(message_id)
        self.session.append(code)
        self.seq.append(len(self.session_turns[code]))
        self.session_turns[code].append(doc)
        occurred = data.get("occurred_at") or data.get("recorded_at")
        self.occurred.append(timestamp(occurred) if occurred else math.nan)
        role = str(data.get("role") or "")
        if role not in self.roles:
            self.roles.append(role)
        self.role.append(self.roles.index(role))
        if self.embedder is not None:
            self._pending.append((text, ""))
        return doc

    def session_owners(self, pindex: PerspectiveIndex) -> tuple[np.ndarray, np.ndarray]:
        """Agent and served person (-1: no one) of each session code. A merge of entities replaces the
        perspective index's session map: then they are read from it again."""
        sessions = pindex.scopes.sessions
        if self._owners_of is not sessions:
            for code, sid in enumerate(self.session_ids):
                self.owner_agent[code], self.owner_serving[code] = sessions.get(sid, (-1, -1))
            self._owners_of = sessions
        return (np.frombuffer(self.owner_agent, dtype=np.int32), np.frombuffer(self.owner_serving, dtype=np.int32))

    def visible_sessions(self, pindex: PerspectiveIndex, agent: int, serving: int) -> np.ndarray:
        """A bool per session code: may the viewer see its turns (the session scope's rule)."""
        owner_agent, owner_serving = self.session_owners(pindex)
        return (owner_agent == agent) & (owner_agent >= 0) & ((owner_serving == -1) | (owner_serving == serving))

    def allowed(self, pindex: PerspectiveIndex, agent: int, serving: int, about: Sequence[int] = ()
                ) -> Callable[[np.ndarray], np.ndarray]:
        """`visible_sessions` asked of given turns; with `about` (the exact filter), only turns of sessions whose
        agent or served person is one of those entities."""
        sessions = self.visible_sessions(pindex, agent, serving)
        if len(about):
            owner_agent, owner_serving = self.session_owners(pindex)
            sessions = sessions & (np.isin(owner_serving, about) | np.isin(owner_agent, about))
        codes = np.frombuffer(self.session, dtype=np.int32) if len(self.session) else np.zeros(0, np.int32)
        limit = len(codes)

        def allowed(docs: np.ndarray) -> np.ndarray:
            ok = (docs >= 0) & (docs < limit)
            return ok & sessions[codes[np.where(ok, docs, 0)]] if len(sessions) else ok

        return allowed

    def visible_turns(self, pindex: PerspectiveIndex, agent: int, serving: int, about: Sequence[int] = (),
                      limit: int = 20_000) -> np.ndarray | None:
        """Every turn the viewer may see (ascending), when they are at most `limit`; else None."""
        sessions = self.visible_sessions(pindex, agent, serving)
        if len(about):
            owner_agent, owner_serving = self.session_owners(pindex)
            sessions = sessions & (np.isin(owner_serving, about) | np.isin(owner_agent, about))
        codes = np.flatnonzero(sessions)
        if sum(len(self.session_turns[c]) for c in codes[: limit + 1]) > limit:
            return None
        if not len(codes):
            return np.zeros(0, dtype=np.int64)
        return np.sort(np.concatenate([np.frombuffer(self.session_turns[c], dtype=np.int32) for c in codes])
                       ).astype(np.int64)

    def neighbours(self, doc: int, before: int, after: int) -> list[tuple[int, int]]:
        """The turns up to `before` before and `after` after `doc` in its session, with their distance (negative:
        earlier)."""
        turns = self.session_turns[self.session[doc]]
        at = self.seq[doc]
        return [(int(turns[k]), k - at) for k in range(max(0, at - before), min(len(turns), at + after + 1))
                if k != at]

    def nbytes(self) -> int:
        """Bytes held, roughly (the message ids and texts are the fact index's `messages`, counted there: the list
        holds the same strings)."""
        ids = 8 * len(self.message_ids)
        columns = (self.session.itemsize + self.seq.itemsize + self.occurred.itemsize + 1) * len(self.message_ids)
        sessions = sum(len(sid) + 57 + 8 + 90 + 64 + 8 for sid in self.session_ids)
        return self.documents_nbytes() + ids + columns + sessions + sum(4 * len(t) for t in self.session_turns)
