"""Building a projection from scratch in bulk: stage the whole log in DuckDB, then derive every table in SQL.

A replay or rebuild has the whole log in front of it, so it does not need the incremental fold's
"rows as they were before the batch": it copies the stored JSON into a staging table (Arrow, no parsing in
Python), computes transaction time as a window, derives the fact versions with window functions and the history
tables with the same SQL the incremental projector uses. Only entity, session and relation events (few) go
through the Python fold. Tests hold the result equal to the incremental projector's, table by table.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

import duckdb
import pyarrow as pa
from pydantic_core import from_json

from domain.events import event_class_for
from projections.fold import BatchFold, Key, Row, rows_to_arrow
from projections.history import HISTORY_SQL, SESSION_TOPICS
from projections.schema import ALL_TABLES, PROJECTION_NAME
from projections.source import UNKNOWN, RawLog, Record, decode

STAGE_CHUNK = 100_000

_TABLES = {t.name: t for t in ALL_TABLES}
_FOLDED_TOPICS = SESSION_TOPICS | {"entity.registered", "entity.updated", "entity.merged", "relation.defined"}

_NUL = "chr(0)"  # a sentinel for "set to NULL" where last_value(... IGNORE NULLS) carries values forward
_VERSION_FIELDS = ('{"tenant": "VARCHAR", "fact_id": "VARCHAR", "subject": "VARCHAR", "relation": "VARCHAR",'
                   ' "object": "VARCHAR", "scope": "VARCHAR", "reason": "VARCHAR", "confidence": "DOUBLE",'
                   ' "valid_from": "TIMESTAMPTZ", "valid_to": "TIMESTAMPTZ", "superseded_by": "VARCHAR",'
                   ' "supersedes": "VARCHAR", "cause": "VARCHAR"}')

# Each fact event makes a version; a version's attributes are the last value each event type set, up to it.
# (Fact ids are asserted once: rules.fact_id_for numbers every new assertion of a key.)
FACT_VERSIONS_SQL = f"""
INSERT INTO fact_versions
WITH e AS (
  SELECT position, recorded_at AS clock, stamped_at, topic, json_transform(payload, '{_VERSION_FIELDS}') AS j
  FROM _events
  WHERE topic IN ('fact.asserted', 'fact.corroborated', 'fact.invalidated', 'fact.corrected', 'fact.archived',
                  'fact.restored')
)
SELECT j.tenant, j.fact_id,
  CAST(row_number() OVER w AS INTEGER),
  last_value(CASE WHEN topic = 'fact.asserted' THEN j.subject END IGNORE NULLS) OVER w,
  last_value(CASE WHEN topic = 'fact.asserted' THEN j.relation END IGNORE NULLS) OVER w,
  last_value(CASE WHEN topic = 'fact.asserted' THEN j.object END IGNORE NULLS) OVER w,
  last_value(CASE WHEN topic = 'fact.asserted' THEN j.scope END IGNORE NULLS) OVER w,
  nullif(last_value(CASE WHEN topic = 'fact.asserted' THEN coalesce(j.reason, {_NUL}) END IGNORE NULLS) OVER w,
         {_NUL}),
  last_value(CASE WHEN topic IN ('fact.asserted', 'fact.corroborated') THEN j.confidence END IGNORE NULLS) OVER w,
  last_value(CASE topic WHEN 'fact.asserted' THEN 'current' WHEN 'fact.invalidated' THEN 'invalidated'
                        WHEN 'fact.archived' THEN 'archived' WHEN 'fact.restored' THEN 'current' END
             IGNORE NULLS) OVER w,
  nullif(last_value(CASE WHEN topic = 'fact.asserted' THEN coalesce(j.valid_from, TIMESTAMPTZ 'infinity')
                         WHEN topic = 'fact.corrected' THEN j.valid_from END
                    IGNORE NULLS) OVER w, TIMESTAMPTZ 'infinity'),
  nullif(last_value(CASE WHEN topic = 'fact.asserted' THEN coalesce(j.valid_to, TIMESTAMPTZ 'infinity')
                         WHEN topic IN ('fact.invalidated', 'fact.corrected') THEN j.valid_to END IGNORE NULLS) OVER w,
         TIMESTAMPTZ 'infinity'),
  last_value(CASE WHEN topic = 'fact.asserted' THEN stamped_at END IGNORE NULLS) OVER w,
  CAST(count(CASE WHEN topic IN ('fact.asserted', 'fact.corroborated') THEN 1 END) OVER w AS INTEGER),
  nullif(last_value(CASE topic WHEN 'fact.asserted' THEN {_NUL}
                               WHEN 'fact.invalidated' THEN coalesce(j.superseded_by, {_NUL})
                               WHEN 'fact.corrected' THEN j.superseded_by END
                    IGNORE NULLS) OVER w, {_NUL}),
  nullif(last_value(CASE WHEN topic = 'fact.asserted' THEN coalesce(j.supersedes, {_NUL}) END IGNORE NULLS) OVER w,
         {_NUL}),
  nullif(last_value(CASE topic WHEN 'fact.asserted' THEN {_NUL} WHEN 'fact.restored' THEN {_NUL}
                               WHEN 'fact.invalidated' THEN coalesce(j.reason, {_NUL})
                               WHEN 'fact.archived' THEN coalesce(j.cause, {_NUL}) END
                    IGNORE NULLS) OVER w, {_NUL}),
  clock, lead(clock) OVER next, position, lead(position) OVER next
FROM e
WINDOW w AS (PARTITION BY j.tenant, j.fact_id ORDER BY position ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW),
       next AS (PARTITION BY j.tenant, j.fact_id ORDER BY position)
"""


class _EmptyLoader:
    """Nothing exists before the first event."""

    def open_versions(self, table: object, keys: set[Key]) -> dict[Key, Row]:
        return {}

    def current_rows(self, table: object, keys: set[Key]) -> dict[Key, Row]:
        return {}


def _stage(con: duckdb.DuckDBPyConnection, log: RawLog, until: datetime | None,
           progress: Callable[[int, int], None] | None) -> int:
    """Copy the stored events into `_staged` (position, topic, payload); returns how many. With `until`, stop
    after a chunk whose last event was stamped after it: transaction time (the running maximum) is past `until`
    from there on, so nothing later can be believed at `until`."""
    con.execute("CREATE OR REPLACE TEMP TABLE _staged (position BIGINT, topic VARCHAR, payload VARCHAR)")
    topics: dict[str, tuple[str, bool]] = {}
    last, after, count = log.max_position(), 0, 0
    while True:
        raw = log.read_raw(after, STAGE_CHUNK)
        if not raw:
            break
        positions, names, payloads = [], [], []
        for position, stored_topic, state in raw:
            known = topics.get(stored_topic)
            if known is None:
                try:
                    cls, version = event_class_for(stored_topic)
                    known = topics[stored_topic] = (cls.topic, version != cls.version)
                except LookupError:
                    known = topics[stored_topic] = (UNKNOWN, False)
            if known[1]:  # an older version: upcast it as the incremental projector would
                state = decode(position, stored_topic, state).raw
            positions.append(position)
            names.append(known[0])
            payloads.append(state)
        frame = pa.table({"position": pa.array(positions, pa.int64()), "topic": pa.array(names, pa.string()),
                          "payload": pa.array(payloads, pa.binary()).cast(pa.string())})
        con.register("_chunk", frame)
        con.execute("INSERT INTO _staged SELECT * FROM _chunk")
        con.unregister("_chunk")
        after, count = raw[-1][0], count + len(raw)
        if progress is not None:
            progress(after, max(last, after))
        if until is not None and datetime.fromisoformat(from_json(raw[-1][2])["recorded_at"]) > until:
            break
    return count


def bulk_load(con: duckdb.DuckDBPyConnection, log: RawLog, until: datetime | None = None,
              progress: Callable[[int, int], None] | None = None) -> tuple[int, datetime | None, int]:
    """Fill an empty projection (schema created, position 0) from the whole log, or the part believed at
    `until`, in one transaction. Returns (position, clock, events applied)."""
    con.begin()
    try:
        _stage(con, log, until, progress)
        con.execute("""
            CREATE OR REPLACE TEMP TABLE _events AS
            SELECT position, max(stamped_at) OVER (ORDER BY position ROWS UNBOUNDED PRECEDING) AS recorded_at,
                   stamped_at, topic, payload
            FROM (SELECT *, CAST(json_extract_string(payload, '$.recorded_at') AS TIMESTAMPTZ) AS stamped_at
                  FROM _staged)""")
        con.execute("DROP TABLE _staged")
        if until is not None:  # transaction time only grows along the log: this cuts a prefix
            con.execute("DELETE FROM _events WHERE recorded_at > ?", [until])
        position, clock, events = con.execute(
            "SELECT coalesce(max(position), 0), max(recorded_at), count(*) FROM _events").fetchall()[0]
        _fold_the_rest(con)
        con.execute(FACT_VERSIONS_SQL)
        for _needs, sql in HISTORY_SQL:
            con.execute(sql)
        con.execute("DROP TABLE _events")
        con.execute("UPDATE projection_position SET position = ?, clock = ?, updated_at = now() WHERE projection = ?",
                    [position, clock, PROJECTION_NAME])
        con.commit()
    except BaseException:
        con.rollback()
        raise
    return position, clock, events


def _fold_the_rest(con: duckdb.DuckDBPyConnection) -> None:
    """Entities, sessions and relation types through the incremental fold (few events; their rules are
    easier to keep in one place), with transaction time taken from the staged clock."""
    topics = ", ".join(f"'{t}'" for t in sorted(_FOLDED_TOPICS))
    rows = con.execute(f"SELECT position, topic, payload, recorded_at FROM _events WHERE topic IN ({topics})"
                       " ORDER BY position").fetchall()
    if not rows:
        return
    records = [Record(position, topic, from_json(payload), b"") for position, topic, payload, _c in rows]
    changes = BatchFold(_EmptyLoader(), None).fold(records, clocks=[row[3] for row in rows])
    for name, rows_by_key in changes.replaces.items():
        if rows_by_key:
            _insert(con, name, list(rows_by_key.values()))
    for name, new_rows in changes.inserts.items():
        if new_rows:
            _insert(con, name, new_rows)


def _insert(con: duckdb.DuckDBPyConnection, name: str, rows: list[Row]) -> None:
    con.register("_rows", rows_to_arrow(_TABLES[name], rows))
    try:
        con.execute(f"INSERT INTO {name} SELECT * FROM _rows")
    finally:
        con.unregister("_rows")
