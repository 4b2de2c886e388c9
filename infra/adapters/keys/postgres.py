"""The PostgreSQL key store (`noumena_*key*` tables in the event store's schema): no data key is ever written to
PostgreSQL in plaintext, and a fact's key is derived from its group's key, as in SQLite
(`infra.adapters.keys.derivation`), so writing a fact writes no key.

PostgreSQL does not erase a deleted row byte by byte: old row versions stay in `pg_wal` segments (and in WAL
archives, backups and replicas) after `DELETE` and `VACUUM FULL`. So keys are kept in a two-level hierarchy:

- a key-encryption key (KEK) in a file outside the database (`infra.adapters.keys.wrapping`);
- `BUCKETS` bucket keys in `noumena_key_buckets`, each wrapped under the KEK;
- every data key in `noumena_data_keys`, wrapped under its bucket's key. A key's bucket comes from its owners
  (`bucket_of`: a person's keys share one bucket, a session's that serves nobody another), so one subject's
  keys sit in few buckets.

A forget deletes the subject's keys, gives every bucket that held one of them a new bucket key (re-wrapping the
bucket's other keys under it), and rotates the KEK (re-wrapping every bucket key), all in one transaction; then
the old KEK's file bytes are overwritten. What a WAL, backup or replica copy is worth afterwards: a deleted data
key was wrapped under a bucket key that no longer exists anywhere but wrapped under the retired KEK; a bucket
key that was not replaced opens only keys that still exist (its bucket held none of the deleted ones). So the
forget costs `BUCKETS` bucket-key re-wraps plus the keys of the subject's buckets, not every key of the store.

Stores of the earlier layouts (keys in plaintext, or every key wrapped under the KEK) are converted when opened,
in one transaction (a one-off: 100,000 keys took 3.9 s); their earlier WAL copies are beyond reach, and the first
forget's KEK rotation makes every one of them useless.

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

from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from tenacity import Retrying, retry_if_result, stop_after_attempt, wait_fixed

from domain.forgetting import ContentKey, ForgetPlan, own_owners
from domain.ports import KeysForgotten
from infra.adapters.keys.cache import CACHE_LIMIT, NO_OWNERS, KeyCache
from infra.adapters.keys.derivation import KEY_BYTES, Sealing, derive, derived_name, member_sealing
from infra.adapters.keys.wrapping import Kek, KekFile, KekMissing, unwrap, wrap

BUCKETS = 1024
"""Bucket keys per schema. A forget re-wraps all of them and re-keys the buckets the subject's keys were in (with
a million keys spread evenly, about a thousand keys a bucket): about the square root of the keys a store holds
keeps the two costs level."""
PAGE = 20_000
"""Keys read and written per page when a store of an earlier layout is converted."""
KEK_READS = 50
KEK_READ_PAUSE = 0.05
"""A KEK not found is read this many times in all, this many seconds apart (a rotation being finished)."""


def bucket_of(key_id: str, owners: Iterable[str]) -> int:
    """The bucket a new key goes into: by its first `person:` owner, else its first `session:` owner, else its
    id, within its tenant; so the keys one forget deletes share few buckets."""
    people = sorted(o for o in owners if o.startswith("person:"))
    basis = people[0] if people else min((o for o in owners if o.startswith("session:")), default=key_id)
    tenant = key_id.split("/", 1)[0]
    digest = hashlib.blake2b(f"{tenant}\0{basis}".encode(), digest_size=8, person=b"noumena-bucket").digest()
    return int.from_bytes(digest, "big") % BUCKETS


def _bucket_aad(bucket: int) -> str:
    return f"bucket/{bucket}"


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
        self._buckets = f'"{self._schema}".noumena_key_buckets'
        self._groups = f'"{self._schema}".noumena_key_groups'
        self._lock_id = int.from_bytes(hashlib.blake2b(f"noumena-keys:{self._schema}".encode(),
                                                       digest_size=8).digest(), "big", signed=True)
        self._lock = threading.RLock()  # (a forget's plan and record read keys on its own thread)
        self._cache = KeyCache()
        self._names: dict[str, str] = {}
        """By key id: the name its current key is stored under (the id itself, or `<id>~<n>`)."""
        self._by_name: dict[str, bytes] = {}
        """Keys by the name sealed fields record (`get`)."""
        self._bucket_keys: dict[int, tuple[bytes, bytes, AESGCM]] = {}
        """By bucket: its wrapped key as last read, the key and its cipher (unwrapped again when the bytes
        differ)."""
        self._keks: dict[str, Kek] = {}
        self._epoch = 0
        self.kek_file = KekFile(kek_path or Path(".noumena") / "keys.kek")
        self.converted = 0
        """Keys converted from an earlier layout when this store was opened."""
        self._open()

    # ---------------------------------------------------------------- opening

    def _open(self) -> None:
        # Under the exclusive advisory lock a forget holds from writing the next KEK to wiping it: a `.next` file
        # found here is then a crash's leftover, never a rotation another process is in the middle of (before,
        # a process starting during a forget could read the file while it was being wiped, and fail, or wipe a
        # live rotation's file). Taken before the transaction: a forget takes the lock, then the row.
        self._db.execute("SELECT pg_advisory_lock(%s)", (self._lock_id,))
        try:
            self._open_locked()
        finally:
            self._db.execute("SELECT pg_advisory_unlock(%s)", (self._lock_id,))

    def _open_locked(self) -> None:
        db = self._db
        db.execute(f"CREATE TABLE IF NOT EXISTS {self._meta} (one BOOLEAN PRIMARY KEY DEFAULT TRUE "
                   "CHECK (one), kek_id TEXT, epoch BIGINT NOT NULL DEFAULT 0)")
        db.execute(f"INSERT INTO {self._meta} (one) VALUES (TRUE) ON CONFLICT DO NOTHING")
        with db.transaction():
            kek_id, self._epoch = db.execute(f"SELECT kek_id, epoch FROM {self._meta} FOR UPDATE").fetchone()
            self.kek_file.recover(kek_id)
            if kek_id is None:
                kek = self.kek_file.read() or self.kek_file.create()
                db.execute(f"UPDATE {self._meta} SET kek_id = %s", (kek.kek_id,))
            else:
                kek = self._find_kek(kek_id)
            db.execute(f"CREATE TABLE IF NOT EXISTS {self._owners} (key_id TEXT NOT NULL, owner TEXT NOT NULL, "
                       "PRIMARY KEY (key_id, owner))")
            db.execute(f"CREATE INDEX IF NOT EXISTS noumena_key_owners_by_owner ON {self._owners} (owner)")
            db.execute(f"CREATE TABLE IF NOT EXISTS {self._lives} (key_id TEXT PRIMARY KEY, lives INT NOT NULL)")
            db.execute(f"CREATE TABLE IF NOT EXISTS {self._groups} (group_id TEXT PRIMARY KEY, key_id TEXT NOT NULL)")
            db.execute(f"CREATE INDEX IF NOT EXISTS noumena_key_groups_by_key ON {self._groups} (key_id)")
            if db.execute("SELECT to_regclass(%s)", (self._buckets,)).fetchone()[0] is None:
                db.execute(f"CREATE TABLE {self._buckets} (bucket INT PRIMARY KEY, key BYTEA NOT NULL)")
                cipher = kek.cipher()
                with db.cursor().copy(f"COPY {self._buckets} (bucket, key) FROM STDIN") as copy:
                    for bucket in range(BUCKETS):
                        copy.write_row((bucket, wrap(cipher, _bucket_aad(bucket), os.urandom(KEY_BYTES))))
            if db.execute("SELECT to_regclass(%s)", (self._keys,)).fetchone()[0] is None:
                db.execute(f"CREATE TABLE {self._keys} (key_id TEXT PRIMARY KEY, key BYTEA NOT NULL, "
                           "bucket INT NOT NULL)")
                db.execute(f"CREATE INDEX noumena_data_keys_by_bucket ON {self._keys} (bucket)")
            elif db.execute("SELECT 1 FROM information_schema.columns WHERE table_schema = %s AND table_name = "
                            "'noumena_data_keys' AND column_name = 'bucket'", (self._schema,)).fetchone() is None:
                self.converted = self._convert(kek)
        self._keks[kek.kek_id] = kek

    def _convert(self, kek: Kek) -> int:
        """A store of an earlier layout (one key a row, in plaintext or wrapped under the KEK) rewritten into a
        new table, each key wrapped under its bucket's key (its bucket from its owners), a page at a time with
        `COPY` in text form; the old table dropped in the same transaction."""
        from psycopg import sql

        opened = kek.cipher()
        buckets = self._load_buckets(None, kek)
        following = f'"{self._schema}".noumena_data_keys_next'
        self._db.execute(f"DROP TABLE IF EXISTS {following}")
        self._db.execute(f"CREATE TABLE {following} (key_id TEXT NOT NULL, key BYTEA NOT NULL, bucket INT NOT NULL)")
        done, after = 0, ""
        with self._db.cursor() as cursor:
            while True:
                query = sql.SQL(
                    "COPY (SELECT k.key_id, encode(k.key, 'hex'), coalesce(string_agg(o.owner, ' '), '') FROM {} k "
                    "LEFT JOIN {} o USING (key_id) WHERE k.key_id > {} GROUP BY k.key_id, k.key ORDER BY k.key_id "
                    "LIMIT {}) TO STDOUT").format(sql.SQL(self._keys), sql.SQL(self._owners), sql.Literal(after),
                                                  sql.Literal(PAGE))
                with cursor.copy(query) as copy:
                    data = b"".join(bytes(block) for block in copy)
                if not data:
                    break
                out = []
                for line in data.splitlines():
                    escaped, hexed, owners = line.split(b"\t")
                    key_id = escaped.replace(b"\\\\", b"\\").decode()
                    stored = bytes.fromhex(hexed.decode())
                    key = stored if len(stored) == KEY_BYTES else unwrap(opened, key_id, stored)
                    bucket = bucket_of(key_id, owners.replace(b"\\\\", b"\\").decode().split())
                    out.append(b"%s\t\\\\x%s\t%d" % (escaped, wrap(buckets[bucket], key_id, key).hex().encode(),
                                                     bucket))
                with cursor.copy(f"COPY {following} (key_id, key, bucket) FROM STDIN") as copy:
                    copy.write(b"\n".join(out) + b"\n")
                done += len(out)
                after = key_id
        self._db.execute(f"ALTER TABLE {following} ADD CONSTRAINT noumena_data_keys_{os.urandom(6).hex()} "
                         "PRIMARY KEY (key_id)")
        self._db.execute(f"DROP TABLE {self._keys}")
        self._db.execute(f"ALTER TABLE {following} RENAME TO noumena_data_keys")
        self._db.execute(f"CREATE INDEX noumena_data_keys_by_bucket ON {self._keys} (bucket)")
        return done

    # ---------------------------------------------------------------- KEK and bucket keys

    def _find_kek(self, kek_id: str) -> Kek:
        kek = self._keks.get(kek_id)
        if kek is not None:
            return kek
        # Another process may be finishing the rotation to this KEK: its bytes are being written over the old
        # file's in place and the next file wiped, so a read can catch neither; read again for a moment.
        reads = Retrying(retry=retry_if_result(lambda found: found is None), stop=stop_after_attempt(KEK_READS),
                         wait=wait_fixed(KEK_READ_PAUSE), retry_error_callback=lambda _: None)
        kek = reads(self._kek_in_file, kek_id)
        if kek is not None:
            self._keks = {kek_id: kek}
            return kek
        raise KekMissing(f"the data keys in schema {self._schema!r} are wrapped under KEK {kek_id}, which "
                         f"{self.kek_file.path} does not hold (NOUMENA_KEK_FILE must name the file every process "
                         "of this store shares)")

    def _kek_in_file(self, kek_id: str) -> Kek | None:
        return next((kek for kek in self.kek_file.candidates() if kek.kek_id == kek_id), None)

    def _bucket_cipher(self, bucket: int, wrapped: bytes, kek_id: str) -> AESGCM:
        """The cipher of a bucket's key, from its wrapped bytes as read in the same statement as the KEK id."""
        return self._bucket_key(bucket, wrapped, kek_id)[2]

    def _bucket_key(self, bucket: int, wrapped: bytes, kek_id: str) -> tuple[bytes, bytes, AESGCM]:
        known = self._bucket_keys.get(bucket)
        if known is None or known[0] != wrapped:
            key = unwrap(self._find_kek(kek_id).cipher(), _bucket_aad(bucket), wrapped)
            known = self._bucket_keys[bucket] = (wrapped, key, AESGCM(key))
        return known

    def _load_buckets(self, wanted: list[int] | None, kek: Kek | None = None) -> dict[int, AESGCM]:
        """Bucket ciphers (every bucket's if `wanted` is None), read in the open transaction."""
        if wanted is None:
            rows = self._db.execute(f"SELECT b.bucket, b.key, m.kek_id FROM {self._buckets} b, {self._meta} m"
                                    ).fetchall()
        else:
            rows = self._db.execute(f"SELECT b.bucket, b.key, m.kek_id FROM {self._buckets} b, {self._meta} m "
                                    "WHERE b.bucket = ANY(%s)", (wanted,)).fetchall()
        if kek is not None:
            self._keks[kek.kek_id] = kek
        return {bucket: self._bucket_cipher(bucket, bytes(key), kek_id) for bucket, key, kek_id in rows}

    def _all_bucket_keys(self) -> dict[int, bytes]:
        """Every bucket's key, in the open transaction."""
        rows = self._db.execute(f"SELECT b.bucket, b.key, m.kek_id FROM {self._buckets} b, {self._meta} m").fetchall()
        return {bucket: self._bucket_key(bucket, bytes(key), kek_id)[1] for bucket, key, kek_id in rows}

    # ---------------------------------------------------------------- keys

    def keys_for(self, wanted: Iterable[ContentKey]) -> dict[str, bytes]:
        sealings, ready = self.keys_pending(wanted)
        return {key_id: sealing[1] for key_id, sealing in sealings.items()}

    def keys_pending(self, wanted: Iterable[ContentKey]) -> tuple[dict[str, Sealing], Callable[[], Callable[[], None]]]:
        """As `SQLiteKeyStore.keys_pending`: a key with a group is derived from the group's key (nothing is
        written unless the group has no key yet); new keys are committed before this returns, in one
        transaction. `ready` takes the shared advisory lock (no forget runs until the function it returns is
        called, after the events commit) and raises `KeysForgotten` if a forget ran since the keys were handed
        out."""
        wanted = list(wanted)
        with self._lock:
            self._cache.bound()
            result, singles, groups = self._classify(wanted)
            if singles or groups:
                try:
                    self._store_all(wanted, singles, groups)
                except BaseException:  # nothing of this batch was committed: neither may the cache hold it
                    self._clear()
                    raise
                result, singles, groups = self._classify(wanted)
                assert not singles and not groups
            epoch = self._epoch
        return result, lambda: self._hold(epoch)

    def _store_all(self, wanted: list[ContentKey], singles: list[ContentKey], groups: dict[str, frozenset[str]]
                   ) -> None:
        """One transaction storing (or reading) what the cache could not answer; the cache learns it."""
        with self._db.transaction():
            # FOR SHARE: a forget (which holds this row FOR UPDATE) finishes first, and the new keys are wrapped
            # under the bucket keys it left
            epoch = self._db.execute(f"SELECT epoch FROM {self._meta} FOR SHARE").fetchone()[0]
            if epoch != self._epoch:  # another process forgot: what is cached may be gone
                self._clear()
                self._epoch = epoch
                _, singles, groups = self._classify(wanted)
            self._store(singles, groups)
        cache = self._cache
        for k in singles:
            cache.owners[k.key_id] = cache.owners.get(k.key_id, frozenset()) | own_owners(k)

    def _classify(self, wanted: list[ContentKey]
                  ) -> tuple[dict[str, Sealing], list[ContentKey], dict[str, frozenset[str]]]:
        """What the cache answers, and what must be stored or read: keys on their own, and groups."""
        cache = self._cache
        verified = cache.verified
        result: dict[str, Sealing] = {}
        singles: dict[str, ContentKey] = {}
        groups: dict[str, frozenset[str]] = {}
        for k in wanted:
            if k.group is not None:
                found = cache.groups.get(k.group)
                if found is None:
                    groups[k.group] = k.owners
                else:
                    result[k.key_id] = member_sealing(found, k.key_id)
                continue
            hit = verified.get(k.key_id)  # (the domain hands out one object per session key: one identity check)
            if hit is not None and hit[0] is k:
                result[k.key_id] = hit[1]
                continue
            key = cache.keys.get(k.key_id)
            if key is not None and k.owners <= cache.owners.get(k.key_id, NO_OWNERS):
                sealing = result[k.key_id] = (self._names[k.key_id], key)
                verified[k.key_id] = (k, sealing)
                continue
            known = singles.get(k.key_id)
            singles[k.key_id] = k if known is None else known._replace(owners=known.owners | k.owners)
        return result, list(singles.values()), groups

    def _store(self, singles: list[ContentKey], groups: dict[str, frozenset[str]]) -> None:
        """In the open transaction: each single key (stored, or made now) with its owners recorded, and each
        group's current key (stored, or made now); into the cache."""
        db, cache = self._db, self._cache
        # a key id whose key was forgotten before gets a new name (`<key id>~<n>`): the events sealed with the
        # deleted key keep reading `[forgotten]`, never as a key that does not open them
        lives = dict(db.execute(f"SELECT key_id, lives FROM {self._lives} WHERE key_id = ANY(%s)",
                                ([k.key_id for k in singles],)).fetchall()) if singles else {}
        names = {k.key_id: f"{k.key_id}~{lives[k.key_id]}" if k.key_id in lives else k.key_id for k in singles}
        owners = {names[k.key_id]: own_owners(k) for k in singles}
        group_names: dict[str, str] = {}
        if groups:
            made = {group: f"{group.split('/', 1)[0]}/root/{os.urandom(16).hex()}" for group in groups}
            won = {r[0] for r in db.execute(
                f"INSERT INTO {self._groups} (group_id, key_id) SELECT * FROM unnest(%s::text[], %s::text[]) "
                "ON CONFLICT DO NOTHING RETURNING group_id", (list(made), list(made.values()))).fetchall()}
            for group in won:
                owners[made[group]] = groups[group]
            lost = [group for group in groups if group not in won]
            if lost:
                group_names.update(db.execute(f"SELECT group_id, key_id FROM {self._groups} WHERE group_id = ANY(%s)",
                                              (lost,)).fetchall())
            group_names.update({group: made[group] for group in won})
        new = {name: (bucket_of(name, owned), os.urandom(KEY_BYTES)) for name, owned in owners.items()}
        ciphers = self._load_buckets(sorted({bucket for bucket, _ in new.values()}))
        inserted = {r[0] for r in db.execute(
            f"INSERT INTO {self._keys} (key_id, key, bucket) SELECT * FROM unnest(%s::text[], %s::bytea[], %s::int[]) "
            "ON CONFLICT DO NOTHING RETURNING key_id",
            (list(new), [wrap(ciphers[b], name, key) for name, (b, key) in new.items()],
             [b for b, _ in new.values()])).fetchall()}
        pairs = [(name, owner) for name, owned in owners.items() for owner in owned]
        if pairs:
            db.execute(f"INSERT INTO {self._owners} (key_id, owner) SELECT * FROM unnest(%s::text[], %s::text[]) "
                       "ON CONFLICT DO NOTHING", ([p[0] for p in pairs], [p[1] for p in pairs]))
        opened = {name: key for name, (_, key) in new.items() if name in inserted}
        # stored already (by another process, or a batch whose events never committed; or a group's key made
        # by another writer): the stored key wins
        unread = [name for name in [*names.values(), *group_names.values()] if name not in opened]
        opened.update(self._read(unread))
        for key_id, name in names.items():
            cache.keys[key_id] = self._by_name[name] = opened[name]
            self._names[key_id] = name
        for group, name in group_names.items():
            cache.groups[group] = (name, opened[name])
            self._by_name[name] = opened[name]

    def _read(self, names: list[str]) -> dict[str, bytes]:
        """Stored keys by name, unwrapped (missing ones left out), read in one statement with their bucket keys
        and the KEK's id."""
        if not names:
            return {}
        rows = self._db.execute(
            f"SELECT k.key_id, k.key, k.bucket, b.key, m.kek_id FROM {self._keys} k JOIN {self._buckets} b "
            f"USING (bucket), {self._meta} m WHERE k.key_id = ANY(%s)", (names,)).fetchall()
        return {name: unwrap(self._bucket_cipher(bucket, bytes(bucket_key), kek_id), name, bytes(key))
                for name, key, bucket, bucket_key, kek_id in rows}

    def _hold(self, epoch: int) -> Callable[[], None]:
        """Take the shared advisory lock and read the forget epoch, in one round trip (a pipeline): the server
        runs the read once the lock is granted and takes its snapshot then (READ COMMITTED: one a statement), so
        a forget committed while the lock was awaited is seen. (One statement doing both would not: its snapshot
        is taken before it waits for the lock.)"""
        with self._lock:
            try:
                with self._db.pipeline():
                    self._db.execute("SELECT pg_advisory_lock_shared(%s)", (self._lock_id,))
                    read = self._db.execute(f"SELECT epoch FROM {self._meta}")
                now = read.fetchone()[0]  # type: ignore[index]
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
        """A key's bytes by id or derived name, or None once it is forgotten. A derived key comes from its group's
        key while that exists; once the group's key is deleted, from the member's own key stored at the time
        (`forget` with splits), if it was not forgotten itself."""
        with self._lock:
            derived = derived_name(key_id)
            if derived is not None:
                group_key = self._get(derived[1])
                if group_key is not None:
                    return derive(group_key, derived[2])
            return self._get(key_id)

    def stored_among(self, names: Iterable[str]) -> set[str]:
        """Which of `names` have a key stored under that very name (not derived from a group's), in one
        statement: a forget receipt's count asks this of many names at once."""
        wanted = list(names)
        if not wanted:
            return set()
        with self._lock:
            rows = self._db.execute(f"SELECT key_id FROM {self._keys} WHERE key_id = ANY(%s)", (wanted,)).fetchall()
        return {row[0] for row in rows}

    def _get(self, name: str) -> bytes | None:
        key = self._by_name.get(name)
        if key is None:
            key = self._read([name]).get(name)
            if key is None:
                return None
            if len(self._by_name) > CACHE_LIMIT:
                self._by_name.clear()
            self._by_name[name] = key
        return key

    # ---------------------------------------------------------------- forgetting

    def forget(self, tenant: str, owner: str, plan: Callable[[], ForgetPlan] | None = None,
               record: Callable[[int], object] | None = None) -> int:
        """Delete every key of the tenant that `owner` (or a further owner of the plan) owns, the plan's further
        keys, and the key of every group it splits after storing each other member's derived key on its own;
        re-key the buckets those keys were in and rotate the KEK; then `record(deleted)` (the
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
        """Seconds of the last forget's steps (plan, open: bucket keys read and keys found, delete, rekey, rotate,
        commit): for the benchmark."""
        new = self.kek_file.prepare()
        db = self._db
        try:
            with db.transaction():
                kek_id, epoch = db.execute(f"SELECT kek_id, epoch FROM {self._meta} FOR UPDATE").fetchone()
                self._find_kek(kek_id)
                buckets = self._all_bucket_keys()
                doomed: dict[str, int] = {}
                for group, members in todo.splits.items():
                    row = db.execute(f"SELECT g.key_id FROM {self._groups} g WHERE group_id = %s", (group,)
                                     ).fetchone()
                    group_key = self._read([row[0]]).get(row[0]) if row is not None else None
                    if group_key is not None:  # its other members' keys stored on their own first
                        also.append(row[0])
                        rows = []
                        for member, member_owners in members.items():
                            name = f"{row[0]}/{member}"
                            bucket = bucket_of(name, member_owners)
                            rows.append((name, wrap(AESGCM(buckets[bucket]), name, derive(group_key, member)),
                                         bucket, member_owners))
                        self._insert(rows)
                    db.execute(f"DELETE FROM {self._groups} WHERE group_id = %s", (group,))
                # the plan's further keys under every name they had (`<id>~<n>` after an earlier forget)
                lives = dict(db.execute(f"SELECT key_id, lives FROM {self._lives} WHERE key_id = ANY(%s)",
                                        (also,)).fetchall())
                named = also + [f"{key_id}~{n}" for key_id, most in lives.items() for n in range(1, most + 1)]
                doomed.update(db.execute(  # (a union, not an OR: each side through its index)
                    f"SELECT key_id, bucket FROM {self._keys} WHERE key_id IN (SELECT key_id FROM {self._owners} "
                    f"WHERE owner = ANY(%s) AND key_id LIKE %s) UNION SELECT key_id, bucket FROM {self._keys} "
                    "WHERE key_id = ANY(%s)", (owners, f"{tenant}/%", named)).fetchall())
                timings["open"] = time.perf_counter() - started - sum(timings.values())
                names = list(doomed)
                db.execute(f"DELETE FROM {self._keys} WHERE key_id = ANY(%s)", (names,))
                db.execute(f"DELETE FROM {self._owners} WHERE key_id = ANY(%s)", (names,))
                # groups whose key went with an owner: their next member makes a new one
                db.execute(f"DELETE FROM {self._groups} WHERE key_id = ANY(%s)", (names,))
                lives = {}
                for name in names:
                    if derived_name(name) is not None or "/root/" in name:
                        continue  # (group keys and their members' keys have ids made once)
                    key_id, _, n = name.partition("~")
                    lives[key_id] = max(lives.get(key_id, 0), int(n or 0) + 1)
                if lives:
                    db.execute(f"INSERT INTO {self._lives} SELECT * FROM unnest(%s::text[], %s::int[]) "
                               f"ON CONFLICT (key_id) DO UPDATE SET lives = GREATEST({self._lives}.lives, "
                               "EXCLUDED.lives)", (list(lives), list(lives.values())))
                self.deleted = names
                """The names of the keys the last forget deleted (for its receipt)."""
                timings["delete"] = time.perf_counter() - started - sum(timings.values())
                self.rekeyed = self._rekey(sorted(set(doomed.values())), buckets)
                """Keys re-wrapped under a new bucket key by the last forget."""
                timings["rekey"] = time.perf_counter() - started - sum(timings.values())
                self.rewrapped = self._rotate(buckets, new)
                """Bucket keys re-wrapped under the new KEK by the last forget."""
                timings["rotate"] = time.perf_counter() - started - sum(timings.values())
                db.execute(f"UPDATE {self._meta} SET kek_id = %s, epoch = %s", (new.kek_id, epoch + 1))
        except BaseException:
            self.kek_file.discard()
            self._bucket_keys.clear()
            raise
        self.kek_file.finish(new)
        timings["commit"] = time.perf_counter() - started - sum(timings.values())
        self._keks = {new.kek_id: new}
        self._epoch = epoch + 1
        self._bucket_keys.clear()
        self._clear()
        return len(names)

    def _insert(self, rows: list[tuple[str, bytes, int, frozenset[str]]]) -> None:
        """Wrapped keys with their buckets and owners, in the open transaction."""
        self._db.execute(f"INSERT INTO {self._keys} (key_id, key, bucket) SELECT * FROM "
                         "unnest(%s::text[], %s::bytea[], %s::int[]) ON CONFLICT DO NOTHING",
                         ([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows]))
        pairs = [(r[0], owner) for r in rows for owner in r[3]]
        self._db.execute(f"INSERT INTO {self._owners} (key_id, owner) SELECT * FROM unnest(%s::text[], %s::text[]) "
                         "ON CONFLICT DO NOTHING", ([p[0] for p in pairs], [p[1] for p in pairs]))

    def _rekey(self, affected: list[int], buckets: dict[int, bytes]) -> int:
        """Each affected bucket gets a new key (into `buckets`), and every key left in it is re-wrapped under it:
        the old bucket key, wrapped under the retired KEK only, takes every copy of the deleted keys with it."""
        if not affected:
            return 0
        fresh = {bucket: os.urandom(KEY_BYTES) for bucket in affected}
        opened = {bucket: AESGCM(buckets[bucket]) for bucket in affected}
        sealed = {bucket: AESGCM(key) for bucket, key in fresh.items()}
        rows = self._db.execute(f"SELECT key_id, key, bucket FROM {self._keys} WHERE bucket = ANY(%s)",
                                (affected,)).fetchall()
        names = [name for name, _, _ in rows]
        wrapped = [wrap(sealed[bucket], name, unwrap(opened[bucket], name, bytes(key))) for name, key, bucket in rows]
        if rows:
            self._db.execute(f"UPDATE {self._keys} k SET key = n.key FROM unnest(%s::text[], %s::bytea[]) "
                             "AS n(key_id, key) WHERE k.key_id = n.key_id", (names, wrapped))
        buckets.update(fresh)
        return len(rows)

    def _rotate(self, buckets: dict[int, bytes], new: Kek) -> int:
        """Every bucket key wrapped under the new KEK (the re-keyed ones with their new keys)."""
        sealed = new.cipher()
        numbers = sorted(buckets)
        self._db.execute(f"UPDATE {self._buckets} b SET key = n.key FROM unnest(%s::int[], %s::bytea[]) "
                         "AS n(bucket, key) WHERE b.bucket = n.bucket",
                         (numbers, [wrap(sealed, _bucket_aad(b), buckets[b]) for b in numbers]))
        return len(numbers)

    def _clear(self) -> None:
        self._cache.clear()
        self._names.clear()
        self._by_name.clear()

    @property
    def generation(self) -> int:
        return self._cache.generation

    @property
    def cached_keys(self) -> int:
        """How many keys this process holds in memory (it starts over past `CACHE_LIMIT`)."""
        return len(self._cache.keys)

    def evict_cache(self) -> None:
        with self._lock:
            self._clear()

    def close(self) -> None:
        self._db.close()
