"""Reading the log for projection: stored payloads as plain dicts, upcast to the current event version.

The projector does not rebuild pydantic events: the payloads were validated when they were written, and a
dict is several times cheaper to get than a model. The field names are the events' public contract.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic_core import from_json, to_json

import domain.event_catalog  # noqa: F401  (importing registers every event topic)
from domain.events import event_class_for, upcast


@dataclass(frozen=True, slots=True)
class Record:
    """One logged event: its position, its topic without version (`fact.asserted`) and its payload, parsed and
    as JSON text (of the current version: the history tables are derived from it in SQL)."""

    position: int
    topic: str
    data: dict[str, Any]
    raw: bytes


class RawLog(Protocol):
    """What the projector needs from the event log (infra.adapters.eventlog.EventsourcingLog provides it)."""

    def read_raw(self, after_position: int, limit: int) -> Sequence[tuple[int, str, bytes]]: ...

    def max_position(self) -> int: ...


UNKNOWN = "?"


def decode(position: int, stored_topic: str, state: bytes) -> Record:
    """Parse and upcast one stored event; an unknown topic gives a Record with topic `?` (kept in the clock)."""
    data = from_json(state)  # pydantic's Rust parser: faster than json.loads
    try:
        cls, version = event_class_for(stored_topic)
    except LookupError:
        return Record(position, UNKNOWN, data, state)
    if version != cls.version:
        data = upcast(cls.topic, version, data)
        state = to_json(data)
    return Record(position, cls.topic, data, state)


def read_records(log: RawLog, after_position: int, limit: int) -> list[Record]:
    return [decode(position, topic, state) for position, topic, state in log.read_raw(after_position, limit)]
