"""The PostgreSQL key store (`noumena_data_keys` tables in the event store's schema): one key per fact, nothing
derived, every key stored *wrapped* under a key-encryption key kept in a file outside the database
(`infra.keys.wrapping`).

PostgreSQL does not erase a deleted row byte by byte: old row versions stay in `pg_wal` segments (and in WAL
archives, backups and replicas) after `DELETE` and `VACUUM FULL`. So no data key is ever written to it in
plaintext, and a forget deletes the subject's keys *and rotates the KEK*: every remaining key is re-wrapped under
a new KEK in the same transaction (read in pages, written into a new table that replaces the old one), then the
old KEK's file bytes are overwritten. A copy of a deleted key found anywhere is wrapped under a KEK that is gone.
Stores created before hold plaintext keys: they are wrapped when the store is opened (their earlier WAL copies
are beyond reach; the first forget's rotation makes every later copy useless).

Forgets and sealed writes in any process are kept apart as in SQLite: a session-level advisory lock (shared
while a batch's events commit — `ready` — exclusive while a forget deletes keys and records its event), and a
forget epoch in `noumena_key_meta` that a batch checks under the shared lock: if a forget ran since its keys
were handed out, `KeysForgotten` makes the writer decide and seal the batch again.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from domain.forgetting import ContentKey, ForgetPlan, own_owners
from domain.ports import KeysForgotten
from infra.keys.cache import CACHE_LIMIT, KeyCache
from infra.keys.derivation import KEY_BYTES, Sealing
from infra.keys.wrapping import InvalidTag, Kek, KekFile, KekMissing, is_wrapped, unwrap, wrap

REWRAP_PAGE = 20_000
"""Keys re-wrapped per page during a KEK rotation."""


class PostgresKeyStore:
    def __init__(self, connect_kwargs: dict[str, object], schema: str = "public", kek_path: Path | None = None
                 ) -> None:
        import psycopg

        self._db = psycopg.connect(**connect_kwargs, autocommit=True)  # type: ignore[arg-type]
        self._schema = schema or "public"
        self._keys = f'"{self._schema}".noumena_data_keys'
        self._owners = f'"{self._schema}".noumena_key_owners'
        self._meta = f'"{self._schema}".noumena_key_meta'
        self._lives = f'"{self._schema}".noumena_key_lives'
        self._db.execute(f"CREATE TABLE IF NOT EXISTS {self._keys} (key_id TEXT PRIMARY KEY, key BYTEA NOT NULL)")
        self._db.execute(f"CREATE TABLE IF NOT EXISTS {self._owners} (key_id TEXT NOT NULL, owner TEXT NOT NULL, "
                         "PRIMARY KEY (key_id, owner))")
        self._db.execute(f"CREATE INDEX IF NOT EXISTS noumena_key_owners_by_owner ON {self._owners} (owner)")
        self._db.execute(f"CREATE TABLE IF NOT EXISTS {self._meta} (one BOOLEAN PRIMARY KEY DEFAULT TRUE "
                         "CHECK (one), kek_id TEXT, epoch BIGINT NOT NULL DEFAULT 0)")
        self._db.execute(f"INSERT INTO {self._meta} (one) VALUES (TRUE) ON CONFLICT DO NOTHING")
        self._db.execute(f"CREATE TABLE IF NOT EXISTS {self._lives} (key_id TEXT PRIMARY KEY, lives INT NOT NULL)")
        self._lock_id = int.from_bytes(hashlib.blake2b(f"noumena-keys:{self._schema}".encode(),
                                                       digest_size=8).digest(), "big", signed=True)
        self._lock = threading.RLock()  # (a forget's plan and record read keys on its own thread)
        self._cache = KeyCache()
        self._names: dict[str, str] = {}
        """By key id: the name its current key is stored under (the id itself, or `<id>~<n>`)."""
        self._by_name: dict[str, bytes] = {}
        """Keys by the name sealed fields record (`get`)."""
        self._epoch = 0
        self.kek_file = KekFile(kek_path or Path(".noumena") / "keys.kek")
        self._kek: Kek | None = None
        self._open_kek()

    # ---------------------------------------------------------------- the KEK

    def _open_kek(self) -> None:
        """Finish or undo an interrupted rotation; make the first KEK; wrap keys stored in plaintext."""
        with self._db.transaction():
            kek_id, self._epoch = self._db.execute(f"SELECT kek_id, epoch FROM {self._meta} FOR UPDATE").fetchone()
            self.kek_file.recover(kek_id)
            if kek_id is None:
                kek = self.kek_file.read() or self.kek_file.create()
                self._db.execute(f"UPDATE {self._meta} SET kek_id = %s", (kek.kek_id,))
            else:
                kek = self._find_kek(kek_id)
            self._kek = kek
            cipher = kek.cipher()
            plain = self._db.execute(f"SELECT key_id, key FROM {self._keys} WHERE length(key) = %s",
                                     (KEY_BYTES,)).fetchall()
            if plain:  # a store from before wrapping: wrap every key now
                with self._db.cursor() as cursor:
                    cursor.executemany(f"UPDATE {self._keys} SET key = %s WHERE key_id = %s",
                                       [(wrap(cipher, key_id, bytes(key)), key_id) for key_id, key in plain])

    def _find_kek(self, kek_id: str) -> Kek:
        for kek in self.kek_file.candidates():
            if kek.kek_id == kek_id:
                return kek
        raise KekMissing(f"the data keys in schema {self._schema!r} are wrapped under KEK {kek_id}, which "
                         f"{self.kek_file.path} does not hold (NOUMENA_KEK_FILE must name the file every process "
                         "of this store shares)")

    def _current_kek(self) -> Kek:
        """The KEK the rows are wrapped under now (another process may have rotated it)."""
        kek_id, epoch = self._db.execute(f"SELECT kek_id, epoch FROM {self._meta}").fetchone()
        if self._kek is None or self._kek.kek_id != kek_id:
            self._kek = self._find_kek(kek_id)
        if epoch != self._epoch:
            self._clear()
            self._epoch = epoch
        return self._kek

    def _unwrap(self, key_id: str, stored: bytes) -> bytes:
        assert self._kek is not None
        if not is_wrapped(stored):
            raise KekMissing(f"data key {key_id!r} is not wrapped")
        try:
            return unwrap(self._kek.cipher(), key_id, stored)
        except InvalidTag:  # rotated by another process since: read the KEK again
            return unwrap(self._current_kek().cipher(), key_id, stored)

    # ---------------------------------------------------------------- keys

    def keys_for(self, wanted: Iterable[ContentKey]) -> dict[str, bytes]:
        wanted = list(wanted)
        with self._lock:
            return self._keys_for(wanted)

    def _keys_for(self, wanted: list[ContentKey]) -> dict[str, bytes]:
        self._cache.bound()
        missing = self._cache.missing(wanted)
        if missing:
            with self._db.transaction(), self._db.cursor() as cursor:
                # FOR SHARE: a rotation (which holds this row FOR UPDATE) finishes first, and the new keys are
                # wrapped under the KEK it left
                kek_id, epoch = cursor.execute(f"SELECT kek_id, epoch FROM {self._meta} FOR SHARE").fetchone()
                if self._kek is None or self._kek.kek_id != kek_id:
                    self._kek = self._find_kek(kek_id)
                if epoch != self._epoch:
                    self._clear()
                    self._epoch = epoch
                    missing = self._cache.missing(wanted)
                cipher = self._kek.cipher()
                # a key id whose key was forgotten before gets a new name (`<key id>~<n>`): the events sealed
                # with the deleted key keep reading `[forgotten]`, never as a key that does not open them
                lives = dict(cursor.execute(f"SELECT key_id, lives FROM {self._lives} WHERE key_id = ANY(%s)",
                                            ([k.key_id for k in missing],)).fetchall())
                names = {k.key_id: f"{k.key_id}~{lives[k.key_id]}" if k.key_id in lives else k.key_id
                         for k in missing}
                cursor.executemany(f"INSERT INTO {self._keys} VALUES (%s, %s) ON CONFLICT DO NOTHING",
                                   [(name, wrap(cipher, name, os.urandom(KEY_BYTES))) for name in names.values()])
                cursor.executemany(f"INSERT INTO {self._owners} VALUES (%s, %s) ON CONFLICT DO NOTHING",
                                   [(names[k.key_id], o) for k in missing for o in own_owners(k)])
                cursor.execute(f"SELECT key_id, key FROM {self._keys} WHERE key_id = ANY(%s)",
                               (list(names.values()),))
                opened = {r[0]: unwrap(cipher, r[0], bytes(r[1])) for r in cursor.fetchall()}
                for key_id, name in names.items():
                    self._cache.keys[key_id] = self._by_name[name] = opened[name]
                    self._names[key_id] = name
            for k in missing:
                self._cache.owners[k.key_id] = self._cache.owners.get(k.key_id, frozenset()) | own_owners(k)
        return {k.key_id: self._cache.keys[k.key_id] for k in wanted}

    def keys_pending(self, wanted: Iterable[ContentKey]) -> tuple[dict[str, Sealing], Callable[[], Callable[[], None]]]:
        """As `SQLiteKeyStore.keys_pending`, but every key is stored on its own (groups are not used) and
        committed before this returns. `ready` takes the shared advisory lock (no forget runs until the function
        it returns is called, after the events commit) and raises `KeysForgotten` if a forget ran since the keys
        were handed out."""
        wanted = list(wanted)
        with self._lock:
            keys = self._keys_for(wanted)
            epoch, names = self._epoch, self._names
            sealings = {key_id: (names.get(key_id, key_id), key) for key_id, key in keys.items()}
        return sealings, lambda: self._hold(epoch)

    def _hold(self, epoch: int) -> Callable[[], None]:
        with self._lock:
            self._db.execute("SELECT pg_advisory_lock_shared(%s)", (self._lock_id,))
            try:
                now = self._db.execute(f"SELECT epoch FROM {self._meta}").fetchone()[0]
            except BaseException:
                self._db.execute("SELECT pg_advisory_unlock_shared(%s)", (self._lock_id,))
                raise
            if now != epoch:
                self._db.execute("SELECT pg_advisory_unlock_shared(%s)", (self._lock_id,))
                self._clear()
                raise KeysForgotten("a subject was forgotten while this batch was sealed")

        def let_go() -> None:
            with self._lock:
                self._db.execute("SELECT pg_advisory_unlock_shared(%s)", (self._lock_id,))

        return let_go

    def key_for(self, key: ContentKey) -> bytes:
        return self.keys_for([key])[key.key_id]

    def get(self, key_id: str) -> bytes | None:
        with self._lock:
            key = self._by_name.get(key_id)
            if key is None:
                row = self._db.execute(f"SELECT key FROM {self._keys} WHERE key_id = %s", (key_id,)).fetchone()
                if row is None:
                    return None
                if len(self._by_name) > CACHE_LIMIT:
                    self._by_name.clear()
                key = self._by_name[key_id] = self._unwrap(key_id, bytes(row[0]))
            return key

    # ---------------------------------------------------------------- forgetting

    def forget(self, tenant: str, owner: str, plan: Callable[[], ForgetPlan] | None = None,
               record: Callable[[int], object] | None = None) -> int:
        """Delete every key of the tenant that `owner` (or a further owner of the plan) owns and the plan's
        further keys, and rotate the KEK (every other key re-wrapped); then `record(deleted)` (the
        `subject.forgotten` event), all under the exclusive advisory lock, so no batch of any process commits
        events sealed with a deleted key, and none commits between the deletion and the event. The plan is
        worked out under the lock too, from the log as it stays until the keys are gone."""
        with self._lock:
            self._db.execute("SELECT pg_advisory_lock(%s)", (self._lock_id,))
            try:
                deleted = self._forget_locked(tenant, owner, plan)
                if record is not None:
                    record(deleted)
                return deleted
            finally:
                self._db.execute("SELECT pg_advisory_unlock(%s)", (self._lock_id,))

    def _forget_locked(self, tenant: str, owner: str, plan: Callable[[], ForgetPlan] | None) -> int:
        started = time.perf_counter()
        todo = plan() if plan else ForgetPlan()
        also, owners = list(todo.also), list(dict.fromkeys((owner, *todo.owners)))
        timings = self.last_forget = {"plan": time.perf_counter() - started}
        """Seconds of the last forget's steps (plan, delete, rewrap, commit, vacuum): for the benchmark."""
        new = self.kek_file.prepare()
        try:
            with self._db.transaction():
                kek_id, epoch = self._db.execute(f"SELECT kek_id, epoch FROM {self._meta} FOR UPDATE").fetchone()
                old = self._find_kek(kek_id)
                doomed = [r[0] for r in self._db.execute(
                    f"SELECT key_id FROM {self._keys} WHERE key_id IN (SELECT key_id FROM {self._owners} "
                    "WHERE owner = ANY(%s) AND key_id LIKE %s) OR split_part(key_id, '~', 1) = ANY(%s)",
                    (owners, f"{tenant}/%", also))]
                self._db.execute(f"DELETE FROM {self._keys} WHERE key_id = ANY(%s)", (doomed,))
                self._db.execute(f"DELETE FROM {self._owners} WHERE key_id = ANY(%s)", (doomed,))
                lives: dict[str, int] = {}
                for name in doomed:
                    key_id, _, n = name.partition("~")
                    lives[key_id] = max(lives.get(key_id, 0), int(n or 0) + 1)
                with self._db.cursor() as cursor:
                    cursor.executemany(f"INSERT INTO {self._lives} VALUES (%s, %s) ON CONFLICT (key_id) DO UPDATE "
                                       f"SET lives = GREATEST({self._lives}.lives, EXCLUDED.lives)",
                                       list(lives.items()))
                self.deleted = doomed
                timings["delete"] = time.perf_counter() - started - sum(timings.values())
                self.rewrapped = self._rewrap(old, new)
                timings["rewrap"] = time.perf_counter() - started - sum(timings.values())
                self._db.execute(f"UPDATE {self._meta} SET kek_id = %s, epoch = %s", (new.kek_id, epoch + 1))
        except BaseException:
            self.kek_file.discard()
            raise
        self.kek_file.finish(new)
        timings["commit"] = time.perf_counter() - started - sum(timings.values())
        self._kek, self._epoch = new, epoch + 1
        self._clear()
        self._db.execute(f"VACUUM {self._owners}")  # (the keys' table is new)
        timings["vacuum"] = time.perf_counter() - started - sum(timings.values())
        return len(doomed)

    def _rewrap(self, old: Kek, new: Kek) -> int:
        """Every stored key unwrapped with `old` and wrapped with `new`, into a new table that replaces the old
        one in this transaction: a page at a time by key id, read and written with `COPY` in text form (rows
        built and parsed here: psycopg's pure-Python row adapters cost ten times the cryptography), indexed once
        at the end (updating every row in place cost more again: a new row version and an index entry each).
        Returns how many."""
        from psycopg import sql

        opened, sealed = old.cipher(), new.cipher()
        following = f'"{self._schema}".noumena_data_keys_next'
        self._db.execute(f"DROP TABLE IF EXISTS {following}")
        self._db.execute(f"CREATE TABLE {following} (key_id TEXT NOT NULL, key BYTEA NOT NULL)")
        done, after = 0, ""
        with self._db.cursor() as cursor:
            while True:
                query = sql.SQL("COPY (SELECT key_id, encode(key, 'hex') FROM {} WHERE key_id > {} ORDER BY key_id "
                                "LIMIT {}) TO STDOUT").format(sql.SQL(self._keys), sql.Literal(after),
                                                               sql.Literal(REWRAP_PAGE))
                with cursor.copy(query) as copy:
                    data = b"".join(bytes(block) for block in copy)
                if not data:
                    break
                out = []
                for line in data.splitlines():
                    escaped, _, hexed = line.partition(b"\t")
                    key_id = escaped.replace(b"\\\\", b"\\").decode()
                    key = wrap(sealed, key_id, unwrap(opened, key_id, bytes.fromhex(hexed.decode())))
                    out.append(escaped + b"\t\\\\x" + key.hex().encode())
                with cursor.copy(f"COPY {following} (key_id, key) FROM STDIN") as copy:
                    copy.write(b"\n".join(out) + b"\n")
                done += len(out)
                after = key_id
        self._db.execute(f"ALTER TABLE {following} ADD CONSTRAINT noumena_data_keys_{os.urandom(6).hex()} "
                         "PRIMARY KEY (key_id)")
        self._db.execute(f"DROP TABLE {self._keys}")
        self._db.execute(f"ALTER TABLE {following} RENAME TO noumena_data_keys")
        return done

    def _clear(self) -> None:
        self._cache.clear()
        self._names.clear()
        self._by_name.clear()

    @property
    def generation(self) -> int:
        return self._cache.generation

    def evict_cache(self) -> None:
        with self._lock:
            self._clear()

    def close(self) -> None:
        self._db.close()
