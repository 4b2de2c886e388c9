"""The SQLite key store (the default, `<home>/keys.sqlite`).

WAL with synchronous=FULL, so a key is durable before any event it sealed is appended; `secure_delete`
overwrites deleted content with zeros, `VACUUM` after each forget rewrites the file so no free page still holds a
key, and a truncating WAL checkpoint empties the WAL of old page copies. A fact's key is derived from its group's
key (`infra.adapters.keys.derivation`), so writing a fact writes no key; forgetting one fact first stores the group's
other members' keys on their own.

Two kinds of concurrency: a batch's new keys are committed on a background thread while the mapper seals with
them (`keys_pending`), and a cross-process fence keeps forgets and sealed writes apart: sealed writes hold the
file's write lock while their events commit, and a forget moves the store's forget count (`PRAGMA
user_version`) on, so a writer in another process never commits events sealed with a key a forget deleted.
"""

from __future__ import annotations

import hashlib
import os
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tenacity import Retrying, retry_if_result, stop_after_delay, wait_fixed

from domain.forgetting import ContentKey, ForgetPlan
from domain.ports import KeysForgotten
from infra.adapters.keys.cache import NO_OWNERS, KeyCache
from infra.adapters.keys.derivation import KEY_BYTES, Sealing, derive, derived_name, member_sealing

UNRECORDED_LIMIT = 60.0
"""Seconds after which a forget's mark "keys deleted, event not yet logged" is ignored (its process died)."""
COMMIT_BESIDE = 32
"""From this many new keys in a batch on, their commit runs on a background thread while the batch is sealed."""


class SQLiteKeyStore:
    """One row per stored key: its bytes and its owners as a space-delimited list (` person:li fact:ab12 `); and
    `key_groups`, each group's current key id. A group member's key (a fact's) is derived from its group's key,
    not stored, until the group is split by forgetting one member. A key id's first key is stored under the id,
    one made after it was forgotten under `<id>~<n>` (`key_lives` counts the forgets by key id, as in the
    PostgreSQL store), so the events sealed with a deleted key keep reading `[forgotten]`.

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
        # TEXT primary key, the layout of stores created before, dirtied more; those keep working
        # unchanged). Forgetting scans the table, which is rare.
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
        self._db.execute("BEGIN IMMEDIATE")
        try:
            self._legacy = _migrate_lives(self._db)
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("CREATE TABLE IF NOT EXISTS forgets_unrecorded (epoch INTEGER PRIMARY KEY, pid INTEGER NOT "
                         "NULL, at REAL NOT NULL)")
        self._lock = threading.Lock()
        """Held from the start of a write until its commit is done (released by the committer thread)."""
        self._committer: ThreadPoolExecutor | None = None
        self._cache = KeyCache()
        """Keys by name (`get`), owners and sealings by key id."""
        self._names: dict[str, str] = {}
        """By key id: the name its current key is stored under (the id itself, or `<id>~<n>`)."""
        self._epoch = self._db.execute("PRAGMA user_version").fetchone()[0]
        """The store's forget count when the cache was last known good."""
        self._forgetting: int | None = None
        """The thread running a forget (holding the lock), while it works out its plan."""

    def keys_for(self, wanted: Iterable[ContentKey]) -> dict[str, bytes]:
        """Every key asked for, creating missing ones and recording new owners in one committed transaction."""
        keys, ready = self.keys_pending(wanted)
        ready()()
        return {key_id: sealing[1] for key_id, sealing in keys.items()}

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
        self._wait_for_record()
        self._lock.acquire()
        try:
            epoch = self._db.execute("PRAGMA user_version").fetchone()[0]
            if epoch != self._epoch:  # another process forgot: what is cached may be gone
                self._clear()
                self._epoch = epoch
            generation = self._cache.generation
            self._cache.bound()
            if self._cache.generation != generation:  # (started over: the names go with the keys)
                self._names.clear()
            cache, names = self._cache, self._names
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
                        result[k.key_id] = member_sealing(found, k.key_id)
                    continue
                hit = verified.get(k.key_id)
                if hit is not None and hit[0] is k:
                    result[k.key_id] = hit[1]
                    continue
                key_id = k.key_id
                name = names.get(key_id)
                if name is not None and name in keys and k.owners <= known_owners.get(key_id, NO_OWNERS):
                    sealing = result[key_id] = (name, keys[name])
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
                result[k.key_id] = ((names[k.key_id], keys[names[k.key_id]]) if k.group is None
                                    else member_sealing(groups[k.group], k.key_id))
        except BaseException:
            if self._db.in_transaction:  # nothing of this batch was committed: neither may the cache hold it
                self._db.execute("ROLLBACK")
                self._clear()
            self._lock.release()
            raise
        written = len(owners) + len(new_groups)
        if not written:
            self._lock.release()
            return result, self._hold
        if written < COMMIT_BESIDE:  # a handful of keys: nothing worth overlapping, commit here
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
                self._clear()
                self._epoch = epoch
                raise KeysForgotten("a subject was forgotten while this batch was sealed")
            if self._unrecorded():
                raise KeysForgotten("a forget in another process has deleted keys and not yet logged its event")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            self._lock.release()
            raise
        return self._let_go

    def _unrecorded(self) -> bool:
        """Whether another process's forget has deleted its keys and not yet appended `subject.forgotten` (a mark
        left by a process that is gone, or older than `UNRECORDED_LIMIT`, is ignored)."""
        for pid, at in self._db.execute("SELECT pid, at FROM forgets_unrecorded"):
            if pid != os.getpid() and time.time() - at < UNRECORDED_LIMIT and _alive(pid):
                return True
        return False

    def _wait_for_record(self) -> None:
        """Before a batch's keys: wait (holding nothing) while another process's forget logs its event, so the
        batch is not turned back at its commit and decided again and again meanwhile."""
        waiting = Retrying(retry=retry_if_result(bool), stop=stop_after_delay(UNRECORDED_LIMIT), wait=wait_fixed(0.005),
                           retry_error_callback=lambda _: None)
        waiting(self._unrecorded_now)

    def _unrecorded_now(self) -> bool:
        with self._lock:
            return self._unrecorded()

    def _let_go(self) -> None:
        try:
            self._db.execute("ROLLBACK")  # (nothing was written)
        finally:
            self._lock.release()

    def _write(self, owners: dict[str, frozenset[str]], groups: dict[str, frozenset[str]]) -> dict[str, bytes]:
        """Insert the new keys, record new owners and give each group in `groups` its key (the stored one, or a
        new one) in an open transaction (under the lock); return the key of every id in `owners` that this
        transaction writes or reads, by name (and learn each id's name, `_names`).

        A key id whose key was forgotten before gets a new name (`<key id>~<n>`, as in the PostgreSQL store):
        the events sealed with the deleted key keep reading `[forgotten]`, never meet a key that does not open
        them."""
        cache = self._cache
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            named = self._current_names(list(owners))
            by_name = {name: owners[key_id] for key_id, name in named.items()}
            fresh = [name for name in by_name if name not in cache.keys]
            material = os.urandom(KEY_BYTES * len(fresh))  # one call for every new key of the batch
            new = {name: material[i * KEY_BYTES:(i + 1) * KEY_BYTES] for i, name in enumerate(fresh)}
            before = db.total_changes
            db.executemany(f"{self._insert} ON CONFLICT ({self._where}) DO NOTHING",
                           self._rows((name, key, by_name[name]) for name, key in new.items()))
            if db.total_changes - before == len(new):
                check = [name for name in by_name if name not in new]
            else:  # some were stored already: read every one back, the stored key wins
                check = list(by_name)
            found = self._select_keys(check)
            gone = {name: os.urandom(KEY_BYTES) for name in check if name not in found}
            db.executemany(self._insert, self._rows((name, key, by_name[name]) for name, key in gone.items()))
            grown = []
            for name, (key, known) in found.items():
                new[name] = key
                stored_owners = set(known.split())
                if not by_name[name] <= stored_owners:
                    grown.append((_owners_text(stored_owners | by_name[name]), self._lookup(name)))
            db.executemany(f"UPDATE data_keys SET owners = ? WHERE {self._where} = ?", grown)
            if groups:
                new.update(self._group_keys(groups))
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        new.update(gone)
        self._names.update(named)
        return new

    def _current_names(self, key_ids: list[str]) -> dict[str, str]:
        """In the open transaction: the name each key id's current key has (or gets): the id itself until its
        key is first forgotten, then `<id>~<n>` from `key_lives`. In a file whose forgets before `key_lives`
        existed were not counted, an id with no stored key under its own name and no count takes `<id>~1`."""
        lives: dict[str, int] = {}
        for start in range(0, len(key_ids), 500):
            chunk = key_ids[start:start + 500]
            lives.update(self._db.execute(
                f"SELECT key_id, lives FROM key_lives WHERE key_id IN ({','.join('?' * len(chunk))})", chunk))
        if self._legacy:
            uncounted = [key_id for key_id in key_ids if key_id not in lives]
            stored = self._select_keys(uncounted)
            lives.update({key_id: 1 for key_id in uncounted if key_id not in stored})
        return {key_id: f"{key_id}~{lives[key_id]}" if key_id in lives else key_id for key_id in key_ids}

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
                self._clear()
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
        derived = derived_name(key_id)
        if self._forgetting == threading.get_ident():  # a forget's plan, reading the log: the lock is ours
            return self._get_derived(key_id, derived)
        with self._lock:
            return self._get_derived(key_id, derived)

    def stored_among(self, names: Iterable[str]) -> set[str]:
        """Which of `names` have a key stored under that very name (not derived from a group's): a forget
        receipt's count asks this of many names at once, 500 a statement, holding the lock a chunk at a time."""
        wanted, found = list(names), set()
        for start in range(0, len(wanted), 500):
            with self._lock:
                found.update(self._select_keys(wanted[start:start + 500]))
        return found

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

    def forget(self, tenant: str, owner: str, plan: Callable[[], ForgetPlan] | None = None,
               record: Callable[[int], object] | None = None) -> int:
        """Delete every key of the tenant that `owner` owns, the plan's further keys, and the key of every group
        it splits after storing each other member's derived key on its own (with its owners); then rewrite the
        file so no free page holds a deleted key. Returns the number of keys deleted.

        Runs holding the file's write lock, which every sealed write holds while its events commit (`ready`
        from `keys_pending`), so `plan()` sees the log as it stays until the keys are gone; it may read keys
        (this thread is let through). The store's forget count (`PRAGMA user_version`) moves on, so that other
        processes drop the keys they cached and decide again any batch sealed with them. `record(deleted)` (the
        `subject.forgotten` event) runs after the file's write lock is let go: a sealed write holds the event
        file's lock before it asks for the key file's, so recording under the key file's lock could deadlock. So
        that no writer of another process commits in between (decided before the event, with new keys for the
        subject), the forget's transaction also leaves a mark in `forgets_unrecorded`, removed once the event is
        logged: meanwhile other processes' sealed writes wait before taking keys, and one already past that is
        turned back at its commit (`KeysForgotten`) and decided again, after the event. A mark whose process is
        gone (or older than `UNRECORDED_LIMIT`) is ignored.
        """
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            self._forgetting = threading.get_ident()
            try:
                todo = plan() if plan is not None else ForgetPlan()
                deleted = 0
                names: list[str] = []
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
                        names.append(group_key_id)
                    db.execute("DELETE FROM key_groups WHERE group_id = ?", (group,))
                for each in dict.fromkeys((owner, *todo.owners)):
                    gone = db.execute("DELETE FROM data_keys WHERE key_id >= ? AND key_id < ? AND instr(owners, ?) > 0 "
                                      "RETURNING key_id", (f"{tenant}/", f"{tenant}0", f" {each} ")).fetchall()
                    deleted += len(gone)
                    names += [row[0] for row in gone]
                also = list(todo.also)
                # the plan's further keys under every name they had (`<id>~<n>` after an earlier forget)
                for start in range(0, len(todo.also), 500):
                    chunk = list(todo.also)[start:start + 500]
                    counted = dict(db.execute(f"SELECT key_id, lives FROM key_lives WHERE key_id IN "
                                              f"({','.join('?' * len(chunk))})", chunk))
                    also += [f"{key_id}~{n}" for key_id in chunk
                             for n in range(1, max(counted.get(key_id, 0), 1 if self._legacy else 0) + 1)]
                for start in range(0, len(also), 500):
                    chunk = also[start:start + 500]
                    marks = ",".join("?" * len(chunk))
                    gone = db.execute(f"DELETE FROM data_keys WHERE {self._where} IN ({marks}) RETURNING key_id",
                                      [self._lookup(key_id) for key_id in chunk]).fetchall()
                    deleted += len(gone)
                    names += [row[0] for row in gone]
                # a key id whose key is gone gets its next key under a new name (group keys and their members'
                # keys have names made once)
                lives: dict[str, int] = {}
                for name in names:
                    if "/root/" not in name:
                        key_id, _, n = name.partition("~")
                        lives[key_id] = max(lives.get(key_id, 0), int(n or 0) + 1)
                db.executemany("INSERT INTO key_lives (key_id, lives) VALUES (?, ?) ON CONFLICT (key_id) DO UPDATE "
                               "SET lives = max(lives, excluded.lives)", list(lives.items()))
                # groups whose key went with an owner: their next member makes a new one
                db.execute("DELETE FROM key_groups WHERE group_id >= ? AND group_id < ? AND key_id NOT IN "
                           "(SELECT key_id FROM data_keys)", (f"{tenant}/", f"{tenant}0"))
                epoch = db.execute("PRAGMA user_version").fetchone()[0] + 1
                db.execute(f"PRAGMA user_version = {epoch}")
                db.execute("DELETE FROM forgets_unrecorded WHERE pid = ?", (os.getpid(),))  # (left by a crash)
                if record is not None:
                    db.execute("INSERT INTO forgets_unrecorded VALUES (?, ?, ?)", (epoch, os.getpid(), time.time()))
                db.execute("COMMIT")
                self._epoch = epoch
                self.deleted = names
                """The names of the keys the last forget deleted (for its receipt)."""
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
            finally:
                self._forgetting = None
                self._clear()
        if record is not None:
            try:
                record(deleted)
            finally:
                with self._lock:
                    db.execute("DELETE FROM forgets_unrecorded WHERE epoch = ?", (epoch,))
        with self._lock:
            db.execute("VACUUM")
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return deleted

    @property
    def generation(self) -> int:
        return self._cache.generation

    @property
    def cached_keys(self) -> int:
        """How many keys this process holds in memory (it starts over past `CACHE_LIMIT`)."""
        return len(self._cache.keys)

    def evict_cache(self) -> None:
        """Forget cached keys (another process may have deleted some)."""
        with self._lock:
            self._clear()

    def _clear(self) -> None:
        self._cache.clear()
        self._names.clear()

    def close(self) -> None:
        if self._committer is not None:
            self._committer.shutdown(wait=True)
        with self._lock:
            self._db.close()


def _migrate_lives(db: sqlite3.Connection) -> bool:
    """Create `key_lives` (by key id, the number of its keys forgotten so far) if missing; return whether this
    file had forgets before it existed (their counts are unknown: `_current_names` then keeps clear of names
    those keys may have had)."""
    exists = db.execute("SELECT 1 FROM sqlite_master WHERE name = 'key_lives'").fetchone() is not None
    if not exists:
        db.execute("CREATE TABLE key_lives (key_id TEXT PRIMARY KEY, lives INTEGER NOT NULL)")
        db.execute("CREATE TABLE IF NOT EXISTS key_lives_uncounted (forgets INTEGER NOT NULL)")
        forgets = db.execute("PRAGMA user_version").fetchone()[0]
        if forgets:
            db.execute("INSERT INTO key_lives_uncounted VALUES (?)", (forgets,))
    return db.execute("SELECT 1 FROM key_lives_uncounted").fetchone() is not None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _key_hash(key_id: str) -> bytes:
    return hashlib.blake2b(key_id.encode(), digest_size=16, person=b"noumena-key").digest()


def _owners_text(owners: set[str] | frozenset[str]) -> str:
    return " " + " ".join(sorted(owners)) + " "
