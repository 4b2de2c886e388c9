"""Ingestion shared by every entry point (file import, HTTP batches, Kafka): parse, translate, execute.

Nothing is dropped: each input is either accepted (stored, or a repeat of an event id already stored) or
rejected with a reason naming the field, for the caller to keep where a person can see it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from domain.application.ontology_service import BatchResult, OntologyService
from domain.application.wire import EnvelopeBase, WireError, parse_envelope, to_command
from domain.commands import Command
from domain.errors import DomainError
from domain.ports import TrackingPosition

ENVELOPE_FIELDS = {"tenant", "event_id", "occurred_at", "type", "version", "envelope"}


@dataclass(frozen=True)
class Rejected:
    index: int
    reason: str
    field: str | None
    raw: bytes | str | dict[str, Any]


@dataclass
class IngestResult:
    accepted: int = 0
    stored_events: int = 0
    duplicates: int = 0
    rejected: list[Rejected] = field(default_factory=list)
    positions: list[int] = field(default_factory=list)
    already_tracked: bool = False
    commands: list[Command] = field(default_factory=list)

    @property
    def last_position(self) -> int | None:
        return self.positions[-1] if self.positions else None


def _payload_path(error: DomainError) -> str | None:
    if error.field is None or error.field.split(".")[0].split("[")[0] in ENVELOPE_FIELDS:
        return error.field
    return f"payload.{error.field}"


class Ingestor:
    def __init__(self, service: OntologyService, on_stored: Callable[[Command], None] | None = None) -> None:
        self._service = service
        self._on_stored = on_stored
        """Called for each stored command, after the write (e.g. to start consolidation)."""

    def store(self, commands: Sequence[Command], *, tracking: TrackingPosition | None = None,
              all_or_nothing: bool = True) -> BatchResult:
        """Store commands already decoded from a source (a Kafka batch, a replayed dead letter) in one atomic
        write with the source's position (`tracking`: a position stored before writes nothing and says so).
        The caller decides what to do with rejections and calls its own `on_stored`."""
        return self._service.execute_batch(commands, all_or_nothing=all_or_nothing, tracking=tracking)

    def parse(self, raws: Sequence[bytes | str | dict[str, Any]]) -> tuple[list[tuple[int, EnvelopeBase]],
                                                                           list[Rejected]]:
        good: list[tuple[int, EnvelopeBase]] = []
        bad: list[Rejected] = []
        for index, raw in enumerate(raws):
            try:
                good.append((index, parse_envelope(raw)))
            except WireError as error:
                bad.append(Rejected(index, str(error), error.field, raw))
        return good, bad

    def ingest(
        self,
        raws: Sequence[bytes | str | dict[str, Any]],
        *,
        all_or_nothing: bool = False,
        tracking: TrackingPosition | None = None,
    ) -> IngestResult:
        """Ingest a batch in one atomic write. With all_or_nothing, any rejection writes nothing."""
        good, bad = self.parse(raws)
        result = IngestResult(rejected=bad)
        if all_or_nothing and bad:
            return result
        commands: list[Command] = []
        indices: list[int] = []
        for index, envelope in good:
            try:
                commands.append(to_command(envelope))
                indices.append(index)
            except (DomainError, ValueError) as error:
                result.rejected.append(Rejected(index, str(error), getattr(error, "field", None), raws[index]))
        if all_or_nothing and result.rejected:
            return result
        batch = self._service.execute_batch(commands, all_or_nothing=all_or_nothing, tracking=tracking)
        result.already_tracked = batch.already_tracked
        result.positions = batch.positions
        for index, outcome in zip(indices, batch.outcomes, strict=True):
            if outcome.error is not None:
                path = _payload_path(outcome.error)
                result.rejected.append(Rejected(index, f"{path}: {outcome.error}" if path else str(outcome.error),
                                                path, raws[index]))
            else:
                result.accepted += 1
                result.stored_events += len(outcome.events)
                if not outcome.events:
                    result.duplicates += 1
                result.commands.append(outcome.command)
        if all_or_nothing and result.rejected:
            result.accepted, result.stored_events, result.duplicates, result.commands = 0, 0, 0, []
        result.rejected.sort(key=lambda r: r.index)
        if self._on_stored and not batch.already_tracked:
            for command in result.commands:
                self._on_stored(command)
        return result
