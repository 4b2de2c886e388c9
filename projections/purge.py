"""After a forget: no projection, snapshot or export may keep the forgotten content.

DuckDB does not zero freed blocks, so updating rows in place could leave the old text in the file. Instead the
live projection is rebuilt from the log — which now reads `[forgotten]` for the subject's content — into a new
file that replaces the old one, the snapshot is republished from it, and every Parquet export noumena made
(`noumena export` registers its directories in `<home>/exports.json`) is written again.
"""

from __future__ import annotations

import json
from pathlib import Path

from projections.export import export_parquet
from projections.files import ProjectionFiles
from projections.projector import ProjectionLocked
from projections.rebuild import rebuild
from projections.snapshot import open_snapshot
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
