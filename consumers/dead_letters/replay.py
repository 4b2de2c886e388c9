"""`noumena dlq list|replay|discard`: inspect dead letters, re-submit them after a fix, or give one up for good.

Replay takes the pending dead letters of every DLQ partition together, in the order of their original timestamps
(the source record's, else the time it was dead-lettered), so an input replays after what it depended on even
when the two came from different partitions. It tries them all, then again those that failed, as long as a pass
stores something (a fixpoint): within one replay nothing is re-appended per pass. Each stored letter is written
with a tracking position of its own (`kafka-dlq:<dlq topic>:<partition>@<offset>`), so a replay is exactly-once
too. At the end, each input that still fails is dead-lettered again once (same source coordinates, attempt + 1,
its latest reason), flushed *before* its old record is marked replayed, so it stays pending for the next replay.
"Pending" = the latest record per source coordinates, neither replayed nor discarded (before per-letter tracking,
a replay stored one position per DLQ partition, `kafka-dlq:<dlq topic>:<partition>`: records at or below it count
as replayed too).

Nothing is skipped silently: a dead letter that cannot be opened (its subject was forgotten; truncated, and its
original no longer readable at its source coordinates or different from its recorded SHA-256; a record on the
topic without noumena's headers) is reported with the reason. `discard` appends a copy of the dead letter with
`noumena.dlq.discarded` (the reason) and `.discarded_at`: it stays on the topic and in `dlq list --all`, and is
never replayed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from consumers.dead_letters.records import (
    PREFIX,
    DeadLetter,
    DeadLetterSink,
    StoredDeadLetter,
    field_path,
    from_record,
    header,
    latest_per_input,
)
from consumers.dead_letters.sealing import is_sealed, seal, unseal
from consumers.kafka_config import connection_options, dlq_producer_options
from consumers.record_size import topic_max_bytes
from domain.application.wire import parse_envelope, to_command
from domain.commands import Command
from domain.errors import DomainError, InfrastructureError
from domain.ports import TrackingPosition

if TYPE_CHECKING:
    from consumers.ports import ConsumerPorts


def replay_tracking_name(dlq_topic: str, partition: int) -> str:
    return f"kafka-dlq:{dlq_topic}:{partition}"


def letter_tracking_name(dlq_topic: str, partition: int, offset: int) -> str:
    """The tracking name that marks one dead letter replayed (its position is its DLQ offset)."""
    return f"kafka-dlq:{dlq_topic}:{partition}@{offset}"


def read_dead_letters(options: dict[str, Any], dlq_topic: str, timeout_s: float = 30.0,
                      foreign: list[tuple[int, int]] | None = None) -> list[StoredDeadLetter]:
    """Every dead letter on the topic now (up to the end offsets at the call), in topic order. Records without
    noumena's headers are left out; `foreign` collects their (partition, offset)."""
    import time

    from kafka import KafkaConsumer, TopicPartition
    from kafka.errors import KafkaError

    try:
        consumer = KafkaConsumer(**options, enable_auto_commit=False, group_id=None, client_id="noumena-dlq-reader")
    except KafkaError as error:
        raise InfrastructureError(f"cannot read the dead-letter topic {dlq_topic}: {error}") from error
    try:
        partitions = consumer.partitions_for_topic(dlq_topic) or set()
        tps = [TopicPartition(dlq_topic, p) for p in sorted(partitions)]
        if not tps:
            return []
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = consumer.end_offsets(tps)
        remaining = {tp for tp in tps if ends[tp] > consumer.position(tp)}
        letters: list[StoredDeadLetter] = []
        deadline = time.monotonic() + timeout_s
        while remaining and time.monotonic() < deadline:
            for tp, records in consumer.poll(timeout_ms=500, max_records=5_000).items():
                for record in records:
                    if record.offset >= ends[tp]:
                        continue
                    if (letter := from_record(record)) is not None:
                        letters.append(letter)
                    elif foreign is not None:
                        foreign.append((record.partition, record.offset))
                if consumer.position(tp) >= ends[tp]:
                    remaining.discard(tp)
        if remaining:
            raise InfrastructureError(f"could not read {dlq_topic} to its end within {timeout_s} s")
        return letters
    finally:
        consumer.close(autocommit=False)


@dataclass
class DeadLetterView:
    letter: StoredDeadLetter
    pending: bool
    forgotten: bool = False
    """Its subject was forgotten: the sealed bytes can no longer be read (value is None)."""
    discarded: str | None = None
    """The reason it was discarded (`noumena dlq discard`), if it was."""

    @property
    def id(self) -> str:
        """How people name it (`dlq list`, `dlq discard`): its source coordinates, `topic/partition@offset`."""
        return str(self.letter.letter.source)

    @property
    def status(self) -> str:
        if self.discarded is not None:
            return f"discarded: {self.discarded}"
        return "pending" if self.pending else "replayed"


def sealer_for(ports: ConsumerPorts) -> Callable[..., bytes | None] | None:
    """Seal dead letters with the subject's keys when content is encrypted (see consumers/dead_letters/sealing.py)."""
    keys = ports.keys
    if keys is None:
        return None
    return lambda value, coordinates, subject_of=None: seal(keys, value, coordinates, subject_of)


def _opened(ports: ConsumerPorts, stored: StoredDeadLetter) -> tuple[StoredDeadLetter, bool]:
    if not is_sealed(stored.letter.value):
        return stored, False
    value = unseal(ports.keys, stored.letter.value)
    return dataclasses.replace(stored, letter=dataclasses.replace(stored.letter, value=value)), value is None


def dead_letters(ports: ConsumerPorts, include_replayed: bool = False,
                 foreign: list[tuple[int, int]] | None = None) -> list[DeadLetterView]:
    """The dead letters, one per input (source coordinates), opened; only those still pending unless asked
    (then replayed and discarded ones too)."""
    settings = ports.settings
    letters = read_dead_letters(connection_options(settings), settings.kafka_dlq_topic, foreign=foreign)
    replayed = _replayed_positions(ports, {s.dlq_partition for s in letters})
    views = []
    for stored in latest_per_input(letters):
        opened, forgotten = _opened(ports, stored)
        discarded = header(stored.letter, "discarded")
        done = stored.dlq_offset <= replayed[stored.dlq_partition] or ports.tracked_position(
            letter_tracking_name(settings.kafka_dlq_topic, stored.dlq_partition, stored.dlq_offset)) is not None
        views.append(DeadLetterView(opened, not done and discarded is None, forgotten, discarded))
    return [v for v in views if include_replayed or v.pending]


def _replayed_positions(ports: ConsumerPorts, partitions: set[int]) -> dict[int, int]:
    topic = ports.settings.kafka_dlq_topic
    positions = {p: ports.tracked_position(replay_tracking_name(topic, p)) for p in partitions}
    return defaultdict(lambda: -1, {p: -1 if v is None else v for p, v in positions.items()})


def original_of(options: dict[str, Any], letter: DeadLetter, timeout_s: float = 10.0) -> tuple[bytes | None, str]:
    """A truncated dead letter's original bytes, read again at its source coordinates and checked against its
    recorded SHA-256; (None, why) when they cannot be had."""
    from kafka import KafkaConsumer, TopicPartition
    from kafka.errors import KafkaError

    source = letter.source
    try:
        consumer = KafkaConsumer(**options, enable_auto_commit=False, group_id=None, client_id="noumena-dlq-reader")
    except KafkaError as error:
        return None, f"cannot read the original at {source}: {error}"
    try:
        tp = TopicPartition(source.topic, source.partition)
        if source.partition not in (consumer.partitions_for_topic(source.topic) or set()):
            return None, f"truncated, and its source partition {source.topic}/{source.partition} does not exist"
        consumer.assign([tp])
        if consumer.beginning_offsets([tp])[tp] > source.offset:
            return None, f"truncated, and its original at {source} is gone (the topic's retention removed it)"
        consumer.seek(tp, source.offset)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for record in consumer.poll(timeout_ms=500).get(tp, []):
                if record.offset != source.offset:
                    continue
                digest = hashlib.sha256(record.value or b"").hexdigest()
                if digest != header(letter, "original.sha256"):
                    return None, f"truncated, and the record now at {source} is not its original (SHA-256 differs)"
                return record.value, ""
        return None, f"truncated, and its original at {source} could not be read within {timeout_s:g} s"
    except KafkaError as error:
        return None, f"truncated, and its original at {source} could not be read: {error}"
    finally:
        consumer.close(autocommit=False)


@dataclass
class ReplayReport:
    replayed: int = 0
    stored: int = 0
    still_failing: int = 0
    forgotten: int = 0
    passes: int = 0
    reasons: list[str] = field(default_factory=list)
    """`<id>: <reason>` of each input that still fails."""
    unopened: list[str] = field(default_factory=list)
    """`<id>: <why>` of each pending dead letter that could not be opened (so not replayed)."""


def _order(view: DeadLetterView) -> tuple[int, str, int, int]:
    d = view.letter.letter
    when = d.source_timestamp_ms if d.source_timestamp_ms is not None else int(d.dead_lettered_at.timestamp() * 1000)
    return when, d.source.topic, d.source.partition, d.source.offset


def replay(ports: ConsumerPorts, on_stored: Callable[[Command], None] | None = None,
           batch_size: int | None = None) -> ReplayReport:
    """Re-submit every pending dead letter, in original-timestamp order, to a fixpoint; what still fails goes
    back to the DLQ once (attempt + 1); what cannot be opened is reported, never skipped silently."""
    del batch_size  # one letter per write: each has its own tracking position
    settings = ports.settings
    options = connection_options(settings)
    foreign: list[tuple[int, int]] = []
    views = dead_letters(ports, foreign=foreign)
    report = ReplayReport(forgotten=sum(v.forgotten for v in views))
    report.unopened += [f"{settings.kafka_dlq_topic}/{p}@{o} (DLQ record): not a noumena dead letter (no "
                        "noumena.dlq headers); left as it is" for p, o in foreign]
    tries: list[tuple[DeadLetterView, bytes | None]] = []
    for view in sorted(views, key=_order):
        letter = view.letter.letter
        if view.forgotten:
            report.unopened.append(f"{view.id}: its subject was forgotten (the key that sealed it is deleted); "
                                   "not brought back")
        elif header(letter, "truncated"):
            original, why = original_of(options, letter)
            if original is None:
                report.unopened.append(f"{view.id}: {why}")
            else:
                tries.append((view, original))
        else:
            tries.append((view, letter.value))
    failing: dict[int, tuple[DeadLetterView, bytes | None, str, str | None]] = {}
    stored: list[Command] = []
    remaining = list(range(len(tries)))
    while remaining:
        report.passes += 1
        progress, still = False, []
        for index in remaining:
            view, value = tries[index]
            outcome = _try(ports, view, value)
            if isinstance(outcome, Rejection):
                failing[index] = (view, value, outcome.reason, outcome.field)
                still.append(index)
                continue
            progress = True
            failing.pop(index, None)
            if outcome is not None:
                stored.append(outcome)
        remaining = still if progress else []
    report.stored = len(stored)
    report.replayed = len(tries)
    if failing:
        sink = DeadLetterSink.connect(dlq_producer_options(settings), settings.kafka_dlq_topic, sealer_for(ports),
                                      topic_max_bytes(options, settings.kafka_dlq_topic,
                                                      settings.kafka_max_message_bytes))
        try:
            for view, value, reason, path in failing.values():
                letter = view.letter.letter
                again = dataclasses.replace(letter, value=value, reason=reason, field=path,
                                            attempt=letter.attempt + 1, dead_lettered_at=datetime.now(UTC),
                                            extra_headers=())
                sink.send_all([again])  # flushed before the old record is marked replayed
                ports.ingestor.store([], tracking=_tracking(settings.kafka_dlq_topic, view))
                report.still_failing += 1
                report.reasons.append(f"{view.id}: {reason}")
        finally:
            sink.close()
    if on_stored is not None:
        for command in stored:
            on_stored(command)
    return report


@dataclass(frozen=True)
class Rejection:
    reason: str
    field: str | None


def _tracking(dlq_topic: str, view: DeadLetterView) -> TrackingPosition:
    return TrackingPosition(letter_tracking_name(dlq_topic, view.letter.dlq_partition, view.letter.dlq_offset),
                            view.letter.dlq_offset)


def _try(ports: ConsumerPorts, view: DeadLetterView, value: bytes | None) -> Command | Rejection | None:
    """Store one dead letter's input with its own tracking position: its command if stored, None if a replay
    stored it before, else its rejection (nothing written)."""
    try:
        command = to_command(parse_envelope(value))  # type: ignore[arg-type]
    except (DomainError, ValueError) as error:
        return Rejection(str(error), getattr(error, "field", None))
    result = ports.ingestor.store([command], tracking=_tracking(ports.settings.kafka_dlq_topic, view))
    if result.already_tracked:
        return None
    error = result.outcomes[0].error
    if error is not None:
        path = field_path(error)
        return Rejection(f"{path}: {error}" if path else str(error), path)
    return command


def discard(ports: ConsumerPorts, ids: list[str], reason: str) -> list[str]:
    """Mark dead letters (by id, `topic/partition@offset` of their source) discarded with a reason: a copy with
    `noumena.dlq.discarded` is appended, so the letter stays visible (`dlq list --all`) and is never replayed.
    Raises ValueError naming the ids that are not dead letters. Returns the ids discarded."""
    if not reason.strip():
        raise ValueError("a discard needs a reason (--reason)")
    settings = ports.settings
    options = connection_options(settings)
    latest = {str(s.letter.source): s for s in latest_per_input(read_dead_letters(options, settings.kafka_dlq_topic))}
    unknown = [i for i in ids if i not in latest]
    if unknown:
        raise ValueError(f"not dead letters: {', '.join(unknown)} (ids are source coordinates as `dlq list` shows "
                         "them: topic/partition@offset)")
    marks = [(PREFIX + "discarded", reason.encode()), (PREFIX + "discarded_at", datetime.now(UTC).isoformat().encode())]
    sink = DeadLetterSink.connect(dlq_producer_options(settings), settings.kafka_dlq_topic)  # values stay as stored
    try:
        sink.send_all([dataclasses.replace(latest[i].letter, extra_headers=tuple(
            h for h in latest[i].letter.extra_headers if h[0] not in dict(marks)) + tuple(marks)) for i in ids])
    finally:
        sink.close()
    return ids
