"""The PostgreSQL key store (`noumena_data_keys` tables in the event store's schema): one key per fact, nothing
derived; forgetting is `DELETE` then `VACUUM FULL`, which rewrites the tables into new files."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable

from domain.forgetting import ContentKey, ForgetPlan, own_owners
from infra.keys.cache import KeyCache
from infra.keys.derivation import KEY_BYTES, Sealing
from infra.keys.memory import keys_already_committed


class PostgresKeyStore:
    def __init__(self, connect_kwargs: dict[str, object], schema: str = "public") -> None:
        import psycopg

        self._db = psycopg.connect(**connect_kwargs, autocommit=True)  # type: ignore[arg-type]
        self._schema = schema or "public"
        self._keys = f'"{self._schema}".noumena_data_keys'
        self._owners = f'"{self._schema}".noumena_key_owners'
        self._db.execute(f"CREATE TABLE IF NOT EXISTS {self._keys} (key_id TEXT PRIMARY KEY, key BYTEA NOT NULL)")
        self._db.execute(f"CREATE TABLE IF NOT EXISTS {self._owners} (key_id TEXT NOT NULL, owner TEXT NOT NULL, "
                         "PRIMARY KEY (key_id, owner))")
        self._db.execute(f"CREATE INDEX IF NOT EXISTS noumena_key_owners_by_owner ON {self._owners} (owner)")
        self._lock = threading.Lock()
        self._cache = KeyCache()

    def keys_for(self, wanted: Iterable[ContentKey]) -> dict[str, bytes]:
        wanted = list(wanted)
        with self._lock:
            self._cache.bound()
            missing = self._cache.missing(wanted)
            if missing:
                with self._db.transaction(), self._db.cursor() as cursor:
                    cursor.executemany(f"INSERT INTO {self._keys} VALUES (%s, %s) ON CONFLICT DO NOTHING",
                                       [(k.key_id, os.urandom(KEY_BYTES)) for k in missing])
                    cursor.executemany(f"INSERT INTO {self._owners} VALUES (%s, %s) ON CONFLICT DO NOTHING",
                                       [(k.key_id, o) for k in missing for o in own_owners(k)])
                    cursor.execute(f"SELECT key_id, key FROM {self._keys} WHERE key_id = ANY(%s)",
                                   ([k.key_id for k in missing],))
                    self._cache.keys.update((r[0], bytes(r[1])) for r in cursor.fetchall())
                for k in missing:
                    self._cache.owners[k.key_id] = self._cache.owners.get(k.key_id, frozenset()) | own_owners(k)
            return {k.key_id: self._cache.keys[k.key_id] for k in wanted}

    def keys_pending(self, wanted: Iterable[ContentKey]) -> tuple[dict[str, Sealing], Callable[[], None]]:
        """As `SQLiteKeyStore.keys_pending`, but every key is stored on its own (groups are not used) and
        committed before this returns."""
        return {key_id: (key_id, key) for key_id, key in self.keys_for(wanted).items()}, keys_already_committed

    def key_for(self, key: ContentKey) -> bytes:
        return self.keys_for([key])[key.key_id]

    def get(self, key_id: str) -> bytes | None:
        with self._lock:
            key = self._cache.keys.get(key_id)
            if key is None:
                row = self._db.execute(f"SELECT key FROM {self._keys} WHERE key_id = %s", (key_id,)).fetchone()
                if row is None:
                    return None
                key = self._cache.keys[key_id] = bytes(row[0])
            return key

    def forget(self, tenant: str, owner: str, plan: Callable[[], ForgetPlan] | None = None) -> int:
        """Delete every key of the tenant that `owner` owns and the plan's further keys (its splits have nothing
        to do: no groups here)."""
        todo = plan() if plan else ForgetPlan()
        also, owners = list(todo.also), list(dict.fromkeys((owner, *todo.owners)))
        with self._lock:
            with self._db.transaction():
                doomed = [r[0] for r in self._db.execute(
                    f"SELECT key_id FROM {self._keys} WHERE key_id IN (SELECT key_id FROM {self._owners} "
                    "WHERE owner = ANY(%s) AND key_id LIKE %s) OR key_id = ANY(%s)", (owners, f"{tenant}/%", also))]
                self._db.execute(f"DELETE FROM {self._keys} WHERE key_id = ANY(%s)", (doomed,))
                self._db.execute(f"DELETE FROM {self._owners} WHERE key_id = ANY(%s)", (doomed,))
            self._db.execute(f"VACUUM FULL {self._keys}")
            self._db.execute(f"VACUUM FULL {self._owners}")
            self._cache.clear()
            return len(doomed)

    @property
    def generation(self) -> int:
        return self._cache.generation

    def evict_cache(self) -> None:
        with self._lock:
            self._cache.clear()

    def close(self) -> None:
        self._db.close()
