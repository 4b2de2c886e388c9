"""Key stores for crypto-shredding: data keys live here, never in the log.

SQLite (default, `<home>/keys.sqlite`, WAL with synchronous=FULL, so a key is durable before any event it
seals is appended): `secure_delete` overwrites deleted content with zeros, `VACUUM` after each forget rewrites
the file so no free page still holds a key, and a truncating WAL checkpoint empties the WAL of old page copies.
The SQLite store derives a fact's key from its group's key (`domain.forgetting.fact_key`), so writing a fact
writes no key; forgetting one fact first stores the group's other members' keys on their own. Sealed writes
hold its write lock while their events commit, and a forget moves its forget count (`PRAGMA user_version`) on,
so a writer in another process never commits events sealed with a key a forget deleted.
PostgreSQL (`noumena_data_keys` tables in the event store's schema): one key per fact; `DELETE` then
`VACUUM FULL`, which rewrites the tables into new files. In memory: for tests (POPO), one key per fact.
"""

from __future__ import annotations

import hashlib
import os
import re
import sqlite3
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from domain.forgetting import ContentKey, ForgetPlan, own_owners
from domain.ports import KeysForgotten

KEY_BYTES = 32  # AES-256
_COMMIT_BESIDE = 32
"""From this many new keys in a batch on, their commit runs on a background thread while the batch is sealed."""
_NONE: frozenset[str] = frozenset()
CACHE_LIMIT = 100_000
"""Keys a key store keeps in memory (each with its owners) before it starts its cache over."""
_DERIVED = re.compile(r"^([a-z0-9][a-z0-9_-]*/root/[0-9a-f]{32})/(.+)$")
"""A derived key's name: `<tenant>/root/<random hex>/<key id>`, the group key it comes from and its own id."""

Sealing = tuple[str, bytes] | tuple[str, bytes, str]
"""What seals one content key: the name the sealed field records and the key's bytes; for a group member (a
derived key), its group's key id and key and its own key id: its name is `<group key id>/<key id>`, and
`sealing_key` derives its key (the mapper's seal kernel derives it itself, so the member's key never becomes a
Python object)."""


def derive(group_key: bytes, key_id: str) -> bytes:
    """A member's key from its group's key: keyed BLAKE2b (a pseudorandom function) of the member's key id."""
    return _blake2b(key_id.encode(), key=group_key, digest_size=KEY_BYTES, person=b"noumena-derive").digest()


_blake2b = hashlib.blake2b


def _member(group: tuple[str, bytes], key_id: str) -> Sealing:
    """A group member's sealing: its group's key id and key, and its own key id (its name is
    `<group key id>/<key id>`)."""
    return group[0], group[1], key_id


def sealing_key(sealing: Sealing) -> bytes:
    """The bytes of the key a `Sealing` names (a member's derived from its group's)."""
    return derive(sealing[1], sealing[2]) if len(sealing) == 3 else sealing[1]


class _Cached:
    """Keys already read or written by this process, with the owners known to be recorded. `generation` moves on
    every clear, so holders of derived objects (the mapper's ciphers) know to drop theirs too."""

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
        return [k for k in wanted if k.key_id not in self.keys or not own_owners(k) <= self.owners.get(k.key_id, _NONE)]

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
        return {key_id: (key_id, key) for key_id, key in self.keys_for(wanted).items()}, _ready

    def key_for(self, key: ContentKey) -> bytes:
        return self.keys_for([key])[key.key_id]

    def get(self, key_id: str) -> bytes | None:
        return self._keys.get(key_id)

    def forget(self, tenant: str, owner: str, plan: Callable[[], ForgetPlan] | None = None) -> int:
        also = plan().also if plan else ()  # (no groups here: only the further keys matter)
        with self._lock:
            doomed = [k for k, owners in self._owners.items() if owner in owners and k.startswith(f"{tenant}/")]
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


class SQLiteKeyStore:
    """One row per stored key: its bytes and its owners as a space-delimited list (` person:li fact:ab12 `); and
    `key_groups`, each group's current key id. A group member's key (a fact's) is derived from its group's key,
    not stored, until the group is split by forgetting one member.

    Writing a key is one row and one entry in the index of key id hashes (no owner table). Forgetting, which is
    rare, scans the owners column."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=30)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute("PRAGMA secure_delete=ON")
        # Rows are appended in rowid order; the only index is on a 16-byte hash of the key id. A batch of new,
        # random key ids then dirties few pages: the index entries are small, so many share a page (a key_id
        # TEXT primary key, the layout of stores created before, dirtied about twice as many; those keep
        # working unchanged). Forgetting scans the table, which is rare.
        self._db.execute("CREATE TABLE IF NOT EXISTS data_keys (key_hash BLOB PRIMARY KEY, key_id TEXT NOT NULL, "
                         "key BLOB NOT NULL, owners TEXT NOT NULL)")
        columns = [row[1] for row in self._db.execute("PRAGMA table_info(data_keys)")]
        self._hashed = "key_hash" in columns
        if self._hashed:
            self._insert = "INSERT INTO data_keys (key_hash, key_id, key, owners) VALUES (?, ?, ?, ?)"
            self._where = "key_hash"
        else:
            self._insert = "INSERT INTO data_keys (key_id, key, owners) VALUES (?, ?, ?)"
            self._where = "key_id"
        self._db.execute("CREATE TABLE IF NOT EXISTS key_groups (group_id TEXT PRIMARY KEY, key_id TEXT NOT NULL)")
        self._lock = threading.Lock()
        """Held from the start of a write until its commit is done (released by the committer thread)."""
        self._committer: ThreadPoolExecutor | None = None
        self._cache = _Cached()
        self._epoch = self._db.execute("PRAGMA user_version").fetchone()[0]
        """The store's forget count when the cache was last known good."""
        self._forgetting: int | None = None
        """The thread running a forget (holding the lock), while it works out its plan."""

    def keys_for(self, wanted: Iterable[ContentKey]) -> dict[str, bytes]:
        """Every key asked for, creating missing ones and recording new owners in one committed transaction."""
        keys, ready = self.keys_pending(wanted)
        ready()()
        return {key_id: sealing_key(sealing) for key_id, sealing in keys.items()}

    def keys_pending(self, wanted: Iterable[ContentKey]
                     ) -> tuple[dict[str, Sealing], Callable[[], Callable[[], None]]]:
        """Every key asked for, as `keys_for`, with the name a sealed field records, but the transaction that
        stores the new ones is committed (fsync) on a background thread: the caller seals with the keys
        meanwhile and must call the returned `ready` before it commits anything sealed with them. `ready` waits
        for that commit and raises if it failed; then it takes the file's write lock, so no forget can run
        until the function it returns is called (after the events commit or fail), and raises `KeysForgotten`
        if a forget ran since the keys were handed out.

        A key with a group is derived from the group's key and named `<group key id>/<key id>`: nothing is
        written for it unless its group has no key yet (once per group). A key id this process has not seen is
        almost always new, so it is inserted straight away, without reading first; only if some of those
        inserts find the key already stored (written by another process, or by a batch whose events were never
        committed) are they read back: the stored key wins. Key ids already cached that gain owners are read
        and updated. Until the commit is done the store stays locked, so no one else can use the new keys
        before they are stored."""
        self._lock.acquire()
        try:
            epoch = self._db.execute("PRAGMA user_version").fetchone()[0]
            if epoch != self._epoch:  # another process forgot: what is cached may be gone
                self._cache.clear()
                self._epoch = epoch
            self._cache.bound()
            cache = self._cache
            keys, known_owners, groups, verified = cache.keys, cache.owners, cache.groups, cache.verified
            owners: dict[str, frozenset[str]] = {}
            new_groups: dict[str, frozenset[str]] = {}
            result: dict[str, Sealing] = {}
            later: list[ContentKey] = []
            for k in wanted:
                group = k.group
                if group is not None:  # derived from the group's key (a fact's: each is new, none is verified)
                    found = groups.get(group)
                    if found is None:
                        new_groups[group] = k.owners
                        later.append(k)
                    else:
                        result[k.key_id] = found[0], found[1], k.key_id  # (`_member`, inlined: once per fact)
                    continue
                hit = verified.get(k.key_id)
                if hit is not None and hit[0] is k:
                    result[k.key_id] = hit[1]
                    continue
                key_id = k.key_id
                if key_id in keys and k.owners <= known_owners.get(key_id, _NONE):
                    sealing = result[key_id] = (key_id, keys[key_id])
                    verified[key_id] = (k, sealing)
                    continue
                more = owners.get(key_id)
                owners[key_id] = k.owners if more is None else more | k.owners
                later.append(k)
            if owners or new_groups:
                keys.update(self._write(owners, new_groups))
                # the cache learns the keys now; if the commit fails, the committer clears it before unlocking
                for key_id, more in owners.items():
                    known = known_owners.get(key_id)
                    known_owners[key_id] = more if known is None else known | more
            for k in later:
                result[k.key_id] = (k.key_id, keys[k.key_id]) if k.group is None else _member(groups[k.group], k.key_id)
        except BaseException:
            if self._db.in_transaction:  # nothing of this batch was committed: neither may the cache hold it
                self._db.execute("ROLLBACK")
                cache.clear()
            self._lock.release()
            raise
        written = len(owners) + len(new_groups)
        if not written:
            self._lock.release()
            return result, self._hold
        if written < _COMMIT_BESIDE:  # a handful of keys: nothing worth overlapping, commit here
            self._commit()
            return result, self._hold
        if self._committer is None:
            self._committer = ThreadPoolExecutor(1, thread_name_prefix="noumena-key-commit")
        committed = self._committer.submit(self._commit)

        def ready() -> Callable[[], None]:
            committed.result()
            return self._hold()

        return result, ready

    def _hold(self) -> Callable[[], None]:
        """Hold off forgets, in this process and in others, until the returned function is called: this
        store's lock and the file's write lock. Raises `KeysForgotten` if a forget ran since the keys were
        handed out."""
        self._lock.acquire()
        db = self._db
        try:
            db.execute("BEGIN IMMEDIATE")
            epoch = db.execute("PRAGMA user_version").fetchone()[0]
            if epoch != self._epoch:
                self._cache.clear()
                self._epoch = epoch
                raise KeysForgotten("a subject was forgotten while this batch was sealed")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            self._lock.release()
            raise
        return self._let_go

    def _let_go(self) -> None:
        try:
            self._db.execute("ROLLBACK")  # (nothing was written)
        finally:
            self._lock.release()

    def _write(self, owners: dict[str, frozenset[str]], groups: dict[str, frozenset[str]]) -> dict[str, bytes]:
        """Insert the new keys, record new owners and give each group in `groups` its key (the stored one, or a
        new one) in an open transaction (under the lock); return the key of every id in `owners` that this
        transaction writes or reads."""
        cache = self._cache
        fresh = [key_id for key_id in owners if key_id not in cache.keys]
        material = os.urandom(KEY_BYTES * len(fresh))  # one call for every new key of the batch
        new = {key_id: material[i * KEY_BYTES:(i + 1) * KEY_BYTES] for i, key_id in enumerate(fresh)}
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            before = db.total_changes
            db.executemany(f"{self._insert} ON CONFLICT ({self._where}) DO NOTHING",
                           self._rows((key_id, key, owners[key_id]) for key_id, key in new.items()))
            if db.total_changes - before == len(new):
                check = [key_id for key_id in owners if key_id not in new]
            else:  # some were stored already: read every one back, the stored key wins
                check = list(owners)
            found = self._select_keys(check)
            gone = {key_id: os.urandom(KEY_BYTES) for key_id in check if key_id not in found}
            db.executemany(self._insert, self._rows((key_id, key, owners[key_id]) for key_id, key in gone.items()))
            grown = []
            for key_id, (key, known) in found.items():
                new[key_id] = key
                stored_owners = set(known.split())
                if not owners[key_id] <= stored_owners:
                    grown.append((_owners_text(stored_owners | owners[key_id]), self._lookup(key_id)))
            db.executemany(f"UPDATE data_keys SET owners = ? WHERE {self._where} = ?", grown)
            if groups:
                new.update(self._group_keys(groups))
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        new.update(gone)
        return new

    def _select_keys(self, key_ids: list[str]) -> dict[str, tuple[bytes, str]]:
        """Stored keys with their owners text, by key id (missing ones left out)."""
        found: dict[str, tuple[bytes, str]] = {}
        for start in range(0, len(key_ids), 500):
            chunk = key_ids[start:start + 500]
            for key_id, key, known in self._db.execute(
                    f"SELECT key_id, key, owners FROM data_keys WHERE {self._where} IN "
                    f"({','.join('?' * len(chunk))})", [self._lookup(key_id) for key_id in chunk]):
                found[key_id] = (key, known)
        return found

    def _group_keys(self, groups: dict[str, frozenset[str]]) -> dict[str, bytes]:
        """Each group's current key (stored, or made now and recorded), cached; return the new ones by id."""
        names = list(groups)
        current: dict[str, str] = {}
        for start in range(0, len(names), 500):
            chunk = names[start:start + 500]
            current.update(self._db.execute(
                f"SELECT group_id, key_id FROM key_groups WHERE group_id IN ({','.join('?' * len(chunk))})", chunk))
        stored = self._select_keys(list(current.values()))
        made: dict[str, bytes] = {}
        rows, mapped = [], []
        for group, group_owners in groups.items():
            key_id = current.get(group)
            if key_id is not None and key_id in stored:
                self._cache.groups[group] = (key_id, stored[key_id][0])
                continue
            # none yet, or its key was deleted (an owner was forgotten): a new key, under a new id
            key_id, key = f"{group.split('/', 1)[0]}/root/{os.urandom(16).hex()}", os.urandom(KEY_BYTES)
            rows.append((key_id, key, group_owners))
            mapped.append((group, key_id))
            self._cache.groups[group] = (key_id, key)
            made[key_id] = key
        self._db.executemany(self._insert, self._rows(rows))
        self._db.executemany("INSERT OR REPLACE INTO key_groups (group_id, key_id) VALUES (?, ?)", mapped)
        return made

    def _commit(self) -> None:
        """On the committer thread: commit what `_write` left open, then unlock. If the commit fails, the cache
        (which already holds the batch's keys) is cleared first, so no one can use a key that was not stored."""
        try:
            try:
                self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                self._cache.clear()
                raise
        finally:
            self._lock.release()

    def _lookup(self, key_id: str) -> str | bytes:
        """What the primary key holds for a key id: its hash, or the id itself in the older layout."""
        return _key_hash(key_id) if self._hashed else key_id

    def _rows(self, keys: Iterable[tuple[str, bytes, frozenset[str]]]) -> list[tuple[object, ...]]:
        if self._hashed:  # in index order: each index page is visited once, in turn
            return sorted((_key_hash(key_id), key_id, key, _owners_text(owners)) for key_id, key, owners in keys)
        return [(key_id, key, _owners_text(owners)) for key_id, key, owners in keys]

    def get(self, key_id: str) -> bytes | None:
        """A key's bytes by id or derived name, or None once it is forgotten. A derived key comes from its group's
        key while that exists; once the group's key is deleted, from the member's own key stored at the time
        (`forget` with splits), if it was not forgotten itself."""
        derived = _DERIVED.match(key_id) if "/root/" in key_id else None
        if self._forgetting == threading.get_ident():  # a forget's plan, reading the log: the lock is ours
            return self._get_derived(key_id, derived)
        with self._lock:
            return self._get_derived(key_id, derived)

    def _get_derived(self, key_id: str, derived: re.Match[str] | None) -> bytes | None:
        if derived is not None:
            group_key = self._get(derived[1])
            if group_key is not None:
                return derive(group_key, derived[2])
        return self._get(key_id)

    def _get(self, key_id: str) -> bytes | None:
        key = self._cache.keys.get(key_id)
        if key is None:
            row = self._db.execute(f"SELECT key FROM data_keys WHERE {self._where} = ?",
                                   (self._lookup(key_id),)).fetchone()
            if row is None:
                return None
            key = self._cache.keys[key_id] = row[0]
        return key

    def forget(self, tenant: str, owner: str, plan: Callable[[], ForgetPlan] | None = None) -> int:
        """Delete every key of the tenant that `owner` owns, the plan's further keys, and the key of every group
        it splits after storing each other member's derived key on its own (with its owners); then rewrite the
        file so no free page holds a deleted key. Returns the number of keys deleted.

        Runs holding the file's write lock, which every sealed write holds while its events commit (`ready`
        from `keys_pending`), so `plan()` sees the log as it stays until the keys are gone; it may read keys
        (this thread is let through). The store's forget count (`PRAGMA user_version`) moves on, so that other
        processes drop the keys they cached and decide again any batch sealed with them."""
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            self._forgetting = threading.get_ident()
            try:
                todo = plan() if plan is not None else ForgetPlan()
                deleted = 0
                for group, members in todo.splits.items():
                    row = db.execute("SELECT key_id FROM key_groups WHERE group_id = ?", (group,)).fetchone()
                    if row is None:
                        continue
                    group_key_id = row[0]
                    stored = self._select_keys([group_key_id]).get(group_key_id)
                    if stored is not None:
                        db.executemany(f"{self._insert} ON CONFLICT ({self._where}) DO NOTHING",
                                       self._rows((f"{group_key_id}/{member}", derive(stored[0], member), owners)
                                                  for member, owners in members.items()))
                        db.execute(f"DELETE FROM data_keys WHERE {self._where} = ?", (self._lookup(group_key_id),))
                        deleted += 1
                    db.execute("DELETE FROM key_groups WHERE group_id = ?", (group,))
                cursor = db.execute("DELETE FROM data_keys WHERE key_id >= ? AND key_id < ? AND "
                                    "instr(owners, ?) > 0", (f"{tenant}/", f"{tenant}0", f" {owner} "))
                deleted += cursor.rowcount
                also = list(todo.also)
                for start in range(0, len(also), 500):
                    chunk = also[start:start + 500]
                    marks = ",".join("?" * len(chunk))
                    deleted += db.execute(f"DELETE FROM data_keys WHERE {self._where} IN ({marks})",
                                          [self._lookup(key_id) for key_id in chunk]).rowcount
                # groups whose key went with an owner: their next member makes a new one
                db.execute("DELETE FROM key_groups WHERE group_id >= ? AND group_id < ? AND key_id NOT IN "
                           "(SELECT key_id FROM data_keys)", (f"{tenant}/", f"{tenant}0"))
                epoch = db.execute("PRAGMA user_version").fetchone()[0] + 1
                db.execute(f"PRAGMA user_version = {epoch}")
                db.execute("COMMIT")
                self._epoch = epoch
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
            finally:
                self._forgetting = None
                self._cache.clear()
            db.execute("VACUUM")
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            return deleted

    @property
    def generation(self) -> int:
        return self._cache.generation

    def evict_cache(self) -> None:
        """Forget cached keys (another process may have deleted some)."""
        with self._lock:
            self._cache.clear()

    def close(self) -> None:
        if self._committer is not None:
            self._committer.shutdown(wait=True)
        with self._lock:
            self._db.close()


def _let_go() -> None:
    """Nothing was held."""


def _ready() -> Callable[[], None]:
    """Every key was committed before, and nothing needs holding."""
    return _let_go


def _key_hash(key_id: str) -> bytes:
    return hashlib.blake2b(key_id.encode(), digest_size=16, person=b"noumena-key").digest()


def _owners_text(owners: set[str] | frozenset[str]) -> str:
    return " " + " ".join(sorted(owners)) + " "


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
        self._cache = _Cached()

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
        return {key_id: (key_id, key) for key_id, key in self.keys_for(wanted).items()}, _ready

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
        also = list(plan().also) if plan else []
        with self._lock:
            with self._db.transaction():
                doomed = [r[0] for r in self._db.execute(
                    f"SELECT key_id FROM {self._keys} WHERE key_id IN (SELECT key_id FROM {self._owners} "
                    "WHERE owner = %s AND key_id LIKE %s) OR key_id = ANY(%s)", (owner, f"{tenant}/%", also))]
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
