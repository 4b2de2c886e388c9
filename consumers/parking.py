"""Parking: an input whose tenant, session, entity or fact is not there yet waits instead of being dead-lettered.

Kafka keeps order only within a partition, and producers key by session (consumers/kafka_producer.py), so a
`session.started` can arrive before the registration of its agent (keyed `<tenant>`, on another partition), and
every message of that session after it. Such an input is *parked*: produced (flushed, before the batch's position
is stored, exactly like a dead letter) to the park topic (`NOUMENA_KAFKA_PARK_TOPIC`, default `<topic>.parked`),
keyed by its tenant so that a tenant's parked inputs stay in order in one partition. The consumer reads the park
topic in the same group, with the same exactly-once tracking (`kafka:<park topic>:<partition>`), and tries each
parked input again once its `retry_at` has come (the partition is paused until then):

- stored: done (counted `unparked`);
- still waiting, within bounds (`NOUMENA_KAFKA_PARK_MAX_ATTEMPTS` tries, `NOUMENA_KAFKA_PARK_MAX_SECONDS` since
  it was first parked): parked again at the end (`reparked`), with its tries counted;
- out of bounds, or rejected for another reason: dead-lettered with its source coordinates, as it would have been.

Order: an input of the same tenant and record key as one parked before it in the same batch waits behind it
(parked too, untried); so does a parked input behind one of its key that was parked again, until that one is back
(each re-parked head's offset is remembered; after a restart the first of a key met on the topic is the head).
A live input whose own dependencies exist is stored at once even if an earlier input of its key is parked:
inputs of a key that depend on each other miss the same thing and so wait together.

Records of the park topic are dead letters in form (consumers/dead_letters/records.py: source coordinates, reason,
original key, timestamp and headers, the value sealed with the subject's key) plus `noumena.park.tenant`,
`.since` and `.retry_at` (ms since the epoch) and `.tries`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from domain.errors import UnknownEntity, UnknownFact, UnknownSession, UnknownTenant

PARK = "noumena.park."
WAITS_FOR = (UnknownTenant, UnknownEntity, UnknownSession, UnknownFact)
"""Rejections that may only mean "not there yet": what parking waits for."""


def waits_for_dependency(error: BaseException) -> bool:
    return isinstance(error, WAITS_FOR)


@dataclass(frozen=True)
class ParkPolicy:
    retry_seconds: float = 2.0
    max_seconds: float = 300.0
    max_attempts: int = 100
    """Tries in all, the first (live) one included."""

    @property
    def enabled(self) -> bool:
        return self.max_attempts > 1 and self.max_seconds > 0

    @classmethod
    def from_settings(cls, settings: Any) -> ParkPolicy:
        return cls(settings.kafka_park_retry_seconds, settings.kafka_park_max_seconds,
                   settings.kafka_park_max_attempts)

    def exhausted(self, parked: Parked | None, now_ms: int) -> bool:
        """Whether one more failed try would end the input's wait (so it should be tried, not held)."""
        if not self.enabled:
            return True
        if parked is None:
            return False
        return parked.tries + 1 >= self.max_attempts or now_ms - parked.since_ms >= self.max_seconds * 1000


@dataclass(frozen=True)
class Parked:
    """What a park record says about the input it holds."""

    tenant: str
    since_ms: int
    tries: int
    retry_at_ms: int

    def headers(self) -> tuple[tuple[str, bytes], ...]:
        return tuple((PARK + name, str(value).encode()) for name, value in (
            ("tenant", self.tenant), ("since", self.since_ms), ("tries", self.tries),
            ("retry_at", self.retry_at_ms)))

    @classmethod
    def from_headers(cls, headers: dict[str, bytes]) -> Parked | None:
        try:
            return cls(headers[PARK + "tenant"].decode(), int(headers[PARK + "since"]),
                       int(headers[PARK + "tries"]), int(headers[PARK + "retry_at"]))
        except (KeyError, ValueError, UnicodeDecodeError):
            return None


def retry_at_of(record: Any) -> int | None:
    """A park record's `retry_at` (ms), read cheaply from its headers; None if it has none."""
    for name, value in record.headers or ():
        if name == PARK + "retry_at":
            try:
                return int(value)
            except ValueError:
                return None
    return None
