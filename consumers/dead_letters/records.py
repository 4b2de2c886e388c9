"""Dead letters: inputs noumena could not store, kept on a Kafka topic with the reason, never dropped.

A dead-letter record is the original message, unchanged, plus headers saying where it came from and why:

    key      b"<source topic>:<source partition>"   (all dead letters of one source partition stay in order)
    value    the original bytes (None for a tombstone)
    headers  noumena.dlq.source.topic / .source.partition / .source.offset / .source.key / .source.timestamp,
             noumena.dlq.reason, noumena.dlq.field, noumena.dlq.dead_lettered_at (ISO 8601, UTC),
             noumena.dlq.attempt (1, then +1 per failed replay); the original headers follow unchanged.

A dead letter larger than the DLQ topic accepts (`max.message.bytes`, read from the broker) is stored truncated:
its value cut to fit, with noumena.dlq.truncated, .original.size and .original.sha256 (of the original bytes),
so the original can be found at its source coordinates while the topic retains it; original headers that do not
fit are dropped (noumena.dlq.original_headers_dropped). Nothing stops the consumer (see consumers/record_size.py).

The source coordinates (topic, partition, offset) identify an input. Dead letters are flushed to the broker
*before* the batch's tracking position is stored, so a crash in between can repeat a dead letter but never
lose one: readers de-duplicate by source coordinates, the latest record winning.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from consumers.record_size import MARGIN, SEAL_OVERHEAD, record_size
from domain.application.ingestion import ENVELOPE_FIELDS
from domain.errors import DomainError, InfrastructureError

log = logging.getLogger(__name__)

PREFIX = "noumena.dlq."
Sealer = Callable[..., bytes | None]
"""(value, coordinates, subject_of=None) -> the value sealed with the key of the subject `subject_of` (default: the
value itself) names; see consumers/dead_letters/sealing.py."""
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
    extra_headers: tuple[tuple[str, bytes], ...] = ()
    """Headers of ours beyond the standard ones (truncation, parking, discarding), written before the original's."""
    kafka_key: bytes | None = None
    """The record's key when not `<source topic>:<source partition>` (a parked input is keyed by its tenant)."""

    def record_key(self) -> bytes:
        return self.kafka_key if self.kafka_key is not None else f"{self.source.topic}:{self.source.partition}".encode()

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
        return headers + list(self.extra_headers) + [h for h in self.original_headers if not _ours(h[0])]


OUR_PREFIXES = (PREFIX, "noumena.park.")


def _ours(name: str) -> bool:
    return name.startswith(OUR_PREFIXES)


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
        original_headers=tuple((k, v) for k, v in pairs if not _ours(k)),
        extra_headers=tuple((k, v) for k, v in pairs if k in EXTRA_HEADERS),
    )
    return StoredDeadLetter(letter, record.partition, record.offset)


EXTRA_HEADERS = frozenset(PREFIX + name for name in (
    "truncated", "original.size", "original.sha256", "original_headers_dropped", "discarded", "discarded_at"))


def header(letter: DeadLetter, name: str) -> str | None:
    """One of the extra headers (`truncated`, `original.size`, `discarded`, ...) as text, or None."""
    for key, value in letter.extra_headers:
        if key == PREFIX + name:
            return value.decode("utf-8", errors="replace")
    return None


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
    """Writes dead letters to the DLQ topic; `send_all` returns only once the broker has every one of them.

    `max_bytes` is the largest record the topic accepts (its `max.message.bytes`): a larger dead letter is stored
    truncated (consumers/record_size.py) and `on_truncated` is told, so nothing blocks the partition behind it."""

    def __init__(self, producer: Any, topic: str, sealer: Sealer | None = None, max_bytes: int = 0,
                 on_truncated: Callable[[DeadLetter, int], None] | None = None) -> None:
        self._producer = producer
        self.topic = topic
        self._sealer = sealer
        """Seals each value with its subject's key before it leaves (consumers/dead_letters/sealing.py)."""
        self.max_bytes = max_bytes
        self.on_truncated = on_truncated
        """Called with the original letter and its original size whenever one is stored truncated."""

    @classmethod
    def connect(cls, options: dict[str, Any], topic: str, sealer: Sealer | None = None,
                max_bytes: int = 0) -> DeadLetterSink:
        from kafka import KafkaProducer
        from kafka.errors import KafkaError

        options = options | {"allow_auto_create_topics": False}
        if max_bytes:
            options["max_request_size"] = max_bytes
        try:
            return cls(KafkaProducer(**options), topic, sealer, max_bytes)
        except KafkaError as error:
            raise InfrastructureError(f"cannot connect the dead-letter producer: {error}") from error

    def sharing(self, topic: str) -> DeadLetterSink:
        """A sink to another topic over the same producer (closing either closes the producer)."""
        return DeadLetterSink(self._producer, topic, self._sealer, self.max_bytes, self.on_truncated)

    def record(self, letter: DeadLetter) -> tuple[bytes, bytes | None, list[tuple[str, bytes]]]:
        """(key, value, headers) as they will be produced: sealed, and truncated when too large."""
        key, value, headers = letter.record_key(), self._value(letter), letter.headers()
        if self.max_bytes and record_size(key, value, headers) > self.max_bytes:
            cut = truncated(letter, self.max_bytes, sealed=self._sealer is not None)
            # sealed with the key of the subject the whole input names (its cut-off JSON names none)
            value, headers = self._value(cut, subject_of=letter.value), cut.headers()
        return key, value, headers

    def fits(self, letter: DeadLetter) -> bool:
        """Whether the letter, sealed, fits the topic whole."""
        return not self.max_bytes or record_size(letter.record_key(), self._value(letter),
                                                 letter.headers()) <= self.max_bytes

    def send_all(self, letters: Sequence[DeadLetter]) -> list[int]:
        """Produce and flush; raise InfrastructureError unless all are acknowledged (then nothing is stored).
        Returns each record's offset on the topic."""
        if not letters:
            return []
        from kafka.errors import KafkaError

        try:
            futures = []
            for letter in letters:
                key, value, headers = self.record(letter)
                if self.on_truncated is not None and header_value(headers, "truncated"):
                    self.on_truncated(letter, len(letter.value or b""))
                futures.append(self._producer.send(self.topic, key=key, value=value, headers=headers))
            self._producer.flush(timeout=FLUSH_TIMEOUT_S)
            return [future.get(timeout=0).offset for future in futures]
        except KafkaError as error:
            raise InfrastructureError(f"dead letters not acknowledged by the broker ({self.topic}): {error!r}") \
                from error

    def _value(self, letter: DeadLetter, subject_of: bytes | None = None) -> bytes | None:
        if self._sealer is None:
            return letter.value
        if subject_of is not None:
            return self._sealer(letter.value, str(letter.source), subject_of=subject_of)
        return self._sealer(letter.value, str(letter.source))

    def close(self) -> None:
        self._producer.close(timeout=10)


def header_value(headers: Sequence[tuple[str, bytes]], name: str) -> bytes | None:
    for key, value in headers:
        if key == PREFIX + name:
            return value
    return None


def truncated(letter: DeadLetter, max_bytes: int, sealed: bool) -> DeadLetter:
    """The dead letter cut down to fit `max_bytes` once sealed: its value's first bytes, the headers
    `noumena.dlq.truncated`, `.original.size`, `.original.sha256`; its reason cut to 2,000 characters; and,
    when the original headers alone do not leave room, without them (`noumena.dlq.original_headers_dropped`:
    how many)."""
    original = letter.value or b""
    extra = [(PREFIX + "truncated", b"true"), (PREFIX + "original.size", str(len(original)).encode()),
             (PREFIX + "original.sha256", hashlib.sha256(original).hexdigest().encode())]
    cut = dataclasses.replace(letter, reason=letter.reason[:2_000], value=b"",
                              extra_headers=letter.extra_headers + tuple(extra))
    room = max_bytes - MARGIN - (SEAL_OVERHEAD if sealed else 0)
    budget = room - record_size(cut.record_key(), b"", cut.headers())
    if budget < 0 and letter.original_headers:
        dropped = (PREFIX + "original_headers_dropped", str(len(letter.original_headers)).encode())
        cut = dataclasses.replace(cut, original_headers=(), extra_headers=cut.extra_headers + (dropped,))
        budget = room - record_size(cut.record_key(), b"", cut.headers())
    return dataclasses.replace(cut, value=original[:max(0, budget)])


def field_path(error: DomainError) -> str | None:
    """A rule's field (`session_id`) as a path in the envelope (`payload.session_id`)."""
    if error.field is None or error.field.split(".")[0].split("[")[0] in ENVELOPE_FIELDS:
        return error.field
    return f"payload.{error.field}"
