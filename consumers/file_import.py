"""`noumena import FILE.jsonl`: ingest a file of envelopes; rejected lines go to a rejects file beside it.

A rejects file keeps each rejected line whole (so a person can see and fix it), which may hold content. Every
rejects file written is registered in `<home>/rejects.json`; a forget redacts, in place, the input of every
rejected line attributable to a forgotten subject (`redact_rejects`: the line names the subject's ref, or the id
of a session erased with it, and its tenant is the forget's or unreadable). A line that names the person only by
their name, not by a ref, cannot be attributed and stays: see docs/forgetting.md."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from domain.application.ingestion import Ingestor

BATCH_LINES = 500


@dataclass
class ImportReport:
    lines_read: int = 0
    accepted: int = 0
    duplicates: int = 0
    rejected: int = 0
    blank_lines: int = 0
    rejects_path: Path | None = None
    first_rejections: list[str] = field(default_factory=list)
    last_position: int | None = None


def rejects_path_for(path: Path) -> Path:
    return path.with_name(path.name + ".rejects.jsonl")


def _batches(path: Path, report: ImportReport) -> Iterator[list[tuple[int, str]]]:
    batch: list[tuple[int, str]] = []
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            line = raw.rstrip(b"\r\n")
            if not line.strip():
                report.blank_lines += 1
                continue
            batch.append((number, line.decode("utf-8", errors="surrogateescape")))
            if len(batch) >= BATCH_LINES:
                yield batch
                batch = []
    if batch:
        yield batch


def rejects_registry(home: Path) -> Path:
    return Path(home) / "rejects.json"


def register_rejects(home: Path, rejects: Path) -> None:
    """Remember a rejects file, so a later forget redacts it too."""
    registry = rejects_registry(home)
    known = json.loads(registry.read_text()) if registry.exists() else []
    if str(rejects.resolve()) not in known:
        known.append(str(rejects.resolve()))
        registry.parent.mkdir(parents=True, exist_ok=True)
        registry.write_text(json.dumps(known, indent=2))


def _strings(value: object) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _attributable(line: str, tenant: str, refs: set[str], session_ids: set[str]) -> bool:
    try:
        envelope = json.loads(line)
    except (ValueError, RecursionError):
        envelope = None
    if isinstance(envelope, dict) and isinstance(envelope.get("tenant"), str) and envelope["tenant"] != tenant:
        return False
    if envelope is None:
        return any(ref in line for ref in refs)
    return any(text in session_ids or any(ref in text for ref in refs) for text in _strings(envelope))


def redact_rejects(home: Path, tenant: str, subjects: Iterable[str]) -> int:
    """After a forget: in every registered rejects file, replace the input of each line attributable to one of
    `subjects` with `[forgotten]` (line number, reason and field stay), overwriting the file in place. Returns
    how many files were rewritten."""
    registry = rejects_registry(home)
    if not registry.exists():
        return 0
    subjects = list(subjects)
    refs = set(subjects)
    session_ids = {s.split(":", 1)[1] for s in subjects if s.startswith("session:")}
    rewritten = 0
    for path in map(Path, json.loads(registry.read_text())):
        if not path.is_file():
            continue
        lines = path.read_text(encoding="utf-8", errors="surrogateescape").splitlines()
        changed = False
        for i, text in enumerate(lines):
            try:
                row = json.loads(text)
            except (ValueError, RecursionError):
                continue
            if isinstance(row, dict) and isinstance(row.get("input"), str) and row["input"] != "[forgotten]" and \
                    _attributable(row["input"], tenant, refs, session_ids):
                row["input"] = "[forgotten]"
                lines[i] = json.dumps(row, ensure_ascii=False)
                changed = True
        if changed:
            data = ("\n".join(lines) + "\n").encode("utf-8", errors="surrogateescape")
            with path.open("r+b") as handle:  # in place: the old bytes are overwritten, not left in a freed block
                handle.write(data)
                handle.truncate()
                handle.flush()
                os.fsync(handle.fileno())
            rewritten += 1
    return rewritten


def import_file(
    path: Path, ingestor: Ingestor, progress: Callable[[int], None] | None = None, home: Path | None = None
) -> ImportReport:
    """Ingest every line; write each rejected line with its number and reason to `<file>.rejects.jsonl`."""
    report = ImportReport()
    rejects_path = rejects_path_for(path)
    rejects = None
    try:
        for batch in _batches(path, report):
            result = ingestor.ingest([line for _, line in batch])
            report.lines_read += len(batch)
            report.accepted += result.accepted
            report.duplicates += result.duplicates
            report.last_position = result.last_position or report.last_position
            for rejected in result.rejected:
                number, line = batch[rejected.index]
                if rejects is None:
                    rejects = rejects_path.open("a", encoding="utf-8", errors="surrogateescape")
                    report.rejects_path = rejects_path
                    if home is not None:
                        register_rejects(home, rejects_path)
                rejects.write(json.dumps({
                    "line": number, "reason": rejected.reason, "field": rejected.field, "input": line,
                    "file": str(path), "rejected_at": datetime.now(UTC).isoformat(),
                }, ensure_ascii=False) + "\n")
                report.rejected += 1
                if len(report.first_rejections) < 10:
                    report.first_rejections.append(f"line {number}: {rejected.reason}")
            if rejects is not None:
                rejects.flush()
            if progress:
                progress(sum(len(line) + 1 for _, line in batch))
    finally:
        if rejects is not None:
            rejects.close()
    return report
