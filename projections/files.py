"""Where the DuckDB files live in the data directory (`settings.home`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ProjectionFiles:
    home: Path

    @property
    def live(self) -> Path:
        """The projector's own database: one writer process, nobody else may open it."""
        return self.home / "projections.duckdb"

    @property
    def snapshot(self) -> Path:
        """The published copy analysts open (read-only, replaced atomically)."""
        return self.home / "snapshot.duckdb"

    @property
    def snapshot_request(self) -> Path:
        """Created by `noumena snapshot` to ask a running projector to publish now; removed when done."""
        return self.home / "snapshot.request"
