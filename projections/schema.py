"""The DuckDB read model: every table once, as DuckDB DDL and as the Arrow schema its bulk loads use.

Transaction-time columns (`recorded_at`, `recorded_from`, `recorded_to`) hold the clock table's time for a log
position: the running maximum of the writers' stamps, so transaction time never goes backwards along the log.
Versioned tables use half-open intervals: a version is believed at T when `recorded_from <= T < recorded_to`
(`recorded_to` NULL = still believed) and holds in the world at V when `valid_from <= V < valid_to` (NULL = open).
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb
import pyarrow as pa

SCHEMA_VERSION = 1

_TYPES: dict[str, pa.DataType] = {
    "VARCHAR": pa.string(),
    "VARCHAR[]": pa.list_(pa.string()),
    "BIGINT": pa.int64(),
    "INTEGER": pa.int32(),
    "DOUBLE": pa.float64(),
    "BOOLEAN": pa.bool_(),
    "TIMESTAMPTZ": pa.timestamp("us", tz="UTC"),
}


@dataclass(frozen=True)
class Table:
    name: str
    columns: tuple[tuple[str, str], ...]
    key: tuple[str, ...] = ()
    """The columns that name one row of a current-state table, or one version of a versioned table."""
    comment: str = ""

    @property
    def column_names(self) -> list[str]:
        return [name for name, _ in self.columns]

    @property
    def arrow_schema(self) -> pa.Schema:
        return pa.schema([(name, _TYPES[sql]) for name, sql in self.columns])

    def index(self, column: str) -> int:
        return self.column_names.index(column)  # callers keep the result: this is not for hot loops

    def ddl(self) -> str:
        columns = ",\n  ".join(f'"{name}" {sql}' for name, sql in self.columns)
        return f"CREATE TABLE IF NOT EXISTS {self.name} (\n  {columns}\n)"


def _cols(spec: str) -> tuple[tuple[str, str], ...]:
    pairs = []
    for item in spec.split(","):
        name, sql = item.split()
        pairs.append((name, sql))
    return tuple(pairs)


CLOCK = Table("clock", _cols(
    "position BIGINT, recorded_at TIMESTAMPTZ, stamped_at TIMESTAMPTZ, tenant VARCHAR, topic VARCHAR,"
    " event_id VARCHAR"
), comment="log position -> transaction time (running maximum of the stamps); one row per event")

TENANTS = Table("tenants", _cols(
    "tenant VARCHAR, display_name VARCHAR, created_at TIMESTAMPTZ, position BIGINT"
), comment="one row per tenant created")

FACT_CHANGES = Table("fact_changes", _cols(
    "position BIGINT, recorded_at TIMESTAMPTZ, tenant VARCHAR, fact_id VARCHAR, change VARCHAR,"
    " subject VARCHAR, relation VARCHAR, object VARCHAR, scope VARCHAR, reason VARCHAR, confidence DOUBLE,"
    " previous_confidence DOUBLE, valid_from TIMESTAMPTZ, valid_to TIMESTAMPTZ, superseded_by VARCHAR,"
    " supersedes VARCHAR, cause VARCHAR, source_fact_ids VARCHAR[], session_id VARCHAR, message_ids VARCHAR[],"
    " actor VARCHAR, occurred_at TIMESTAMPTZ, event_id VARCHAR"
), comment="append-only: asserted, corroborated, invalidated, archived, restored, promoted")

FACT_VERSIONS = Table("fact_versions", _cols(
    "tenant VARCHAR, fact_id VARCHAR, version INTEGER, subject VARCHAR, relation VARCHAR, object VARCHAR,"
    " scope VARCHAR, reason VARCHAR, confidence DOUBLE, status VARCHAR, valid_from TIMESTAMPTZ,"
    " valid_to TIMESTAMPTZ, asserted_at TIMESTAMPTZ, sources INTEGER, superseded_by VARCHAR, supersedes VARCHAR,"
    " ended_reason VARCHAR, recorded_from TIMESTAMPTZ, recorded_to TIMESTAMPTZ, position_from BIGINT,"
    " position_to BIGINT"
), key=("tenant", "fact_id"), comment="bitemporal: one row per state a fact was in, on both time axes")

ENTITY_VERSIONS = Table("entity_versions", _cols(
    "tenant VARCHAR, ref VARCHAR, version INTEGER, label VARCHAR, aliases VARCHAR[], hub BOOLEAN,"
    " needs_review BOOLEAN, merged_into VARCHAR, registered_at TIMESTAMPTZ, recorded_from TIMESTAMPTZ,"
    " recorded_to TIMESTAMPTZ, position_from BIGINT, position_to BIGINT"
), key=("tenant", "ref"), comment="one row per state an entity was in, on transaction time")

SESSIONS = Table("sessions", _cols(
    "tenant VARCHAR, session_id VARCHAR, agent VARCHAR, kind VARCHAR, serving VARCHAR, parent_session_id VARCHAR,"
    " task VARCHAR, about VARCHAR[], status VARCHAR, last_summary VARCHAR, ended BOOLEAN, messages INTEGER,"
    " workers VARCHAR[], compactions INTEGER, started_at TIMESTAMPTZ, updated_at TIMESTAMPTZ, position BIGINT"
), key=("tenant", "session_id"), comment="sessions as they are now; workers: kind = 'worker'")

SESSION_CHANGES = Table("session_changes", _cols(
    "position BIGINT, recorded_at TIMESTAMPTZ, tenant VARCHAR, session_id VARCHAR, change VARCHAR,"
    " worker_session_id VARCHAR, status VARCHAR, task VARCHAR, summary VARCHAR, about VARCHAR[],"
    " message_id VARCHAR, role VARCHAR, occurred_at TIMESTAMPTZ"
), comment="append-only: started, message, dispatched, reported, compacted, ended")

RELATION_TYPES = Table("relation_types", _cols(
    "tenant VARCHAR, name VARCHAR, functional BOOLEAN, symmetric BOOLEAN, weight DOUBLE, position BIGINT"
), key=("tenant", "name"), comment="relation types a tenant defined (built-in defaults are not listed)")

RECALLS = Table("recalls", _cols(
    "position BIGINT, recorded_at TIMESTAMPTZ, tenant VARCHAR, agent VARCHAR, mode VARCHAR,"
    " perspective_id VARCHAR, fact_ids VARCHAR[], event_id VARCHAR"
), comment="append-only: one row per FactsRecalled, and per agent and mode of a RecallsCoalesced")

FACT_USES = Table("fact_uses", _cols(
    "tenant VARCHAR, agent VARCHAR, fact_id VARCHAR, used_at TIMESTAMPTZ, position BIGINT, mode VARCHAR"
), comment="activation inputs: one row per (recall, fact); the assertion is the first use for every agent")

HISTORY_TABLES = (CLOCK, TENANTS, FACT_CHANGES, SESSION_CHANGES, RECALLS, FACT_USES)
VERSIONED_TABLES = (FACT_VERSIONS, ENTITY_VERSIONS)
CURRENT_TABLES = (SESSIONS, RELATION_TYPES)
ALL_TABLES = HISTORY_TABLES + VERSIONED_TABLES + CURRENT_TABLES

VIEWS = {
    "facts": "SELECT * EXCLUDE (recorded_to, position_to) FROM fact_versions WHERE recorded_to IS NULL",
    "entities": "SELECT tenant, ref, label, aliases, hub, needs_review, merged_into, registered_at,"
                " recorded_from AS updated_at, version FROM entity_versions WHERE recorded_to IS NULL",
    "workers": "SELECT tenant, session_id AS worker_session_id, parent_session_id AS main_session_id, agent,"
               " serving, task, about, status, last_summary, ended, updated_at FROM sessions WHERE kind = 'worker'",
}

TRACKING_DDL = """
CREATE TABLE IF NOT EXISTS projection_position (
  projection VARCHAR PRIMARY KEY,
  position BIGINT NOT NULL,
  clock TIMESTAMPTZ,
  schema_version INTEGER NOT NULL,
  updated_at TIMESTAMPTZ
)"""

PROJECTION_NAME = "noumena"


def create_schema(con: duckdb.DuckDBPyConnection) -> None:
    """Create every table, view and the tracking row if missing (idempotent)."""
    from projections.macros import create_macros

    con.execute(TRACKING_DDL)
    for table in ALL_TABLES:
        con.execute(table.ddl())
        if table.comment:
            comment = table.comment.replace("'", "''")
            con.execute(f"COMMENT ON TABLE {table.name} IS '{comment}'")
    for name, body in VIEWS.items():
        con.execute(f"CREATE OR REPLACE VIEW {name} AS {body}")
    con.execute(
        "INSERT INTO projection_position VALUES (?, 0, NULL, ?, now()) ON CONFLICT DO NOTHING",
        [PROJECTION_NAME, SCHEMA_VERSION],
    )
    create_macros(con)
