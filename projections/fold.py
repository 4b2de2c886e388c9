"""Turn a batch of logged events into row changes for the versioned and current-state tables, in memory,
mirroring domain.ontology (the history tables are derived in SQL: projections.history).

The fold needs the rows the batch touches as they stand before it (given by a `Loader`), and returns
everything the batch changes, so that the projector can write it with bulk loads in one transaction together
with the new log position.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

import pyarrow as pa

from projections.history import EVENTS_SCHEMA
from projections.schema import ENTITY_VERSIONS, FACT_VERSIONS, RELATION_TYPES, SESSIONS, Table
from projections.source import Record

Key = tuple[str, str]
Row = list[Any]


def ts(value: str | None) -> datetime | None:
    """An ISO 8601 string from a payload as an aware datetime (None stays None)."""
    if value is None:
        return None
    return datetime.fromisoformat(value)


class Loader(Protocol):
    """Reads, before a batch, the rows it will change."""

    def open_versions(self, table: Table, keys: set[Key]) -> dict[Key, Row]:
        """The open (recorded_to IS NULL) version of each key that has one."""
        ...

    def current_rows(self, table: Table, keys: set[Key]) -> dict[Key, Row]:
        """The row of each key in a current-state table."""
        ...


class _Versions:
    """The versions of one versioned table touched by a batch."""

    def __init__(self, table: Table, open_rows: dict[Key, Row]) -> None:
        self.table = table
        self.open = open_rows
        self.stored = set(open_rows)
        """Keys whose open version is in the database: closing it is an UPDATE, not part of an insert."""
        self.new_rows: list[Row] = []
        self.closes: list[tuple[str, str, int, datetime, int]] = []
        self._version = table.index("version")
        self._from = table.index("recorded_from")
        self._to = table.index("recorded_to")
        self._pos_from = table.index("position_from")
        self._pos_to = table.index("position_to")

    def create(self, key: Key, row: Row, position: int, clock: datetime) -> Row:
        """A first version, or a full replacement of whatever version is open."""
        old = self.open.get(key)
        version = 1
        if old is not None:
            self._close(key, old, position, clock)
            version = old[self._version] + 1
        row[self._version] = version
        return self._open(key, row, position, clock)

    def change(self, key: Key, position: int, clock: datetime, updates: dict[int, Any]) -> Row | None:
        """A new version of `key` equal to the open one but for `updates` (column index -> value)."""
        old = self.open.get(key)
        if old is None:
            return None
        self._close(key, old, position, clock)
        row = list(old)
        row[self._version] = old[self._version] + 1
        for index, value in updates.items():
            row[index] = value
        return self._open(key, row, position, clock)

    def _open(self, key: Key, row: Row, position: int, clock: datetime) -> Row:
        row[self._from], row[self._pos_from] = clock, position
        row[self._to] = row[self._pos_to] = None
        self.open[key] = row
        self.new_rows.append(row)
        return row

    def _close(self, key: Key, old: Row, position: int, clock: datetime) -> None:
        if key in self.stored:
            self.stored.discard(key)
            self.closes.append((key[0], key[1], old[self._version], clock, position))
        else:
            old[self._to], old[self._pos_to] = clock, position


@dataclass
class BatchChanges:
    """Everything one batch changes: rows to append, versions to close, current rows to replace."""

    first_position: int
    last_position: int
    clock: datetime | None
    events: int
    events_frame: pa.Table | None = None
    """The batch's events (position, transaction time, stamp, topic, JSON payload): input of the history SQL."""
    topics: set[str] = field(default_factory=set)
    inserts: dict[str, list[Row]] = field(default_factory=dict)
    closes: dict[str, list[tuple[str, str, int, datetime, int]]] = field(default_factory=dict)
    replaces: dict[str, dict[Key, Row]] = field(default_factory=dict)
    reached_until: bool = False
    """The batch stopped at the first event recorded after the requested `until` time."""


def rows_to_arrow(table: Table, rows: Sequence[Sequence[Any]]) -> pa.Table:
    schema = table.arrow_schema
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in schema]
    return pa.Table.from_arrays([pa.array(col, type=f.type) for col, f in zip(columns, schema, strict=True)],
                                schema=schema)


_FACT = {name: FACT_VERSIONS.index(name) for name in FACT_VERSIONS.column_names}
_ENTITY = {name: ENTITY_VERSIONS.index(name) for name in ENTITY_VERSIONS.column_names}
_SESSION = {name: SESSIONS.index(name) for name in SESSIONS.column_names}

# The hot handler builds fact rows as literals, in this column order: the schema must not drift from it.
if FACT_VERSIONS.column_names != [
    "tenant", "fact_id", "version", "subject", "relation", "object", "scope", "reason", "confidence", "status",
    "valid_from", "valid_to", "asserted_at", "sources", "superseded_by", "supersedes", "ended_reason",
    "recorded_from", "recorded_to", "position_from", "position_to",
]:
    raise ImportError("projections.fold builds fact rows in an order the schema no longer has")

_FACT_TOPICS = ("fact.corroborated", "fact.invalidated", "fact.corrected", "fact.archived", "fact.restored")
_SESSION_TOPICS = ("session.started", "message.appended", "worker.dispatched", "worker.reported",
                   "session.compacted", "session.ended")


_KEY_FIELDS: dict[str, tuple[int, str]] = {
    # not fact.asserted: its fact id is new by construction (rules.fact_id_for numbers each new assertion)
    **{topic: (0, "fact_id") for topic in _FACT_TOPICS},
    **{topic: (2, "session_id") for topic in _SESSION_TOPICS},
    "entity.registered": (1, "ref"), "entity.updated": (1, "ref"), "entity.merged": (1, "merged_ref"),
    "relation.defined": (3, "name"),
}


def keys_touched(records: Iterable[Record]) -> tuple[set[Key], set[Key], set[Key], set[Key]]:
    """The (tenant, id) keys of facts, entities, sessions and relation types a batch needs before it."""
    keys: tuple[set[Key], set[Key], set[Key], set[Key]] = (set(), set(), set(), set())
    for r in records:
        which = _KEY_FIELDS.get(r.topic)
        if which is not None:
            d = r.data
            keys[which[0]].add((d["tenant"], d[which[1]]))
            if r.topic == "worker.dispatched":
                keys[2].add((d["tenant"], d["worker_session_id"]))
    return keys


class BatchFold:
    """Apply a batch of records, in log order, to the rows they touch."""

    def __init__(self, loader: Loader, clock: datetime | None) -> None:
        self._loader = loader
        self.clock = clock
        """Transaction time so far: the running maximum of the stamps along the log."""

    def fold(self, records: Sequence[Record], until: datetime | None = None,
             clocks: Sequence[datetime] | None = None) -> BatchChanges:
        """Apply `records` in order. Transaction time is the running maximum of their stamps, or `clocks` when
        the caller computed it over a log these records are only part of (projections.bulk)."""
        stamped: list[datetime] = []
        reached_until = False
        if clocks is not None:
            stamped = [datetime.fromisoformat(r.data["recorded_at"]) for r in records]
            clocks = list(clocks)
        else:
            clocks = []
            clock = self.clock
            for r in records:
                at = datetime.fromisoformat(r.data["recorded_at"])
                clock = at if clock is None or at > clock else clock
                if until is not None and clock > until:
                    reached_until = True
                    break
                stamped.append(at)
                clocks.append(clock)
        records = records[: len(clocks)]
        facts, entities, sessions, relations = keys_touched(records)
        self._facts = _Versions(FACT_VERSIONS, self._loader.open_versions(FACT_VERSIONS, facts) if facts else {})
        self._entities = _Versions(
            ENTITY_VERSIONS, self._loader.open_versions(ENTITY_VERSIONS, entities) if entities else {})
        self._sessions = self._loader.current_rows(SESSIONS, sessions) if sessions else {}
        self._relations = self._loader.current_rows(RELATION_TYPES, relations) if relations else {}
        self._touched_sessions: set[Key] = set()
        self._touched_relations: set[Key] = set()
        handlers = self._handlers
        for record, at, now in zip(records, stamped, clocks, strict=True):
            handler = handlers.get(record.topic)
            if handler is not None:
                handler(self, record.position, now, at, record.data)
        if clocks:
            self.clock = clocks[-1]
        changes = BatchChanges(
            first_position=records[0].position if records else 0,
            last_position=records[-1].position if records else 0,
            clock=self.clock, events=len(records), reached_until=reached_until,
        )
        changes.topics = {r.topic for r in records}
        changes.events_frame = pa.Table.from_arrays([
            pa.array([r.position for r in records], pa.int64()),
            pa.array(clocks, pa.timestamp("us", tz="UTC")),
            pa.array(stamped, pa.timestamp("us", tz="UTC")),
            pa.array([r.topic for r in records], pa.string()),
            pa.array([r.raw for r in records], pa.binary()).cast(pa.string()),
        ], schema=EVENTS_SCHEMA)
        changes.inserts = {}
        changes.inserts[FACT_VERSIONS.name] = self._facts.new_rows
        changes.inserts[ENTITY_VERSIONS.name] = self._entities.new_rows
        changes.closes = {FACT_VERSIONS.name: self._facts.closes, ENTITY_VERSIONS.name: self._entities.closes}
        changes.replaces = {
            SESSIONS.name: {k: self._sessions[k] for k in self._touched_sessions if k in self._sessions},
            RELATION_TYPES.name: {k: self._relations[k] for k in self._touched_relations},
        }
        return changes

    # ------------------------------------------------------------------ tenants, entities, relation types

    def _entity_registered(self, pos: int, now: datetime, at: datetime, d: dict[str, Any]) -> None:
        row: Row = [None] * len(ENTITY_VERSIONS.columns)
        row[_ENTITY["tenant"]], row[_ENTITY["ref"]] = d["tenant"], d["ref"]
        row[_ENTITY["label"]], row[_ENTITY["aliases"]] = d["label"], list(d.get("aliases", ()))
        row[_ENTITY["hub"]], row[_ENTITY["needs_review"]] = d.get("hub", False), d.get("needs_review", False)
        row[_ENTITY["registered_at"]] = at
        self._entities.create((d["tenant"], d["ref"]), row, pos, now)

    def _entity_updated(self, pos: int, now: datetime, at: datetime, d: dict[str, Any]) -> None:
        updates = {_ENTITY["label"]: d["label"], _ENTITY["aliases"]: list(d["aliases"]), _ENTITY["hub"]: d["hub"]}
        if d.get("needs_review") is not None:  # None: unchanged (older events carry no such field)
            updates[_ENTITY["needs_review"]] = d["needs_review"]
        self._entities.change((d["tenant"], d["ref"]), pos, now, updates)

    def _entities_merged(self, pos: int, now: datetime, at: datetime, d: dict[str, Any]) -> None:
        self._entities.change((d["tenant"], d["merged_ref"]), pos, now, {_ENTITY["merged_into"]: d["into_ref"]})

    def _relation_defined(self, pos: int, now: datetime, at: datetime, d: dict[str, Any]) -> None:
        key = (d["tenant"], d["name"])
        self._relations[key] = [d["tenant"], d["name"], d["functional"], d["symmetric"], d["weight"], pos]
        self._touched_relations.add(key)

    # ------------------------------------------------------------------ facts

    def _fact_asserted(self, pos: int, now: datetime, at: datetime, d: dict[str, Any]) -> None:
        tenant, fact_id, vf, vt = d["tenant"], d["fact_id"], d.get("valid_from"), d.get("valid_to")
        row: Row = [tenant, fact_id, 0, d["subject"], d["relation"], d["object"], d["scope"], d.get("reason"),
                    d["confidence"], "current", datetime.fromisoformat(vf) if vf else None,
                    datetime.fromisoformat(vt) if vt else None, at, 1, None, d.get("supersedes"), None, None, None,
                    None, None]
        self._facts.create((tenant, fact_id), row, pos, now)

    def _fact_corroborated(self, pos: int, now: datetime, at: datetime, d: dict[str, Any]) -> None:
        key = (d["tenant"], d["fact_id"])
        old = self._facts.open.get(key)
        sources = (old[_FACT["sources"]] if old else 0) + 1
        self._facts.change(key, pos, now, {_FACT["confidence"]: d["confidence"], _FACT["sources"]: sources})

    def _fact_invalidated(self, pos: int, now: datetime, at: datetime, d: dict[str, Any]) -> None:
        updates = {_FACT["status"]: "invalidated", _FACT["superseded_by"]: d.get("superseded_by"),
                   _FACT["ended_reason"]: d["reason"]}
        valid_to = ts(d.get("valid_to"))
        if valid_to is not None:
            updates[_FACT["valid_to"]] = valid_to
        self._facts.change((d["tenant"], d["fact_id"]), pos, now, updates)

    def _fact_corrected(self, pos: int, now: datetime, at: datetime, d: dict[str, Any]) -> None:
        updates = {}
        for name in ("valid_from", "valid_to"):
            value = ts(d.get(name))
            if value is not None:  # None: that bound is unchanged
                updates[_FACT[name]] = value
        if d.get("superseded_by") is not None:
            updates[_FACT["superseded_by"]] = d["superseded_by"]
        self._facts.change((d["tenant"], d["fact_id"]), pos, now, updates)

    def _fact_archived(self, pos: int, now: datetime, at: datetime, d: dict[str, Any]) -> None:
        self._facts.change((d["tenant"], d["fact_id"]), pos, now,
                           {_FACT["status"]: "archived", _FACT["ended_reason"]: d["cause"]})

    def _fact_restored(self, pos: int, now: datetime, at: datetime, d: dict[str, Any]) -> None:
        self._facts.change((d["tenant"], d["fact_id"]), pos, now,
                           {_FACT["status"]: "current", _FACT["ended_reason"]: None})

    # ------------------------------------------------------------------ sessions and workers

    def _session(self, tenant: str, session_id: str, pos: int, now: datetime) -> Row | None:
        key = (tenant, session_id)
        row = self._sessions.get(key)
        if row is not None:
            self._touched_sessions.add(key)
            row[_SESSION["updated_at"]], row[_SESSION["position"]] = now, pos
        return row

    def _session_started(self, pos: int, now: datetime, at: datetime, d: dict[str, Any]) -> None:
        key = (d["tenant"], d["session_id"])
        self._sessions[key] = [d["tenant"], d["session_id"], d["agent"], d["kind"], d.get("serving"),
                               d.get("parent_session_id"), d.get("task"), [], None, None, False, 0, [], 0, at,
                               now, pos]
        self._touched_sessions.add(key)

    def _message_appended(self, pos: int, now: datetime, at: datetime, d: dict[str, Any]) -> None:
        session = self._session(d["tenant"], d["session_id"], pos, now)
        if session is not None:
            session[_SESSION["messages"]] += 1

    def _worker_dispatched(self, pos: int, now: datetime, at: datetime, d: dict[str, Any]) -> None:
        tenant, worker_id = d["tenant"], d["worker_session_id"]
        main = self._session(tenant, d["session_id"], pos, now)
        if main is not None and worker_id not in main[_SESSION["workers"]]:
            main[_SESSION["workers"]] = main[_SESSION["workers"]] + [worker_id]
        worker = self._session(tenant, worker_id, pos, now)
        if worker is None and main is not None:
            worker = [tenant, worker_id, main[_SESSION["agent"]], "worker", main[_SESSION["serving"]],
                      main[_SESSION["session_id"]], d["task"], [], None, None, False, 0, [], 0, at, now, pos]
            self._sessions[(tenant, worker_id)] = worker
            self._touched_sessions.add((tenant, worker_id))
        if worker is not None:
            worker[_SESSION["task"]], worker[_SESSION["about"]] = d["task"], list(d.get("about", ()))
            worker[_SESSION["status"]] = "dispatched"

    def _worker_reported(self, pos: int, now: datetime, at: datetime, d: dict[str, Any]) -> None:
        worker = self._session(d["tenant"], d["session_id"], pos, now)
        about = list(d.get("about", ()))
        if worker is not None:
            worker[_SESSION["status"]], worker[_SESSION["last_summary"]] = d["status"], d["summary"]
            worker[_SESSION["about"]] = list(dict.fromkeys(worker[_SESSION["about"]] + about))

    def _session_compacted(self, pos: int, now: datetime, at: datetime, d: dict[str, Any]) -> None:
        session = self._session(d["tenant"], d["session_id"], pos, now)
        if session is not None:
            session[_SESSION["compactions"]] += 1

    def _session_ended(self, pos: int, now: datetime, at: datetime, d: dict[str, Any]) -> None:
        session = self._session(d["tenant"], d["session_id"], pos, now)
        if session is not None:
            session[_SESSION["ended"]] = True

    _handlers: dict[str, Callable[[BatchFold, int, datetime, datetime, dict[str, Any]], None]] = {
        "entity.registered": _entity_registered,
        "entity.updated": _entity_updated,
        "entity.merged": _entities_merged,
        "relation.defined": _relation_defined,
        "fact.asserted": _fact_asserted,
        "fact.corroborated": _fact_corroborated,
        "fact.invalidated": _fact_invalidated,
        "fact.corrected": _fact_corrected,
        "fact.archived": _fact_archived,
        "fact.restored": _fact_restored,
        "session.started": _session_started,
        "message.appended": _message_appended,
        "worker.dispatched": _worker_dispatched,
        "worker.reported": _worker_reported,
        "session.compacted": _session_compacted,
        "session.ended": _session_ended,
    }
