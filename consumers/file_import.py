"""`noumena import FILE.jsonl`: ingest a file of envelopes; rejected lines go to a rejects file beside it."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from consumers.ingest import Ingestor

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


def import_file(
    path: Path, ingestor: Ingestor, progress: Callable[[int], None] | None = None
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
