"""A key store in memory, for tests (POPO event store): one key per fact, nothing derived."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable

from domain.forgetting import ContentKey, ForgetPlan, own_owners
from infra.adapters.keys.derivation import KEY_BYTES, Sealing


def nothing_to_let_go() -> None:
    """Nothing was held."""


def keys_already_committed() -> Callable[[], None]:
    """The `ready` of a store that commits every key before handing it out: nothing to wait for or hold."""
    return nothing_to_let_go


class MemoryKeyStore:
    """Keys by name: a key id's first key is named by the id, a key made for it after one was forgotten
    `<id>~<n>` (as in the PostgreSQL store), so events sealed with the deleted key keep reading `[forgotten]`."""

    def __init__(self) -> None:
        self._keys: dict[str, bytes] = {}
        self._owners: dict[str, set[str]] = {}
        self._names: dict[str, str] = {}
        self._lives: dict[str, int] = {}
        self._lock = threading.Lock()
        self.generation = 0

    def _sealings(self, wanted: Iterable[ContentKey]) -> dict[str, Sealing]:
        with self._lock:
            result: dict[str, Sealing] = {}
            for k in wanted:
                name = self._names.get(k.key_id)
                if name is None or name not in self._keys:
                    lives = self._lives.get(k.key_id)
                    name = self._names[k.key_id] = k.key_id if lives is None else f"{k.key_id}~{lives}"
                    self._keys[name] = os.urandom(KEY_BYTES)
                self._owners.setdefault(name, set()).update(own_owners(k))
                result[k.key_id] = (name, self._keys[name])
            return result

    def keys_for(self, wanted: Iterable[ContentKey]) -> dict[str, bytes]:
        return {key_id: sealing[1] for key_id, sealing in self._sealings(wanted).items()}

    def keys_pending(self, wanted: Iterable[ContentKey]) -> tuple[dict[str, Sealing], Callable[[], None]]:
        """As `SQLiteKeyStore.keys_pending`; every key is stored on its own (no groups) and at once."""
        return self._sealings(wanted), keys_already_committed

    def key_for(self, key: ContentKey) -> bytes:
        return self.keys_for([key])[key.key_id]

    def get(self, key_id: str) -> bytes | None:
        return self._keys.get(key_id)

    def forget(self, tenant: str, owner: str, plan: Callable[[], ForgetPlan] | None = None,
               record: Callable[[int], object] | None = None) -> int:
        todo = plan() if plan else ForgetPlan()  # (no groups here: only the further keys and owners matter)
        also, gone = set(todo.also), {owner, *todo.owners}
        with self._lock:
            doomed = [name for name, owners in self._owners.items()
                      if (owners & gone and name.startswith(f"{tenant}/")) or name.partition("~")[0] in also]
            for name in doomed:
                self._keys.pop(name, None)
                self._owners.pop(name, None)
                key_id, _, n = name.partition("~")
                self._lives[key_id] = max(self._lives.get(key_id, 0), int(n or 0) + 1)
            self.deleted = doomed
            self.generation += 1
        if record is not None:
            record(len(doomed))
        return len(doomed)

    def evict_cache(self) -> None:
        self.generation += 1

    def close(self) -> None:
        pass
