"""A key store in memory, for tests (POPO event store): one key per fact, nothing derived."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable

from domain.forgetting import ContentKey, ForgetPlan, own_owners
from infra.keys.derivation import KEY_BYTES, Sealing


def nothing_to_let_go() -> None:
    """Nothing was held."""


def keys_already_committed() -> Callable[[], None]:
    """The `ready` of a store that commits every key before handing it out: nothing to wait for or hold."""
    return nothing_to_let_go


class MemoryKeyStore:
    def __init__(self) -> None:
        self._keys: dict[str, bytes] = {}
        self._owners: dict[str, set[str]] = {}
        self._lock = threading.Lock()
        self.generation = 0

    def keys_for(self, wanted: Iterable[ContentKey]) -> dict[str, bytes]:
        with self._lock:
            result = {}
            for k in wanted:
                key = self._keys.get(k.key_id)
                if key is None:
                    key = self._keys[k.key_id] = os.urandom(KEY_BYTES)
                self._owners.setdefault(k.key_id, set()).update(own_owners(k))
                result[k.key_id] = key
            return result

    def keys_pending(self, wanted: Iterable[ContentKey]) -> tuple[dict[str, Sealing], Callable[[], None]]:
        """As `SQLiteKeyStore.keys_pending`; every key is stored on its own (no groups) and at once."""
        return {key_id: (key_id, key) for key_id, key in self.keys_for(wanted).items()}, keys_already_committed

    def key_for(self, key: ContentKey) -> bytes:
        return self.keys_for([key])[key.key_id]

    def get(self, key_id: str) -> bytes | None:
        return self._keys.get(key_id)

    def forget(self, tenant: str, owner: str, plan: Callable[[], ForgetPlan] | None = None) -> int:
        todo = plan() if plan else ForgetPlan()  # (no groups here: only the further keys and owners matter)
        also, gone = todo.also, {owner, *todo.owners}
        with self._lock:
            doomed = [k for k, owners in self._owners.items() if owners & gone and k.startswith(f"{tenant}/")]
            doomed += [k for k in also if k in self._keys and k not in doomed]
            for key_id in doomed:
                self._keys.pop(key_id, None)
                self._owners.pop(key_id, None)
            self.generation += 1
            return len(doomed)

    def evict_cache(self) -> None:
        self.generation += 1

    def close(self) -> None:
        pass
