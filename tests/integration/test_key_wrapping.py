"""PostgreSQL never holds a data key in plaintext: keys are wrapped under a key-encryption key kept in a file, a
forget rotates it (every other key re-wrapped, the old KEK's bytes overwritten), stores from before are wrapped
on open, and an interrupted rotation is finished or undone on open. On the real PostgreSQL server."""

from __future__ import annotations

import os
from pathlib import Path

import psycopg
import pytest

from domain.forgetting import ContentKey
from infra.adapters.keys.postgres import BUCKETS, PostgresKeyStore, bucket_of
from infra.adapters.keys.wrapping import KekFile, KekMissing, is_wrapped, wrap
from tests.conftest import postgres_settings

pytestmark = pytest.mark.postgres  # every test here opens the PostgreSQL key store

T = "acme"


def _open(home: Path, schema: str | None = None) -> tuple[PostgresKeyStore, str]:
    settings = postgres_settings(home, schema)
    connect = {"host": settings.pg_host, "port": settings.pg_port, "user": settings.pg_user,
               "password": settings.pg_password.get_secret_value(), "dbname": settings.pg_dbname}
    return PostgresKeyStore(connect, settings.pg_schema, home / "keys.kek"), settings.pg_schema


def _select(home: Path, schema: str, statement: str, params: tuple = ()) -> list[tuple]:
    """What an auditor holding the database reads, on a connection of its own (`{schema}`: the store's schema)."""
    with psycopg.connect(**postgres_settings(home, schema).pg_connect_kwargs()) as db:
        return db.execute(statement.format(schema=f'"{schema}"'), params).fetchall()


def _rows(home: Path, schema: str) -> dict[str, bytes]:
    return {r[0]: bytes(r[1]) for r in _select(home, schema, "SELECT key_id, key FROM {schema}.noumena_data_keys")}


def _key(n: int, owner: str) -> ContentKey:
    return ContentKey(f"{T}/entity/memory:{n}", frozenset((owner,)))


def _bucket_rows(home: Path, schema: str) -> dict[int, bytes]:
    return {r[0]: bytes(r[1]) for r in _select(home, schema, "SELECT bucket, key FROM {schema}.noumena_key_buckets")}


def _neighbour(of: str) -> str:
    """Another person whose keys share `of`'s bucket."""
    return next(f"person:n{n}" for n in range(100_000)
                if bucket_of(f"{T}/entity/memory:0", [f"person:n{n}"]) == bucket_of(f"{T}/entity/memory:0", [of]))


def test_no_data_key_is_stored_in_plaintext_and_a_forget_rekeys_the_subjects_buckets_and_rotates_the_kek(tmp_path):
    store, schema = _open(tmp_path)
    neighbour = _neighbour("person:x")
    owner = {n: "person:x" if n < 3 else neighbour if n < 5 else "person:y" for n in range(10)}
    keys = store.keys_for([_key(n, owner[n]) for n in range(10)])
    rows, buckets = _rows(tmp_path, schema), _bucket_rows(tmp_path, schema)
    assert len(rows) == 10 and all(is_wrapped(stored) for stored in rows.values())
    assert len(buckets) == BUCKETS and all(is_wrapped(stored) for stored in buckets.values())
    assert not any(key in stored for key in keys.values() for stored in rows.values())
    old_kek = KekFile(tmp_path / "keys.kek").read()
    assert old_kek is not None and os.stat(tmp_path / "keys.kek").st_mode & 0o777 == 0o600

    assert store.forget(T, "person:x") == 3
    assert store.rekeyed == 2 and store.rewrapped == BUCKETS  # the neighbour's keys; every bucket key
    new_kek = KekFile(tmp_path / "keys.kek").read()
    assert new_kek is not None and new_kek.kek_id != old_kek.kek_id
    assert old_kek.key not in (tmp_path / "keys.kek").read_bytes()
    assert old_kek.key.hex().encode() not in (tmp_path / "keys.kek").read_bytes()
    assert not (tmp_path / "keys.kek.next").exists()
    after, buckets_after = _rows(tmp_path, schema), _bucket_rows(tmp_path, schema)
    assert len(after) == 7 and all(buckets_after[b] != buckets[b] for b in buckets)  # every bucket key re-wrapped
    name = f"{T}/entity/memory:{{}}".format
    assert all(after[name(n)] != rows[name(n)] for n in (3, 4))  # the bucket that held X's keys: a new key
    assert all(after[name(n)] == rows[name(n)] for n in range(5, 10))  # other buckets: untouched
    store.close()

    again, _ = _open(tmp_path, schema)  # a fresh process reads the remaining keys, not the forgotten ones
    for n in range(10):
        assert again.get(name(n)) == (None if n < 3 else keys[name(n)])
    again.close()


def test_another_process_reads_keys_after_a_rotation_it_did_not_make(tmp_path):
    first, schema = _open(tmp_path)
    second, _ = _open(tmp_path, schema)
    keys = first.keys_for([_key(1, "person:x"), _key(2, "person:y")])
    assert second.get(f"{T}/entity/memory:2") == keys[f"{T}/entity/memory:2"]
    first.forget(T, "person:x")
    second.evict_cache()
    assert second.get(f"{T}/entity/memory:2") == keys[f"{T}/entity/memory:2"]  # its KEK was rotated meanwhile
    assert second.get(f"{T}/entity/memory:1") is None
    more = second.keys_for([_key(3, "person:y")])  # wrapped under the KEK the rotation left
    assert first.get(f"{T}/entity/memory:3") == more[f"{T}/entity/memory:3"]
    first.close()
    second.close()


def test_a_store_of_an_earlier_layout_is_converted_when_opened(tmp_path):
    """Keys in plaintext (before wrapping) and keys wrapped under the KEK (before buckets), in the tables those
    layouts made: opened, each is wrapped under its bucket's key, reads as before and is forgotten by owner."""
    settings = postgres_settings(tmp_path)
    schema = settings.pg_schema
    kek = KekFile(tmp_path / "keys.kek").create()
    plain, wrapped = os.urandom(32), os.urandom(32)
    odd = f"{T}/entity/memory:back\\slash"
    with psycopg.connect(host=settings.pg_host, port=settings.pg_port, user=settings.pg_user,
                         password=settings.pg_password.get_secret_value(), dbname=settings.pg_dbname,
                         autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
        conn.execute(f'CREATE TABLE "{schema}".noumena_data_keys (key_id TEXT PRIMARY KEY, key BYTEA NOT NULL)')
        conn.execute(f'CREATE TABLE "{schema}".noumena_key_owners (key_id TEXT NOT NULL, owner TEXT NOT NULL, '
                     "PRIMARY KEY (key_id, owner))")
        conn.execute(f'CREATE TABLE "{schema}".noumena_key_meta (one BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (one), '
                     "kek_id TEXT, epoch BIGINT NOT NULL DEFAULT 0)")
        conn.execute(f'INSERT INTO "{schema}".noumena_key_meta (kek_id) VALUES (%s)', (kek.kek_id,))
        rows = [(f"{T}/entity/person:old", plain, "person:old"),
                (f"{T}/session/s1", wrap(kek.cipher(), f"{T}/session/s1", wrapped), "person:old"),
                (odd, wrap(kek.cipher(), odd, wrapped), "person:keep")]
        for key_id, key, owner in rows:
            conn.execute(f'INSERT INTO "{schema}".noumena_data_keys VALUES (%s, %s)', (key_id, key))
            conn.execute(f'INSERT INTO "{schema}".noumena_key_owners VALUES (%s, %s)', (key_id, owner))
    reopened, _ = _open(tmp_path, schema)
    assert reopened.converted == 3
    stored = _rows(tmp_path, schema)
    assert all(is_wrapped(key) for key in stored.values()) and plain not in stored[f"{T}/entity/person:old"]
    assert [r[0] for r in _select(tmp_path, schema, "SELECT bucket FROM {schema}.noumena_data_keys WHERE key_id = %s",
                                  (odd,))] == [bucket_of(odd, ["person:keep"])]
    assert reopened.get(f"{T}/entity/person:old") == plain and reopened.get(odd) == wrapped
    reopened.close()
    again, _ = _open(tmp_path, schema)  # converted once
    assert again.converted == 0 and again.get(f"{T}/session/s1") == wrapped
    assert again.forget(T, "person:old") == 2
    assert again.get(f"{T}/session/s1") is None and again.get(odd) == wrapped
    again.close()


def test_a_rotation_interrupted_before_its_commit_is_undone_on_open_and_a_lost_kek_is_named(tmp_path):
    store, schema = _open(tmp_path)
    keys = store.keys_for([_key(1, "person:y")])
    store.close()
    kek_file = KekFile(tmp_path / "keys.kek")
    current = kek_file.read()
    kek_file.prepare()  # a rotation that crashed before its transaction committed
    reopened, _ = _open(tmp_path, schema)
    assert not kek_file.next_path.exists() and kek_file.read() == current
    assert reopened.get(f"{T}/entity/memory:1") == keys[f"{T}/entity/memory:1"]
    reopened.close()

    (tmp_path / "keys.kek").unlink()  # the KEK lost: the keys cannot be opened, and the error says why
    with pytest.raises(KekMissing, match="NOUMENA_KEK_FILE"):
        _open(tmp_path, schema)


def test_a_rotation_keeps_keys_whose_ids_hold_backslashes_and_other_scripts(tmp_path):
    store, schema = _open(tmp_path)
    odd = [ContentKey(f"{T}/entity/memory:{name}", frozenset(("person:y",))) for name in
           ("back\\slash", "李总的报价", "tab\\tlike", "ünïcode\\\\x00")]
    keys = store.keys_for([*odd, _key(1, "person:x")])
    store.forget(T, "person:x")
    store.close()
    again, _ = _open(tmp_path, schema)
    assert {k.key_id: again.get(k.key_id) for k in odd} == {k.key_id: keys[k.key_id] for k in odd}
    again.close()


def test_a_process_that_reads_the_kek_file_while_a_rotation_writes_it_over_waits_for_the_new_kek(tmp_path):
    import threading
    import time

    first, schema = _open(tmp_path)
    second, _ = _open(tmp_path, schema)
    keys = first.keys_for([_key(1, "person:y")])
    first.forget(T, "person:x")  # the KEK rotates: keys.kek now holds the new one
    path = tmp_path / "keys.kek"
    whole = path.read_bytes()
    path.write_bytes(whole[: len(whole) // 2])  # as another process finishing the rotation leaves it mid-write

    def finish() -> None:
        time.sleep(0.3)
        path.write_bytes(whole)

    writer = threading.Thread(target=finish)
    writer.start()
    second.evict_cache()
    started = time.monotonic()
    assert second.get(f"{T}/entity/memory:1") == keys[f"{T}/entity/memory:1"]
    assert time.monotonic() - started >= 0.25  # it read again until the file was whole
    writer.join()
    first.close()
    second.close()


def test_a_next_kek_file_cut_short_or_half_wiped_by_a_crash_is_wiped_on_open(tmp_path):
    store, schema = _open(tmp_path)
    keys = store.keys_for([_key(1, "person:y")])
    store.close()
    kek_file = KekFile(tmp_path / "keys.kek")
    for leftover in (b'{"id": "ab', b"\0" * 60):  # cut short while written; crashed while wiped
        kek_file.next_path.write_bytes(leftover)
        reopened, _ = _open(tmp_path, schema)
        assert not kek_file.next_path.exists()
        assert reopened.get(f"{T}/entity/memory:1") == keys[f"{T}/entity/memory:1"]
        reopened.close()


def test_a_store_opened_while_another_connection_forgets_waits_for_the_forget_to_end(tmp_path):
    """A process starting during a forget never reads the rotation's `.next` file while it is written or wiped,
    nor takes a live rotation's file for a crash's leftover: it opens once the forget is over."""
    import threading
    import time

    from domain.forgetting import ForgetPlan

    first, schema = _open(tmp_path)
    keys = first.keys_for([_key(1, "person:y"), _key(2, "person:x")])
    planning = threading.Event()

    def slow_plan() -> ForgetPlan:
        planning.set()
        time.sleep(0.5)
        return ForgetPlan()

    ended: dict[str, float] = {}

    def forget() -> None:
        first.forget(T, "person:x", slow_plan)
        ended["forget"] = time.monotonic()

    forgetting = threading.Thread(target=forget)
    forgetting.start()
    assert planning.wait(10)
    second, _ = _open(tmp_path, schema)
    ended["open"] = time.monotonic()
    forgetting.join()
    assert ended["open"] >= ended["forget"]
    assert second.get(f"{T}/entity/memory:1") == keys[f"{T}/entity/memory:1"]
    assert second.get(f"{T}/entity/memory:2") is None
    first.close()
    second.close()
