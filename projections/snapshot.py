"""Publishing the read model for analysts: a complete copy, swapped in atomically with os.replace.

DuckDB lets one process hold a file read-write and no other process open it at all meanwhile, so readers never
touch the live file: they open the published copy, which is replaced whole (readers that already have the old
one open keep reading the old one).
"""

from __future__ import annotations

import os
from pathlib import Path

import duckdb


def _quote(path: Path) -> str:
    return "'" + str(path).replace("'", "''") + "'"


def publish_snapshot(con: duckdb.DuckDBPyConnection, target: Path) -> None:
    """Copy the database `con` is using (tables, views, macros) to `target`, replacing it atomically."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    for leftover in (tmp, tmp.with_name(tmp.name + ".wal")):
        leftover.unlink(missing_ok=True)
    database = con.execute("SELECT current_database()").fetchall()[0][0]
    con.execute(f"ATTACH {_quote(tmp)} AS noumena_snapshot_out")
    try:
        con.execute(f'COPY FROM DATABASE "{database}" TO noumena_snapshot_out')
    finally:
        con.execute("DETACH noumena_snapshot_out")
    os.replace(tmp, target)


def remove_stale_temporaries(target: Path) -> None:
    """Delete temporaries left by a publisher that was killed mid-copy."""
    for stale in Path(target).parent.glob(f".{Path(target).name}.*.tmp*"):
        stale.unlink(missing_ok=True)


def open_snapshot(path: Path) -> duckdb.DuckDBPyConnection:
    """Open a published snapshot read-only (many readers at once, while the projector keeps publishing)."""
    if not Path(path).exists():
        raise FileNotFoundError(f"no snapshot at {path}: run `noumena snapshot` or `noumena project`")
    con = duckdb.connect(str(path), read_only=True)
    con.execute("SET TimeZone = 'UTC'")
    return con
