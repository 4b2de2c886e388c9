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
    """For a running projector (infra/serving.py): replay the log into `out` (a new file beside the live one),
    republish the snapshot from it and rewrite the exports; returns the position reached. The live file is left
    to the projector, which catches `out` up and swaps it in."""
    built = replay(log, out, batch_size=max(batch_size, REPLAY_BATCH))
    with Projector(log, out) as projector:
        publish_snapshot(projector.con, ProjectionFiles(home).snapshot)
    rewrite_exports(home, ProjectionFiles(home).snapshot)
    return built.position


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
