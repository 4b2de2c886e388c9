"""Read-only SQL on the published snapshot, with polars frames as results."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from projections.snapshot import open_snapshot


def run_sql(snapshot: Path, sql: str) -> pl.DataFrame:
    """Run one statement on the snapshot (opened read-only: writes fail) and return its rows."""
    con = open_snapshot(snapshot)
    try:
        relation = con.sql(sql)
        return relation.pl() if relation is not None else pl.DataFrame()
    finally:
        con.close()
