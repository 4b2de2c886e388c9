"""Dead letters: inputs noumena could not store, kept on a Kafka topic with the reason, never dropped.

A dead-letter record is the original message, unchanged, plus headers saying where it came from and why:

    key      b"<source topic>:<source partition>"   (all dead letters of one source partition stay in order)
    value    the original bytes (None for a tombstone)
    headers  noumena.dlq.source.topic / .source.partition / .source.offset / .source.key / .source.timestamp,
             noumena.dlq.reason, noumena.dlq.field, noumena.dlq.dead_lettered_at (ISO 8601, UTC),
             noumena.dlq.attempt (1, then +1 per failed replay); the original headers follow unchanged.

The source coordinates (topic, partition, offset) identify an input. Dead letters are flushed to the broker
*before* the batch's tracking position is stored, so a crash in between can repeat a dead letter but never
lose one: readers de-duplicate by source coordinates, the latest record winning.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from domain.errors import InfrastructureError

log = logging.getLogger(__name__)

PREFIX = "noumena.dlq."
Sealer = Callable[[bytes | None, str], bytes | None]
FLUSH_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class SourceCoordinates:
    """Where an input was first read: it names the input for de-duplication and for people."""

    topic: str
    partition: int
    offset: int

    def __str__(self) -> str:
        return f"{self.topic}/{self.partition}@{self.offset}"


@dataclass(frozen=True)
class DeadLetter:
    source: SourceCoordinates
    value: bytes | None
    reason: str
    field: str | None
    key: bytes | None = None
    source_timestamp_ms: int | None = None
    attempt: int = 1
    dead_lettered_at: datetime = dataclasses.field(default_factory=lambda: datetime.now(UTC))
    original_headers: tuple[tuple[str, bytes], ...] = ()

    def record_key(self) -> bytes:
        return f"{self.source.topic}:{self.source.partition}".encode()

    def headers(self) -> list[tuple[str, bytes]]:
        ours = {
            "source.topic": self.source.topic,
            "source.partition": str(self.source.partition),
            "source.offset": str(self.source.offset),
            "reason": self.reason,
            "field": self.field or "",
            "dead_lettered_at": self.dead_lettered_at.isoformat(),
            "attempt": str(self.attempt),
        }
        if self.source_timestamp_ms is not None:
            ours["source.timestamp"] = str(self.source_timestamp_ms)
        headers = [(PREFIX + name, value.encode()) for name, value in ours.items()]
        if self.key is not None:
            headers.append((PREFIX + "source.key", self.key))
        return headers + [h for h in self.original_headers if not h[0].startswith(PREFIX)]


@dataclass(frozen=True)
class StoredDeadLetter:
    """A dead letter as read back from the topic, with its own place there."""

    letter: DeadLetter
    dlq_partition: int
    dlq_offset: int


def _text(headers: dict[str, bytes], name: str, default: str = "") -> str:
    value = headers.get(PREFIX + name)
    return value.decode("utf-8", errors="replace") if value is not None else default


def from_record(record: Any) -> StoredDeadLetter | None:
    """Decode a consumed DLQ record; None if it lacks our headers (someone else wrote to the topic)."""
    pairs = [(k, v) for k, v in (record.headers or [])]
    headers = dict(pairs)
    if PREFIX + "source.offset" not in headers:
        return None
    timestamp = _text(headers, "source.timestamp")
    when = _text(headers, "dead_lettered_at")
    letter = DeadLetter(
        source=SourceCoordinates(_text(headers, "source.topic"), int(_text(headers, "source.partition")),
                                 int(_text(headers, "source.offset"))),
        value=record.value,
        reason=_text(headers, "reason"),
        field=_text(headers, "field") or None,
        key=headers.get(PREFIX + "source.key"),
        source_timestamp_ms=int(timestamp) if timestamp else None,
        attempt=int(_text(headers, "attempt", "1")),
        dead_lettered_at=datetime.fromisoformat(when) if when else datetime.fromtimestamp(0, UTC),
        original_headers=tuple((k, v) for k, v in pairs if not k.startswith(PREFIX)),
    )
    return StoredDeadLetter(letter, record.partition, record.offset)


def latest_per_input(letters: Iterable[StoredDeadLetter]) -> list[StoredDeadLetter]:
    """De-duplicate by source coordinates; the record written last (highest attempt, then offset) wins."""
    latest: dict[SourceCoordinates, StoredDeadLetter] = {}
    for stored in letters:
        current = latest.get(stored.letter.source)
        if current is None or (stored.letter.attempt, stored.dlq_offset) >= (current.letter.attempt,
                                                                              current.dlq_offset):
            latest[stored.letter.source] = stored
    return sorted(latest.values(), key=lambda s: (s.letter.source.topic, s.letter.source.partition,
                                                  s.letter.source.offset))


class DeadLetterSink:
    """Writes dead letters to the DLQ topic; `send_all` returns only once the broker has every one of them."""

    def __init__(self, producer: Any, topic: str, sealer: Sealer | None = None) -> None:
        self._producer = producer
        self.topic = topic
        self._sealer = sealer
        """Seals each value with its subject's key before it leaves (consumers/dlq_sealing.py)."""

    @classmethod
    def connect(cls, options: dict[str, Any], topic: str, sealer: Sealer | None = None) -> DeadLetterSink:
        from kafka import KafkaProducer
        from kafka.errors import KafkaError

        try:
            return cls(KafkaProducer(**options), topic, sealer)
        except KafkaError as error:
            raise InfrastructureError(f"cannot connect the dead-letter producer: {error}") from error

    def send_all(self, letters: Sequence[DeadLetter]) -> None:
        """Produce and flush; raise InfrastructureError unless all are acknowledged (then nothing is stored)."""
        if not letters:
            return
        from kafka.errors import KafkaError

        try:
            futures = [self._producer.send(self.topic, key=letter.record_key(), value=self._value(letter),
                                           headers=letter.headers()) for letter in letters]
            self._producer.flush(timeout=FLUSH_TIMEOUT_S)
            for future in futures:
                future.get(timeout=0)
        except KafkaError as error:
            raise InfrastructureError(f"dead letters not acknowledged by the broker: {error!r}") from error

    def _value(self, letter: DeadLetter) -> bytes | None:
        return self._sealer(letter.value, str(letter.source)) if self._sealer is not None else letter.value

    def close(self) -> None:
        self._producer.close(timeout=10)
