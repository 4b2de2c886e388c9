"""Exporting the read model as Parquet files, one per table, for tools that do not speak DuckDB."""

from __future__ import annotations

from pathlib import Path

import duckdb

from projections.schema import ALL_TABLES


def export_parquet(con: duckdb.DuckDBPyConnection, out_dir: Path) -> list[Path]:
    """Write every history, version and current table (and the tracking row) as `<out_dir>/<table>.parquet`."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name in [t.name for t in ALL_TABLES] + ["projection_position"]:
        target = out_dir / f"{name}.parquet"
        quoted = "'" + str(target).replace("'", "''") + "'"
        con.execute(f"COPY (SELECT * FROM {name}) TO {quoted} (FORMAT parquet)")
        written.append(target)
    return written
