"""The keys a store has already read or written in this process, with the owners known to be recorded."""

from __future__ import annotations

from collections.abc import Iterable

from domain.forgetting import ContentKey, own_owners
from infra.adapters.keys.derivation import Sealing

CACHE_LIMIT = 100_000
"""Keys a key store keeps in memory (each with its owners) before it starts its cache over."""
NO_OWNERS: frozenset[str] = frozenset()


class KeyCache:
    """`generation` moves on every clear, so holders of derived objects (the mapper's ciphers) know to drop
    theirs too."""

    def __init__(self) -> None:
        self.keys: dict[str, bytes] = {}
        self.owners: dict[str, frozenset[str]] = {}
        self.groups: dict[str, tuple[str, bytes]] = {}
        """By group: its current key's id and bytes."""
        self.verified: dict[str, tuple[ContentKey, Sealing]] = {}
        """By key id: the last `ContentKey` object found cached with all its owners, and its sealing. The domain
        hands out one object per session key, so most lookups are one identity check."""
        self.generation = 0

    def missing(self, wanted: Iterable[ContentKey]) -> list[ContentKey]:
        return [k for k in wanted
                if k.key_id not in self.keys or not own_owners(k) <= self.owners.get(k.key_id, NO_OWNERS)]

    def bound(self) -> None:
        """Keep memory flat in a long-running process: past CACHE_LIMIT keys start over (every key is in the
        store; a dropped one is read back or, if new to this process, found by its insert's conflict)."""
        if len(self.keys) > CACHE_LIMIT:
            self.clear()

    def clear(self) -> None:
        self.keys.clear()
        self.owners.clear()
        self.groups.clear()
        self.verified.clear()
        self.generation += 1
