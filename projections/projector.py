"""The projector: follows the log in order and writes each batch of view changes together with the new log
position in one DuckDB transaction, so a crash at any point leaves the views at a batch boundary and a restart
resumes exactly after it: nothing applied twice, nothing skipped."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import duckdb
import pyarrow as pa

from domain.errors import InfrastructureError
from projections.fold import BatchChanges, BatchFold, Key, Row, rows_to_arrow
from projections.history import statements_for
from projections.schema import ALL_TABLES, PROJECTION_NAME, SCHEMA_VERSION, Table, create_schema
from projections.snapshot import publish_snapshot
from projections.source import RawLog, read_records

Progress = Callable[[int, int], None]
"""Called with (position reached, last position of the log) after each batch."""

_TABLES = {t.name: t for t in ALL_TABLES}
FORGOTTEN_TOPIC = "subject.forgotten"


class ProjectionError(InfrastructureError):
    """The DuckDB projection cannot be opened or written."""


class ProjectionLocked(ProjectionError):
    """Another process (a running projector) has the projection file open."""


def connect(path: Path) -> duckdb.DuckDBPyConnection:
    """Open a projection file read-write; ProjectionLocked if another process holds it."""
    try:
        return duckdb.connect(str(path))
    except duckdb.IOException as error:
        if "lock" in str(error).lower():
            raise ProjectionLocked(f"{path} is open in another process (is `noumena project` running?)") from None
        raise ProjectionError(f"cannot open {path}: {error}") from error


class _DuckDBLoader:
    """Reads the rows a batch will change, inside the batch's transaction."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self._con = con

    def _select(self, table: Table, keys: set[Key], where: str) -> dict[Key, Row]:
        id_column = table.key[1]
        key_table = pa.table({"tenant": [k[0] for k in keys], "id": [k[1] for k in keys]})
        self._con.register("_batch_keys", key_table)
        try:
            rows = self._con.execute(
                f"SELECT t.* FROM {table.name} AS t SEMI JOIN _batch_keys AS k"
                f" ON t.tenant = k.tenant AND t.{id_column} = k.id {where}"
            ).fetchall()
        finally:
            self._con.unregister("_batch_keys")
        return {(row[0], row[1]): list(row) for row in rows}

    def open_versions(self, table: Table, keys: set[Key]) -> dict[Key, Row]:
        return self._select(table, keys, "WHERE t.recorded_to IS NULL")

    def current_rows(self, table: Table, keys: set[Key]) -> dict[Key, Row]:
        return self._select(table, keys, "")


class Projector:
    """Materializes the log into one DuckDB file. One projector per file (DuckDB allows one writer process)."""

    def __init__(self, log: RawLog, path: Path, *, batch_size: int = 2000, name: str = PROJECTION_NAME) -> None:
        self.log = log
        self.path = Path(path)
        self.batch_size = batch_size
        self.name = name
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.con = connect(self.path)
        self.con.execute("SET TimeZone = 'UTC'")
        self.con.begin()
        create_schema(self.con)
        self.con.commit()
        rows = self.con.execute(
            "SELECT position, clock, schema_version FROM projection_position WHERE projection = ?", [name]
        ).fetchall()
        if not rows:
            raise ProjectionError(f"{self.path} has no tracking row for {name!r}")
        row = rows[0]
        if row[2] != SCHEMA_VERSION:
            raise ProjectionError(f"{self.path} has schema version {row[2]}, this code needs {SCHEMA_VERSION}:"
                                  " run `noumena rebuild`")
        self.position: int = row[0]
        self.clock: datetime | None = row[1]
        self.reached_until = False
        self.last_topics: set[str] = set()
        """The topics of the last batch applied."""
        self.forgotten_pending = False
        """A `subject.forgotten` was applied since the file was last rebuilt: its content must be purged."""

    # ------------------------------------------------------------------ following the log

    def run_once(self, until: datetime | None = None, limit: int | None = None) -> int:
        """Project the next batch (up to `limit` events); with `until`, stop before the first event recorded
        after it. Returns how many events were applied."""
        self.last_topics = set()
        if self.reached_until:
            return 0
        records = read_records(self.log, self.position, limit or self.batch_size)
        if not records:
            return 0
        if records[0].position <= self.position:
            raise ProjectionError(f"the log returned position {records[0].position} after {self.position}")
        self.con.begin()
        try:
            stored = self.con.execute("SELECT position FROM projection_position WHERE projection = ?",
                                      [self.name]).fetchall()
            if not stored or stored[0][0] != self.position:
                raise ProjectionError(f"{self.path} moved under this projector (another writer?)")
            fold = BatchFold(_DuckDBLoader(self.con), self.clock)
            changes = fold.fold(records, until)
            if changes.events:
                self._write(changes)
            self.con.commit()
        except BaseException:
            self.con.rollback()
            raise
        self.reached_until = changes.reached_until
        self.last_topics = changes.topics
        if FORGOTTEN_TOPIC in changes.topics:
            self.forgotten_pending = True
        if changes.events:
            self.position, self.clock = changes.last_position, changes.clock
        return changes.events

    def catch_up(self, until: datetime | None = None, progress: Progress | None = None) -> int:
        """Project until the end of the log as it is now (or until `until`). Returns the events applied."""
        total = 0
        last = self.log.max_position()
        while self.position < last and not self.reached_until:
            applied = self.run_once(until)
            total += applied
            if progress is not None:
                progress(self.position if not self.reached_until else last, last)
            if applied == 0:
                break
        return total

    def publish(self, snapshot: Path) -> int:
        """Publish the views as they are now to `snapshot` (atomically replaced). Returns the position."""
        publish_snapshot(self.con, snapshot)
        return self.position

    # ------------------------------------------------------------------ writing a batch

    def _write(self, changes: BatchChanges) -> None:
        con = self.con
        for name, closes in changes.closes.items():
            if not closes:
                continue
            table = _TABLES[name]
            id_column = table.key[1]
            frame = pa.table({
                "tenant": [c[0] for c in closes], "id": [c[1] for c in closes],
                "version": pa.array([c[2] for c in closes], pa.int32()),
                "recorded_to": pa.array([c[3] for c in closes], pa.timestamp("us", tz="UTC")),
                "position_to": pa.array([c[4] for c in closes], pa.int64()),
            })
            self._with(frame, f"UPDATE {name} AS t SET recorded_to = b.recorded_to, position_to = b.position_to"
                              f" FROM _batch AS b WHERE t.tenant = b.tenant AND t.{id_column} = b.id"
                              " AND t.version = b.version AND t.recorded_to IS NULL")
        for name, rows_by_key in changes.replaces.items():
            if not rows_by_key:
                continue
            table = _TABLES[name]
            keys = pa.table({"tenant": [k[0] for k in rows_by_key], "id": [k[1] for k in rows_by_key]})
            self._with(keys, f"DELETE FROM {name} AS t USING _batch AS b"
                             f" WHERE t.tenant = b.tenant AND t.{table.key[1]} = b.id")
            self._with(rows_to_arrow(table, list(rows_by_key.values())), f"INSERT INTO {name} SELECT * FROM _batch")
        for name, rows in changes.inserts.items():
            if rows:
                self._with(rows_to_arrow(_TABLES[name], rows), f"INSERT INTO {name} SELECT * FROM _batch")
        if changes.events_frame is not None:  # after the versions: fact changes read the facts' first versions
            con.register("_events", changes.events_frame)
            try:
                for sql in statements_for(changes.topics):
                    con.execute(sql)
            finally:
                con.unregister("_events")
        con.execute("UPDATE projection_position SET position = ?, clock = ?, updated_at = now()"
                    " WHERE projection = ?", [changes.last_position, changes.clock, self.name])

    def _with(self, frame: pa.Table, sql: str) -> None:
        self.con.register("_batch", frame)
        try:
            self.con.execute(sql)
        finally:
            self.con.unregister("_batch")

    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> Projector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
