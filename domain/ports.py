"""Ports: what the domain needs from the outside world, implemented by adapters in infra/."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from domain.events import DomainEvent
from domain.forgetting import ContentKey, ForgetPlan


class Pending(NamedTuple):
    """One event to append as version `version` of `tenant`'s stream, its content sealed with `key`. (A named
    tuple: one is made per event written, and it is the cheapest immutable record to make.)"""

    tenant: str
    version: int
    event: DomainEvent
    key: ContentKey | None = None


@dataclass(frozen=True, slots=True)
class Logged:
    """One event as recorded: its log position is its place in transaction time."""

    position: int
    event: DomainEvent


@dataclass(frozen=True, slots=True)
class TrackingPosition:
    """Where an upstream source (a Kafka partition, a file) had got to when these events were produced."""

    name: str
    position: int


class VersionConflict(Exception):
    """Another writer appended to one of the streams first."""


class KeysForgotten(VersionConflict):
    """Keys this batch was sealed with may have been deleted by a forget in another process since they were
    handed out: decide and seal the batch again."""


class AlreadyTracked(Exception):
    """The tracking position was recorded before: this input has already been stored."""


class EventLog(Protocol):
    """The append-only log of every tenant's events, in one total order (the log position)."""

    def read_stream(self, tenant: str, after_version: int = 0) -> Iterable[DomainEvent]: ...

    def append(self, pending: Sequence[Pending], tracking: TrackingPosition | None = None) -> list[int]:
        """Append atomically; raise VersionConflict or AlreadyTracked and write nothing on either."""
        ...

    def read(self, after_position: int, limit: int) -> Sequence[Logged]: ...

    def max_position(self) -> int: ...

    def tracked_position(self, name: str) -> int | None: ...


class KeyStore(Protocol):
    """Data keys kept outside the log. Deleting a key erases every copy of what it sealed."""

    def keys_for(self, keys: Iterable[ContentKey]) -> dict[str, bytes]:
        """Each key's bytes by key id, created on first use, new owners recorded; committed before returning."""
        ...

    def keys_pending(self, keys: Iterable[ContentKey]
                     ) -> tuple[dict[str, tuple[str, bytes]], Callable[[], Callable[[], None]]]:
        """By key id: the name a sealed field records and the key's bytes (for a key derived from its group's,
        the name is `<group key id>/<key id>`);
        and `ready`, to call before the sealed events are committed: it waits until the new keys are durable
        (raising if they could not be stored), then holds off every forget until the function it returns is
        called, after the events are committed or failed. It raises `KeysForgotten` when a forget may have
        deleted some of the keys meanwhile (another process): then the batch must be decided again."""
        ...

    def get(self, key_id: str) -> bytes | None:
        """The key's bytes by id or derived name, or None once forgotten."""
        ...

    def forget(self, tenant: str, owner: str, plan: Callable[[], ForgetPlan] | None = None,
               record: Callable[[int], object] | None = None) -> int:
        """Delete, for real, every key of the tenant that `owner` owns, the keys in the plan's `also` (by id),
        and the key of each group in its `splits` once the group's other members' keys (by key id, with their
        owners) are stored on their own; return how many keys were deleted. Where the store can, `plan()` is
        called with every sealed write held off, so it sees the log as it stays until the keys are gone (it
        may read keys: the store lets the calling thread). The plan's `owners` are deleted like `owner`.
        `record(deleted)` records the forget in the log while sealed writes are still held off (where the store
        can), so none lands between the deletion and the event."""
        ...

    def evict_cache(self) -> None:
        """Drop keys cached in this process."""
        ...


class Embedder(Protocol):
    """Turns texts into vectors for semantic search. Implemented in infra/embedders.py (numpy stays out of the
    domain, hence `Any`)."""

    name: str
    """Identifies the model and its dimensions, e.g. "wordllama:l2_supercat:256": recorded in evidence, and a
    changed name means stored vectors are no longer comparable."""

    dimensions: int

    def embed(self, texts: Sequence[str]) -> Any:
        """A numpy float32 array of shape (len(texts), dimensions), one L2-normalised row per text, in order; a
        blank text gives a zero row. Raises `EmbedderUnavailable` naming what went wrong."""
        ...
