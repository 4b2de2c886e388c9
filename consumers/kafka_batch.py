"""One partition's batch into the log, exactly once, with every input either stored or dead-lettered.

The order of effects is what makes a crash harmless at every point:

1. Decode every input (`parse_envelope`, `to_command`: the Ingestor's steps). What cannot be decoded (bytes,
   JSON, schema) is produced to the dead-letter topic and *flushed* before anything is written.
2. Try the rest as one atomic write with the tracking position (`execute_batch(all_or_nothing=True)`).
   If nothing is rejected, events and position are committed together: done.
3. Otherwise nothing was written. The inputs the rules rejected are produced to the dead-letter topic, or,
   when what they name is not there yet (unknown tenant, session, entity or fact: consumers/parking.py), to the
   park topic, and *flushed*; then step 2 runs again without them.

A crash before the write leaves no position stored, so the batch is read again and each rejected input is
dead-lettered again with the same source coordinates (duplicates the DLQ readers fold away); a crash after it
is a redelivery that the stored position turns into a no-op. So stored + dead-lettered = distinct inputs.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from consumers.dead_letters.records import DeadLetter, DeadLetterSink, SourceCoordinates, field_path
from consumers.parking import Parked, ParkPolicy, waits_for_dependency
from domain.application.ingestion import Ingestor
from domain.application.wire import parse_envelope, to_command
from domain.commands import Command
from domain.errors import DomainError, InfrastructureError
from domain.ports import TrackingPosition

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Incoming:
    """One input: its bytes and where it was first read (for a replayed dead letter: its original source)."""

    value: bytes | None
    source: SourceCoordinates
    position: int
    """The offset this input was read at, in the topic being consumed: what the tracking position counts."""
    key: bytes | None = None
    timestamp_ms: int | None = None
    headers: tuple[tuple[str, bytes], ...] = ()
    attempt: int = 1
    parked: Parked | None = None
    """Set when this input was read back from the park topic (`position` is then its offset there)."""

    @classmethod
    def from_record(cls, record: Any) -> Incoming:
        return cls(value=record.value, source=SourceCoordinates(record.topic, record.partition, record.offset),
                   position=record.offset, key=record.key,
                   timestamp_ms=record.timestamp if record.timestamp >= 0 else None,
                   headers=tuple((k, v) for k, v in (record.headers or [])))


@dataclass
class BatchReport:
    consumed: int = 0
    accepted: int = 0
    """Inputs stored: their events were appended, or their event id was stored before (a repeat)."""
    stored_events: int = 0
    repeats: int = 0
    dead_lettered: list[DeadLetter] = field(default_factory=list)
    already_tracked: bool = False
    """Another consumer (or an earlier life of this one) stored this batch already: nothing was done."""
    positions: list[int] = field(default_factory=list)
    parked: list[DeadLetter] = field(default_factory=list)
    """Inputs parked (first time) or parked again, to be tried later (consumers/parking.py)."""
    unparked: int = 0
    """Inputs read back from the park topic and stored."""


def is_transient(error: BaseException) -> bool:
    """Failures of infrastructure (broker, store, network): retry the batch later, never dead-letter it. The event
    log's adapter raises every failure of the store as an InfrastructureError (infra/adapters/eventlog.py)."""
    from kafka.errors import KafkaError

    return isinstance(error, InfrastructureError | KafkaError | OSError)


class BatchProcessor:
    def __init__(
        self,
        ingestor: Ingestor,
        sink: DeadLetterSink,
        *,
        tracked_position: Callable[[str], int | None] | None = None,
        on_stored: Callable[[Command], None] | None = None,
        park: DeadLetterSink | None = None,
        policy: ParkPolicy | None = None,
        clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self._ingestor = ingestor
        self._sink = sink
        self._park = park
        """Where inputs waiting for a dependency go (None: they are dead-lettered at once)."""
        self._policy = policy or ParkPolicy()
        self._clock_ms = clock_ms
        self._heads: dict[tuple[str, bytes | None], int] = {}
        """Per (tenant, record key): the park offset of the earliest input of that key parked again and not yet
        read back; later parked inputs of the key wait behind it."""
        self._tracked_position = tracked_position
        """The log's stored position for a tracking name: a redelivery is skipped before dead-lettering."""
        self._on_stored = on_stored
        """Called for each stored command after the write (the consolidation hook); must not block."""

    def process(self, tracking: TrackingPosition, items: Sequence[Incoming]) -> BatchReport:
        """Store `items` and the position `tracking` atomically; dead-letter (flushed first) what is rejected.

        Transient failures raise (nothing stored: retry the batch). An unexpected error from the code itself
        falls back to one input per write, so only the input that triggers it is dead-lettered.
        """
        try:
            return self._process(tracking, items)
        except Exception as error:
            if is_transient(error):
                raise
            log.exception("unexpected error in a batch ending at %s; storing it one input at a time", tracking)
            return self._one_by_one(tracking, items)

    def forget_heads(self) -> None:
        """After the park topic's partitions move (a rebalance), what this process remembered is stale."""
        self._heads.clear()

    def _process(self, tracking: TrackingPosition, items: Sequence[Incoming]) -> BatchReport:
        report = BatchReport(consumed=len(items))
        stored = self._tracked_position(tracking.name) if self._tracked_position else None
        if stored is not None and stored >= tracking.position:
            return BatchReport(consumed=len(items), already_tracked=True)
        now_ms = self._clock_ms()
        parking = self._park is not None and self._policy.enabled
        # Decoded once; only the rules run again when a rejection makes the batch be tried without it.
        commands: dict[int, Command] = {}
        unsent: list[DeadLetter] = []
        to_park: list[tuple[tuple[str, bytes | None], Incoming, DeadLetter]] = []
        for index, item in enumerate(items):
            try:
                commands[index] = to_command(parse_envelope(item.value))  # type: ignore[arg-type]
            except (DomainError, ValueError) as error:
                unsent.append(dead_letter(item, str(error), getattr(error, "field", None)))
        waiting: dict[tuple[str, bytes | None], tuple[int, SourceCoordinates]] = {}
        """Keys with an input parked in this batch, and that input: later inputs of the key wait behind it."""
        if parking:
            for index in list(commands):
                item = items[index]
                if item.parked is None:
                    continue
                key = (item.parked.tenant, item.key)
                head = self._heads.get(key)
                if head == item.position:
                    del self._heads[key]  # the head is back: it is tried
                elif head is not None and not self._policy.exhausted(item.parked, now_ms):
                    del commands[index]
                    to_park.append((key, item, self._parked(item, key[0], f"waiting behind the input of key "
                                                            f"{_show(item.key)} parked again at {head}", None,
                                                            now_ms, tried=False)))
        for _round in range(len(items) + 2):
            self._sink.send_all(unsent)
            report.dead_lettered.extend(unsent)
            unsent = []
            self._send_parked(to_park, report)
            to_park = []
            live = list(commands)
            result = self._ingestor.store([commands[i] for i in live], all_or_nothing=True, tracking=tracking)
            if result.already_tracked:
                return BatchReport(consumed=len(items), already_tracked=True, dead_lettered=report.dead_lettered,
                                   parked=report.parked)
            rejected = [(i, o.error) for i, o in zip(live, result.outcomes, strict=True) if o.error is not None]
            if not rejected:
                report.accepted = len(live)
                report.stored_events = sum(len(o.events) for o in result.outcomes)
                report.repeats = sum(1 for o in result.outcomes if not o.events)
                report.positions = result.positions
                report.unparked = sum(1 for i in live if items[i].parked is not None)
                if self._on_stored is not None:
                    for outcome in result.outcomes:
                        self._on_stored(outcome.command)
                return report
            for index, rejection in rejected:
                command = commands.pop(index)
                item = items[index]
                path = field_path(rejection)
                reason = f"{path}: {rejection}" if path else str(rejection)
                key = (command.tenant, item.key)
                if parking and waits_for_dependency(rejection) and not self._policy.exhausted(item.parked, now_ms):
                    letter = self._parked(item, command.tenant, reason, path, now_ms, tried=True)
                    if self._park.fits(letter):  # type: ignore[union-attr]
                        to_park.append((key, item, letter))
                        waiting.setdefault(key, (index, item.source))
                        continue
                    reason += "; too large to park"
                elif item.parked is not None:
                    waited = (now_ms - item.parked.since_ms) / 1000
                    reason += f" (parked: tried {item.parked.tries + 1} times over {waited:.1f} s)"
                unsent.append(dead_letter(item, reason, path))
            for index in list(commands) if waiting else ():
                item, command = items[index], commands[index]
                key = (command.tenant, item.key)
                ahead = waiting.get(key)
                if ahead is not None and index > ahead[0] and not self._policy.exhausted(item.parked, now_ms):
                    del commands[index]
                    to_park.append((key, item, self._parked(item, command.tenant, f"waiting behind {ahead[1]}",
                                                            None, now_ms, tried=False)))
        raise RuntimeError(f"batch ending at {tracking} did not settle")  # each round removes >= 1 input

    def _parked(self, item: Incoming, tenant: str, reason: str, path: str | None, now_ms: int,
                tried: bool) -> DeadLetter:
        before = item.parked
        parked = Parked(tenant=tenant, since_ms=before.since_ms if before else now_ms,
                        tries=(before.tries if before else 0) + tried,
                        retry_at_ms=now_ms + int(self._policy.retry_seconds * 1000))
        letter = dead_letter(item, reason, path)
        return dataclasses.replace(letter, extra_headers=parked.headers(), kafka_key=tenant.encode())

    def _send_parked(self, to_park: list[tuple[tuple[str, bytes | None], Incoming, DeadLetter]],
                     report: BatchReport) -> None:
        if not to_park:
            return
        offsets = self._park.send_all([letter for _, _, letter in to_park])  # type: ignore[union-attr]
        for (key, item, _letter), offset in zip(to_park, offsets, strict=True):
            if item.parked is not None:
                self._heads.setdefault(key, offset)  # parked again: the ones behind it wait for it
        report.parked.extend(letter for _, _, letter in to_park)

    def _one_by_one(self, tracking: TrackingPosition, items: Sequence[Incoming]) -> BatchReport:
        total = BatchReport(consumed=len(items))
        for item in items:
            position = TrackingPosition(tracking.name, item.position)
            try:
                report = self._process(position, [item])
            except Exception as error:
                if is_transient(error):
                    raise
                log.exception("input %s makes noumena fail; dead-lettering it", item.source)
                letter = dead_letter(item, f"internal error: {error!r}", None)
                self._sink.send_all([letter])
                report = self._process(position, [])
                report.dead_lettered.append(letter)
            total.accepted += report.accepted
            total.stored_events += report.stored_events
            total.repeats += report.repeats
            total.dead_lettered += report.dead_lettered
            total.positions += report.positions
            total.parked += report.parked
            total.unparked += report.unparked
        return total


def dead_letter(item: Incoming, reason: str, field_name: str | None) -> DeadLetter:
    return DeadLetter(source=item.source, value=item.value, reason=reason, field=field_name, key=item.key,
                      source_timestamp_ms=item.timestamp_ms, attempt=item.attempt, original_headers=item.headers)


def _show(key: bytes | None) -> str:
    return "(none)" if key is None else key.decode("utf-8", errors="replace")
