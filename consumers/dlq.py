"""`noumena dlq list` and `noumena dlq replay`: inspect dead letters, and re-submit them after a fix.

Replay reads the dead-letter topic like any other source, with its own tracking position per DLQ partition
(`kafka-dlq:<dlq topic>:<partition>`) stored with the events, so a replay is exactly-once too. An input that
still fails is dead-lettered again (same source coordinates, attempt + 1) *before* that position is stored,
so it stays pending for the next replay. "Pending" = the latest record per source coordinates that lies after
the replay position.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from consumers.dead_letters import DeadLetterSink, StoredDeadLetter, from_record, latest_per_input
from consumers.dlq_sealing import is_sealed, seal, unseal
from consumers.kafka_batch import BatchProcessor, Incoming
from consumers.kafka_config import connection_options, dlq_producer_options
from domain.commands import Command
from domain.errors import InfrastructureError
from domain.ports import TrackingPosition
from infra.bootstrap import Noumena


def replay_tracking_name(dlq_topic: str, partition: int) -> str:
    return f"kafka-dlq:{dlq_topic}:{partition}"


def read_dead_letters(options: dict[str, Any], dlq_topic: str, timeout_s: float = 30.0) -> list[StoredDeadLetter]:
    """Every dead letter on the topic now (up to the end offsets at the call), in topic order."""
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
                    if record.offset < ends[tp] and (letter := from_record(record)) is not None:
                        letters.append(letter)
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


def sealer_for(noumena: Noumena) -> Callable[[bytes | None, str], bytes | None] | None:
    """Seal dead letters with the subject's keys when content is encrypted (see consumers/dlq_sealing.py)."""
    keys = noumena.log.keys
    if keys is None:
        return None
    return lambda value, coordinates: seal(keys, value, coordinates)


def _opened(noumena: Noumena, stored: StoredDeadLetter) -> tuple[StoredDeadLetter, bool]:
    if not is_sealed(stored.letter.value):
        return stored, False
    value = unseal(noumena.log.keys, stored.letter.value)
    return dataclasses.replace(stored, letter=dataclasses.replace(stored.letter, value=value)), value is None


def dead_letters(noumena: Noumena, include_replayed: bool = False) -> list[DeadLetterView]:
    """The dead letters, one per input (source coordinates), opened; only those still pending unless asked."""
    settings = noumena.settings
    letters = read_dead_letters(connection_options(settings), settings.kafka_dlq_topic)
    replayed = _replayed_positions(noumena, {s.dlq_partition for s in letters})
    views = []
    for stored in latest_per_input(letters):
        opened, forgotten = _opened(noumena, stored)
        views.append(DeadLetterView(opened, stored.dlq_offset > replayed[stored.dlq_partition], forgotten))
    return [v for v in views if include_replayed or v.pending]


def _replayed_positions(noumena: Noumena, partitions: set[int]) -> dict[int, int]:
    topic = noumena.settings.kafka_dlq_topic
    positions = {p: noumena.log.tracked_position(replay_tracking_name(topic, p)) for p in partitions}
    return defaultdict(lambda: -1, {p: -1 if v is None else v for p, v in positions.items()})


@dataclass
class ReplayReport:
    replayed: int = 0
    stored: int = 0
    still_failing: int = 0
    forgotten: int = 0
    reasons: list[str] = field(default_factory=list)


def replay(noumena: Noumena, on_stored: Callable[[Command], None] | None = None,
           batch_size: int | None = None) -> ReplayReport:
    """Re-submit every pending dead letter through the Ingestor; failures go back to the DLQ, counted."""
    settings = noumena.settings
    batch_size = batch_size or settings.kafka_batch_size
    views = dead_letters(noumena)
    report = ReplayReport(forgotten=sum(v.forgotten for v in views))
    pending = [v.letter for v in views if not v.forgotten]  # a forgotten subject's input is not brought back
    sink = DeadLetterSink.connect(dlq_producer_options(settings), settings.kafka_dlq_topic, sealer_for(noumena))
    processor = BatchProcessor(noumena.service, sink, tracked_position=noumena.log.tracked_position,
                               on_stored=on_stored)
    by_partition: dict[int, list[StoredDeadLetter]] = defaultdict(list)
    for stored in pending:
        by_partition[stored.dlq_partition].append(stored)
    try:
        for partition, letters in sorted(by_partition.items()):
            letters.sort(key=lambda s: s.dlq_offset)
            name = replay_tracking_name(settings.kafka_dlq_topic, partition)
            for start in range(0, len(letters), batch_size):
                chunk = letters[start:start + batch_size]
                items = [Incoming(value=s.letter.value, source=s.letter.source, position=s.dlq_offset,
                                  key=s.letter.key, timestamp_ms=s.letter.source_timestamp_ms,
                                  headers=s.letter.original_headers, attempt=s.letter.attempt + 1) for s in chunk]
                result = processor.process(TrackingPosition(name, chunk[-1].dlq_offset), items)
                if result.already_tracked:
                    continue  # another replay got there first
                report.replayed += len(items)
                report.stored += result.accepted
                report.still_failing += len(result.dead_lettered)
                report.reasons += [f"{d.source}: {d.reason}" for d in result.dead_lettered]
    finally:
        sink.close()
    return report
