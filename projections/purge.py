"""After a forget: no projection, snapshot or export may keep the forgotten content.

DuckDB does not zero freed blocks, so updating rows in place could leave the old text in the file. Instead the
live projection is rebuilt from the log — which now reads `[forgotten]` for the subject's content — into a new
file that replaces the old one, the snapshot is republished from it, and every Parquet export noumena made
(`noumena export` registers its directories in `<home>/exports.json`) is written again.
"""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pyarrow as pa

from domain.forgetting import FORGOTTEN
from projections.export import export_parquet
from projections.files import ProjectionFiles
from projections.projector import ProjectionLocked, Projector
from projections.rebuild import rebuild
from projections.replay import REPLAY_BATCH, replay
from projections.snapshot import open_snapshot, publish_snapshot
from projections.source import RawLog


def exports_registry(home: Path) -> Path:
    return home / "exports.json"


def register_export(home: Path, directory: Path) -> None:
    """Remember an export directory, so a later forget rewrites it too."""
    registry = exports_registry(home)
    known = json.loads(registry.read_text()) if registry.exists() else []
    if str(directory.resolve()) not in known:
        known.append(str(directory.resolve()))
        registry.parent.mkdir(parents=True, exist_ok=True)
        registry.write_text(json.dumps(known, indent=2))


def rewrite_exports(home: Path, snapshot: Path) -> list[Path]:
    """Export again, from the purged snapshot, into every registered directory that still exists."""
    registry = exports_registry(home)
    if not registry.exists() or not snapshot.exists():
        return []
    rewritten = []
    con = open_snapshot(snapshot)
    try:
        for directory in map(Path, json.loads(registry.read_text())):
            if directory.is_dir():
                export_parquet(con, directory)
                rewritten.append(directory)
    finally:
        con.close()
    return rewritten


def build_purged(log: RawLog, home: Path, out: Path, batch_size: int) -> int:
    """For a running projector (infra/runtime/serving.py): replay the log into `out` (a new file beside the live one),
    republish the snapshot from it and rewrite the exports; returns the position reached. The live file is left
    to the projector, which catches `out` up and swaps it in."""
    built = replay(log, out, batch_size=max(batch_size, REPLAY_BATCH))
    with Projector(log, out) as projector:
        publish_snapshot(projector.con, ProjectionFiles(home).snapshot)
    rewrite_exports(home, ProjectionFiles(home).snapshot)
    return built.position


_MARKER = b'"' + FORGOTTEN.encode() + b'"'
READ_PAGE = 2000


def forgotten_positions(log: RawLog, until: int) -> list[int]:
    """The positions (up to `until`) of the events that read `[forgotten]` somewhere: those whose content a
    forget erased (their key is gone). Only each event's JSON is searched for the marker; the events are not
    parsed."""
    found: list[int] = []
    position = 0
    while position < until:
        page = log.read_raw(position, READ_PAGE)
        if not page:
            break
        found += [at for at, _, state in page if at <= until and _MARKER in state]
        position = page[-1][0]
    return found


_CONTENT = {  # table -> (id column, the columns holding sealed text, the column naming the event a row came from)
    "entity_versions": ("ref", ("label",), "position_from"),
    "fact_versions": ("fact_id", ("reason", "ended_reason"), "position_from"),
    "fact_changes": ("fact_id", ("reason",), "position"),
    "session_changes": ("session_id", ("task", "summary"), "position"),
}


def redact_in_place(con: duckdb.DuckDBPyConnection, tenant: str, positions: list[int]) -> None:
    """Blank, in the live projection, every text of `tenant` that came from an event at `positions` (events whose
    content now reads `[forgotten]`), so reads can go on while the file is rebuilt behind them.

    Conservative on purpose: every text equal to one of those texts is blanked wherever it is in the tenant (a
    session's task and last summary, an entity's later versions, which carry the label they were given), and
    every text of an entity, fact or session one of those events touched (all its versions and changes). Someone
    else's identical words or a fact's other party's reason may read `[forgotten]` until the rebuilt file, which
    is exact, is swapped in. This does not erase the old text from the file's blocks: the rebuild does."""
    con.register("_forgotten_at", pa.table({"position": pa.array(positions, pa.int64())}))
    try:
        con.begin()
        try:
            texts = [f"SELECT {column} AS text FROM {table} WHERE tenant = $tenant AND {column} IS NOT NULL"
                     f" AND {at} IN (SELECT position FROM _forgotten_at)"
                     for table, (_, columns, at) in _CONTENT.items() for column in columns]
            texts.append("SELECT unnest(aliases) AS text FROM entity_versions WHERE tenant = $tenant"
                         " AND position_from IN (SELECT position FROM _forgotten_at)")
            con.execute("CREATE OR REPLACE TEMP TABLE _forgotten_texts AS SELECT DISTINCT text FROM ("
                        + " UNION ALL ".join(texts) + ") WHERE text IS NOT NULL", {"tenant": tenant})
            for table, (id_column, columns, at) in _CONTENT.items():
                con.execute(f"CREATE OR REPLACE TEMP TABLE _forgotten_ids AS SELECT DISTINCT {id_column} AS id"
                            f" FROM {table} WHERE tenant = $tenant AND {at} IN (SELECT position FROM _forgotten_at)",
                            {"tenant": tenant})
                touched = f"{id_column} IN (SELECT id FROM _forgotten_ids)"
                for column in columns:
                    con.execute(f"UPDATE {table} SET {column} = $forgotten WHERE tenant = $tenant"
                                f" AND {column} IS NOT NULL AND {column} <> $forgotten AND ({touched}"
                                f" OR {column} IN (SELECT text FROM _forgotten_texts))",
                                {"tenant": tenant, "forgotten": FORGOTTEN})
                if table == "entity_versions":
                    con.execute(f"UPDATE entity_versions SET aliases = [] WHERE tenant = $tenant AND len(aliases) > 0"
                                f" AND ({touched} OR list_has_any(aliases,"
                                " (SELECT coalesce(list(text), []) FROM _forgotten_texts)))", {"tenant": tenant})
            for column in ("task", "last_summary"):
                con.execute(f"UPDATE sessions SET {column} = $forgotten WHERE tenant = $tenant AND {column} IS NOT NULL"
                            f" AND {column} <> $forgotten AND (session_id IN (SELECT DISTINCT session_id FROM"
                            " session_changes WHERE tenant = $tenant AND position IN (SELECT position FROM"
                            f" _forgotten_at)) OR {column} IN (SELECT text FROM _forgotten_texts))",
                            {"tenant": tenant, "forgotten": FORGOTTEN})
            con.execute("DROP TABLE _forgotten_texts")
            con.execute("DROP TABLE IF EXISTS _forgotten_ids")
            con.commit()
        except BaseException:
            con.rollback()
            raise
    finally:
        con.unregister("_forgotten_at")


def purge_projections(log: RawLog, home: Path) -> int | None:
    """Rebuild the live projection and snapshot without forgotten content, and rewrite the exports.

    Returns the position rebuilt to, or None when a running projector holds the live file: it purges itself
    when it reads the `subject.forgotten` event."""
    files = ProjectionFiles(home)
    if not files.live.exists():
        return None
    try:
        built = rebuild(log, files, publish=True)
    except ProjectionLocked:
        return None
    rewrite_exports(home, files.snapshot)
    return built.position
