"""The queries the API serves from the DuckDB read model: entities, a fact with its history, the graph as
believed at T (through the `facts_as_of` macro), sessions and their workers. Every query is scoped to one
tenant by its first parameter; rows come back as plain dicts.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import duckdb

from domain.values import TIMESTAMP_MAX, TIMESTAMP_MIN

Row = dict[str, Any]


def _clamped(value: Any) -> Any:
    """A moment stored before timestamps were bounded (domain/values.py) that lies outside Python's calendar:
    DuckDB answers it as text (`10000-01-01 13:59:59+00`, `0001-12-31 (BC) ...`); it reads as the nearest bound."""
    if isinstance(value, str):
        return TIMESTAMP_MIN if "(BC)" in value or value.startswith("0000-") else TIMESTAMP_MAX
    return value


def _rows(con: duckdb.DuckDBPyConnection, sql: str, params: list[Any]) -> list[Row]:
    cursor = con.execute(sql, params)
    description = cursor.description or ()
    names = [d[0] for d in description]
    rows = cursor.fetchall()
    stamps = [i for i, d in enumerate(description) if str(d[1]).startswith("TIMESTAMP")]
    if stamps and rows:
        rows = [tuple(_clamped(v) if i in stamps else v for i, v in enumerate(row)) for row in rows]
    return [dict(zip(names, row, strict=True)) for row in rows]


def _count(con: duckdb.DuckDBPyConnection, sql: str, params: list[Any]) -> int:
    row = con.execute(f"SELECT count(*) FROM ({sql})", params).fetchone()
    return int(row[0]) if row else 0


_ENTITY_COLUMNS = "ref, label, aliases, hub, needs_review, merged_into, registered_at, updated_at, version"


def entity(con: duckdb.DuckDBPyConnection, tenant: str, ref: str) -> Row | None:
    """The entity as it is now, or None."""
    rows = _rows(con, f"SELECT {_ENTITY_COLUMNS} FROM entities WHERE tenant = ? AND ref = ?", [tenant, ref])
    return rows[0] if rows else None


def search_entities(con: duckdb.DuckDBPyConnection, tenant: str, text: str, skip: int, limit: int
                    ) -> tuple[list[Row], int]:
    """Entities whose ref, label or an alias contains `text` (case-insensitive); exact matches first."""
    needle = text.lower()
    where = ("FROM entities WHERE tenant = ? AND (contains(lower(label), ?) OR contains(lower(ref), ?)"
             " OR list_bool_or(list_transform(aliases, lambda a: contains(lower(a), ?))))")
    params = [tenant, needle, needle, needle]
    total = _count(con, f"SELECT 1 {where}", params)
    rows = _rows(con, f"SELECT {_ENTITY_COLUMNS} {where}"
                      " ORDER BY (lower(label) = ?"
                      " OR list_contains(list_transform(aliases, lambda a: lower(a)), ?)) DESC,"
                      " ref LIMIT ? OFFSET ?", [*params, needle, needle, limit, skip])
    return rows, total


def entities_since(con: duckdb.DuckDBPyConnection, tenant: str, after_position: int) -> tuple[list[Row], int]:
    """The tenant's entities changed after `after_position` (all for -1), as they are now, and the projection's
    position they were read at (the caller's read transaction makes the two agree)."""
    position = clock_position(con)
    rows = _rows(con, "SELECT ref, label, aliases, hub, merged_into FROM entity_versions WHERE tenant = ?"
                      " AND recorded_to IS NULL AND position_from > ? AND position_from <= ?",
                 [tenant, after_position, position])
    return rows, position


def fact_history(con: duckdb.DuckDBPyConnection, tenant: str, fact_id: str) -> tuple[list[Row], list[Row]]:
    """Every version of a fact (both time axes) and every change to it with its provenance, oldest first."""
    versions = _rows(con, "SELECT * EXCLUDE (tenant) FROM fact_versions WHERE tenant = ? AND fact_id = ?"
                          " ORDER BY version", [tenant, fact_id])
    changes = _rows(con, "SELECT position, recorded_at, change, reason, confidence, previous_confidence, valid_from,"
                         " valid_to, superseded_by, supersedes, cause, session_id, message_ids, actor, occurred_at,"
                         " event_id FROM fact_changes WHERE tenant = ? AND fact_id = ? ORDER BY position",
                    [tenant, fact_id])
    return versions, changes


_GRAPH_COLUMNS = ("fact_id, subject, relation, object, scope, reason, confidence, status, valid_from, valid_to,"
                  " asserted_at, sources, superseded_by, supersedes, recorded_from, recorded_to")


def graph_as_of(con: duckdb.DuckDBPyConnection, tenant: str, recorded_at: datetime | None,
                valid_at: datetime | None, skip: int, limit: int) -> tuple[list[Row], int]:
    """The facts believed at `recorded_at` (None: now), optionally holding at `valid_at`, a page at a time."""
    source = "FROM facts_as_of(CAST(? AS TIMESTAMPTZ), valid_at := CAST(? AS TIMESTAMPTZ)) WHERE tenant = ?"
    params: list[Any] = [recorded_at, valid_at, tenant]
    total = _count(con, f"SELECT 1 {source}", params)
    rows = _rows(con, f"SELECT {_GRAPH_COLUMNS} {source} ORDER BY fact_id LIMIT ? OFFSET ?",
                 [*params, limit, skip])
    return rows, total


_SESSION_COLUMNS = ("session_id, agent, kind, serving, parent_session_id, task, about, status, last_summary, ended,"
                    " messages, workers, compactions, started_at, updated_at")


def session(con: duckdb.DuckDBPyConnection, tenant: str, session_id: str) -> Row | None:
    rows = _rows(con, f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE tenant = ? AND session_id = ?",
                 [tenant, session_id])
    return rows[0] if rows else None


def workers(con: duckdb.DuckDBPyConnection, tenant: str, session_id: str) -> list[Row]:
    """The worker sessions a main session dispatched, oldest first."""
    return _rows(con, f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE tenant = ? AND parent_session_id = ?"
                      " AND kind = 'worker' ORDER BY started_at, session_id", [tenant, session_id])


def clock_position(con: duckdb.DuckDBPyConnection) -> int:
    row = con.execute("SELECT position FROM projection_position").fetchone()
    return int(row[0]) if row else 0
