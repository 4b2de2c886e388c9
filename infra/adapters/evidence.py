"""The evidence store (domain/ports.py `EvidenceStore`): what `noumena explain` shows about a served perspective,
context or search, in one SQLite file, `<home>/evidence.sqlite`, bounded in size and age.

Two modes (`NOUMENA_EVIDENCE`):

- `reproducible` (the default): a perspective keeps only what reproduces it from the log: the request (agent,
  serving, focus, as-of, depth, budget) and the parameters, stored once per distinct request, and per served
  perspective its id, the log position its index stood at, the moment and the recall's position: a few
  dozen bytes. `explain` computes the answer again from the log as it stood (the same computation as `--reproduce`),
  so a forget reaches it through the log: the evidence holds refs, never labels or reasons.
- `full`: every perspective's whole answer as served (JSON, kilobytes), as contexts and searches always are (their
  message or query is part of the request, and their inputs span the session and the search index).

Bounds: rows older than `NOUMENA_EVIDENCE_MAX_AGE_DAYS` and, beyond `NOUMENA_EVIDENCE_MAX_BYTES` of live pages,
the oldest rows go first (ids start with the serving moment, docs/perspectives.md "Evidence"). Freed pages are
reused, so the file stays near the bound. An id no longer kept is unknown to `explain`.

Forgetting: `erase(tenant)` blanks the content of every full answer of the tenant (labels, reasons, texts, the
query, the message), keeping ids, tiers, scores and positions, like the files it replaces did; SQLite's
`secure_delete` zeroes what the rewrite frees, and the write-ahead log is truncated afterwards.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Literal

from domain.context import Context
from domain.errors import UnknownContext, UnknownPerspective, UnknownSearch, UnknownServed
from domain.perspective import Perspective, RecallRecord
from domain.search import SearchAnswer

FORGOTTEN_TEXT = "[forgotten]"
PERSPECTIVE, CONTEXT, SEARCH = 0, 1, 2
PREFIXES = {CONTEXT: "ctx-", SEARCH: "srch-"}
UNKNOWN: dict[int, type[UnknownServed]] = {PERSPECTIVE: UnknownPerspective, CONTEXT: UnknownContext,
                                           SEARCH: UnknownSearch}
PRUNE_EVERY = 256
"""Keeps between two checks of the bounds (or fewer: a check also runs once a sixteenth of the size bound was
kept since the last, so the file overshoots its bound by about that much at most)."""
EvidenceMode = Literal["reproducible", "full"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS parameters (
    id INTEGER PRIMARY KEY,
    digest BLOB NOT NULL UNIQUE,
    body TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS requests (
    id INTEGER PRIMARY KEY,
    digest BLOB NOT NULL UNIQUE,
    tenant TEXT NOT NULL,
    body TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS served (
    key BLOB PRIMARY KEY,
    kind INTEGER NOT NULL,
    tenant TEXT,
    served_us INTEGER NOT NULL,
    position INTEGER NOT NULL,
    request INTEGER,
    recall_position INTEGER,
    body TEXT
) WITHOUT ROWID;
"""


def _kind_and_key(served_id: str) -> tuple[int, bytes]:
    kind, digits = PERSPECTIVE, served_id
    for k, prefix in PREFIXES.items():
        if served_id.startswith(prefix):
            kind, digits = k, served_id[len(prefix):]
    if len(digits) != 32 or not all(ch in "0123456789abcdef" for ch in digits):
        raise UNKNOWN[kind](served_id)
    return kind, bytes.fromhex(digits)


def _json(data: object) -> str:
    return json.dumps(data, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _intern(con: sqlite3.Connection, table: str, tenant: str | None, body: str) -> int:
    """The id of the row of `table` holding `body` (for `tenant`), added if new: requests and parameters are
    stored once, however often they are served."""
    digest = hashlib.blake2b(f"{tenant}\n{body}".encode(), digest_size=16).digest()
    row = con.execute(f"SELECT id FROM {table} WHERE digest = ?", (digest,)).fetchone()  # noqa: S608
    if row is not None:
        return int(row[0])
    if tenant is None:
        return int(con.execute(f"INSERT INTO {table} (digest, body) VALUES (?, ?)", (digest, body)).lastrowid)  # noqa: S608
    return int(con.execute(f"INSERT INTO {table} (digest, tenant, body) VALUES (?, ?, ?)",  # noqa: S608
                           (digest, tenant, body)).lastrowid)


def _micros(moment: datetime) -> int:
    return int(round(moment.timestamp() * 1_000_000))


def _moment(micros: int) -> datetime:
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=micros)


class EvidenceStore:
    """One per process (infra/bootstrap.py); several processes may share the file (SQLite's locking)."""

    def __init__(self, path: Path, *, mode: EvidenceMode = "reproducible", max_bytes: int = 256 * 1024 * 1024,
                 max_age_days: float = 30.0, clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self.path = Path(path)
        self.mode = mode
        self.max_bytes = max_bytes
        self.max_age_days = max_age_days
        self._clock = clock
        self._con: sqlite3.Connection | None = None
        self._lock = threading.Lock()
        self._since_prune = 0
        self._bytes_since_prune = 0

    # ------------------------------------------------------------------------------------------ the file

    def _connection(self) -> sqlite3.Connection:
        if self._con is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            con = sqlite3.connect(self.path, timeout=10.0, isolation_level=None, check_same_thread=False)
            con.execute("PRAGMA journal_mode=WAL")
            con.execute("PRAGMA journal_size_limit=1048576")  # the write-ahead log is cut back after checkpoints
            con.execute("PRAGMA synchronous=NORMAL")  # evidence is an explanation, not a fact: no fsync per read
            con.execute("PRAGMA secure_delete=ON")  # freed space is zeroed: a forget's rewrite leaves no copy
            con.executescript(_SCHEMA)
            self._con = con
        return self._con

    def close(self) -> None:
        with self._lock:
            if self._con is not None:
                self._con.close()
                self._con = None

    def live_bytes(self) -> int:
        """Bytes in the file's pages that hold rows (the bound applies to these; free pages are reused)."""
        with self._lock:
            return self._live_bytes(self._connection())

    @staticmethod
    def _live_bytes(con: sqlite3.Connection) -> int:
        page_size = con.execute("PRAGMA page_size").fetchone()[0]
        pages = con.execute("PRAGMA page_count").fetchone()[0] - con.execute("PRAGMA freelist_count").fetchone()[0]
        return int(page_size * pages)

    # ------------------------------------------------------------------------------------------ keeping

    def keep(self, served: Perspective | Context | SearchAnswer) -> None:
        """Keep the evidence of a served read (a perspective as its request in `reproducible` mode)."""
        request = body = recall_position = None
        if isinstance(served, Perspective):
            kind, served_id, moment = PERSPECTIVE, served.perspective_id, served.served_at
            if self.mode == "reproducible":
                request = served.model_dump(mode="json", include={
                    "agent", "serving", "focus", "as_of", "deeper", "budget_tokens", "parameters"})
                recall_position = served.recall.position if served.recall is not None else None
            else:
                body = served.model_dump_json()
        elif isinstance(served, Context):
            kind, served_id, moment, body = CONTEXT, served.context_id, served.served_at, served.model_dump_json()
        else:
            kind, served_id, body = SEARCH, served.search_id, served.model_dump_json()
            moment = datetime.fromisoformat(served.served_at)
        position = served.log_position if not isinstance(served, Context) else (
            served.perspective.log_position if served.perspective is not None else 0)
        _, key = _kind_and_key(served_id)
        with self._lock:
            con = self._connection()
            con.execute("BEGIN IMMEDIATE")
            try:
                request_id = None
                if request is not None:
                    request["parameters"] = _intern(con, "parameters", None, _json(request["parameters"]))
                    request_id = _intern(con, "requests", served.tenant, _json(request))
                tenant = None if request_id is not None else served.tenant  # (a request names its tenant)
                con.execute("INSERT OR REPLACE INTO served VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                            (key, kind, tenant, _micros(moment), position, request_id, recall_position, body))
                con.execute("COMMIT")
            except BaseException:
                con.execute("ROLLBACK")
                raise
            self._since_prune += 1
            self._bytes_since_prune += 64 + len(body or "")
            if self._since_prune >= PRUNE_EVERY or self._bytes_since_prune * 16 >= self.max_bytes:
                self._since_prune = self._bytes_since_prune = 0
                self._prune(con)

    def prune(self) -> int:
        """Apply the bounds now (age, then size); returns how many rows went."""
        with self._lock:
            return self._prune(self._connection())

    def _prune(self, con: sqlite3.Connection) -> int:
        dropped = 0
        cutoff = self._clock() - timedelta(days=self.max_age_days)
        cutoff_key = bytes.fromhex(f"{int(cutoff.timestamp() * 1000) & 0xFFFF_FFFF_FFFF:012x}") + bytes(10)
        dropped += con.execute("DELETE FROM served WHERE key < ?", (cutoff_key,)).rowcount
        while (used := self._live_bytes(con)) > self.max_bytes:
            rows = con.execute("SELECT count(*) FROM served").fetchone()[0]
            if not rows:
                break
            excess = max(1, int(rows * (used - 0.9 * self.max_bytes) / used))
            dropped += con.execute("DELETE FROM served WHERE key IN (SELECT key FROM served ORDER BY key LIMIT ?)",
                                   (excess,)).rowcount
        if dropped:
            con.execute("DELETE FROM requests WHERE id NOT IN (SELECT request FROM served WHERE request IS NOT NULL)")
            con.execute("DELETE FROM parameters WHERE id NOT IN (SELECT body ->> '$.parameters' FROM requests)")
        return dropped

    # ------------------------------------------------------------------------------------------ reading

    def _row(self, tenant: str | None, served_id: str, kind: int) -> tuple[object, ...]:
        found_kind, key = _kind_and_key(served_id)
        if found_kind != kind:
            raise UNKNOWN[kind](served_id)
        with self._lock:
            row = self._connection().execute(
                "SELECT coalesce(s.tenant, r.tenant), s.served_us, s.position, s.recall_position, s.body, r.body"
                " FROM served AS s LEFT JOIN requests AS r ON r.id = s.request WHERE s.key = ? AND s.kind = ?",
                (key, kind)).fetchone()
        if row is None or (tenant is not None and row[0] != tenant):
            raise UNKNOWN[kind](served_id)
        return tuple(row)

    def perspective(self, tenant: str | None, perspective_id: str) -> tuple[Perspective, bool]:
        """The perspective as served (True) or, kept as its request, a perspective with the request, moment, log
        position and recall position but no items yet (False: compute it again from the log)."""
        owner, served_us, position, recall_position, body, request = self._row(tenant, perspective_id, PERSPECTIVE)
        if body is not None:
            return Perspective.model_validate_json(str(body)), True
        fields = json.loads(str(request))
        with self._lock:
            fields["parameters"] = json.loads(self._connection().execute(
                "SELECT body FROM parameters WHERE id = ?", (fields["parameters"],)).fetchone()[0])
        served_at = _moment(int(served_us))  # type: ignore[call-overload]
        recall = None
        if fields.get("as_of") is None:
            recall = RecallRecord(mode="deepened" if fields.get("deeper") else "pushed", fact_ids=[],
                                  position=recall_position, held=recall_position is None)
        return Perspective(perspective_id=perspective_id, tenant=str(owner), served_at=served_at,
                           log_position=int(position), items=[], count_groups=[], forgotten=0,  # type: ignore[call-overload]
                           counts={}, context="", context_tokens=0, lines=[], recall=recall, **fields), False

    def context(self, tenant: str | None, context_id: str) -> Context:
        return Context.model_validate_json(str(self._row(tenant, context_id, CONTEXT)[4]))

    def search(self, tenant: str | None, search_id: str) -> SearchAnswer:
        return SearchAnswer.model_validate_json(str(self._row(tenant, search_id, SEARCH)[4]))

    # ------------------------------------------------------------------------------------------ forgetting

    def erase(self, tenant: str) -> int:
        """After a forget in `tenant`: blank the content of every full answer the tenant was served (which of them
        hold the forgotten subject's content is not cheap to decide: all are redacted), keeping the structure.
        Requests kept for reproduction hold refs only (a reproduction reads the log, where the content is gone).
        Returns how many rows were rewritten."""
        redact = {PERSPECTIVE: _redacted_perspective, CONTEXT: _redacted_context, SEARCH: _redacted_search}
        rewritten = 0
        with self._lock:
            if not self.path.exists():
                return 0
            con = self._connection()
            rows = con.execute("SELECT key, kind, body FROM served WHERE tenant = ? AND body IS NOT NULL",
                               (tenant,)).fetchall()
            con.execute("BEGIN IMMEDIATE")
            try:
                for key, kind, body in rows:
                    con.execute("UPDATE served SET body = ? WHERE key = ?", (redact[kind](body), key))
                    rewritten += 1
                con.execute("COMMIT")
            except BaseException:
                con.execute("ROLLBACK")
                raise
            con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return rewritten


def _blank_perspective(perspective: Perspective) -> None:
    for item in perspective.items:
        item.subject_label = item.object_label = item.about_label = FORGOTTEN_TEXT
        item.reason = FORGOTTEN_TEXT if item.reason else None
        item.provenance = FORGOTTEN_TEXT if item.provenance else ""
        item.salience = FORGOTTEN_TEXT if item.salience else ""  # (it names the person served: "sessions of Li's")
    for group in perspective.count_groups:
        group.label = FORGOTTEN_TEXT
    for line in perspective.lines:
        line.text = FORGOTTEN_TEXT
    perspective.context = FORGOTTEN_TEXT


def _blank_search(answer: SearchAnswer) -> None:
    answer.query = FORGOTTEN_TEXT
    for item in answer.items:
        item.text = FORGOTTEN_TEXT
        for turn in item.around:
            turn.text = FORGOTTEN_TEXT
        if item.subject_label is not None:
            item.subject_label = item.object_label = FORGOTTEN_TEXT
        item.reason = FORGOTTEN_TEXT if item.reason else None


def _redacted_perspective(body: str) -> str:
    served = Perspective.model_validate_json(body)
    _blank_perspective(served)
    return served.model_dump_json()


def _redacted_search(body: str) -> str:
    served = SearchAnswer.model_validate_json(body)
    _blank_search(served)
    return served.model_dump_json()


def _redacted_context(body: str) -> str:
    served = Context.model_validate_json(body)
    served.text = FORGOTTEN_TEXT
    served.message = FORGOTTEN_TEXT if served.message else None
    served.ambiguous = [FORGOTTEN_TEXT for _ in served.ambiguous]
    for focus in served.focus:
        focus.label = FORGOTTEN_TEXT
    for block in served.blocks:
        for line in block.lines:
            line.text = FORGOTTEN_TEXT
    for omission in served.omitted:
        omission.text = FORGOTTEN_TEXT
    if served.perspective is not None:
        _blank_perspective(served.perspective)
    if served.search is not None:
        _blank_search(served.search)
    return served.model_dump_json()
