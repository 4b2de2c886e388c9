"""PostgreSQL never holds a data key in plaintext: keys are wrapped under a key-encryption key kept in a file, a
forget rotates it (every other key re-wrapped, the old KEK's bytes overwritten), stores from before are wrapped
on open, and an interrupted rotation is finished or undone on open. On the real PostgreSQL server."""

from __future__ import annotations

import os
from pathlib import Path

import psycopg
import pytest

from domain.forgetting import ContentKey
from infra.keys.postgres import PostgresKeyStore
from infra.keys.wrapping import KekFile, KekMissing, is_wrapped
from tests.conftest import postgres_settings

pytestmark = pytest.mark.postgres  # every test here opens the PostgreSQL key store

T = "acme"


def _open(home: Path, schema: str | None = None) -> tuple[PostgresKeyStore, str]:
    settings = postgres_settings(home, schema)
    connect = {"host": settings.pg_host, "port": settings.pg_port, "user": settings.pg_user,
               "password": settings.pg_password.get_secret_value(), "dbname": settings.pg_dbname}
    return PostgresKeyStore(connect, settings.pg_schema, home / "keys.kek"), settings.pg_schema


def _rows(store: PostgresKeyStore) -> dict[str, bytes]:
    return {r[0]: bytes(r[1]) for r in store._db.execute(f"SELECT key_id, key FROM {store._keys}")}  # noqa: SLF001


def _key(n: int, owner: str) -> ContentKey:
    return ContentKey(f"{T}/entity/memory:{n}", frozenset((owner,)))


def test_no_data_key_is_stored_in_plaintext_and_a_forget_rotates_the_wrapping_key(tmp_path):
    store, schema = _open(tmp_path)
    keys = store.keys_for([_key(n, "person:x" if n < 3 else "person:y") for n in range(10)])
    rows = _rows(store)
    assert len(rows) == 10 and all(is_wrapped(stored) for stored in rows.values())
    assert not any(key in stored for key in keys.values() for stored in rows.values())
    old_kek = KekFile(tmp_path / "keys.kek").read()
    assert old_kek is not None and os.stat(tmp_path / "keys.kek").st_mode & 0o777 == 0o600

    assert store.forget(T, "person:x") == 3
    new_kek = KekFile(tmp_path / "keys.kek").read()
    assert new_kek is not None and new_kek.kek_id != old_kek.kek_id
    assert old_kek.key not in (tmp_path / "keys.kek").read_bytes()
    assert old_kek.key.hex().encode() not in (tmp_path / "keys.kek").read_bytes()
    assert not (tmp_path / "keys.kek.next").exists()
    after = _rows(store)
    assert len(after) == 7 and all(after[k] != rows[k] for k in after)  # every remaining key re-wrapped
    store.close()

    again, _ = _open(tmp_path, schema)  # a fresh process reads the remaining keys, not the forgotten ones
    for n in range(10):
        assert again.get(f"{T}/entity/memory:{n}") == (None if n < 3 else keys[f"{T}/entity/memory:{n}"])
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


def test_a_store_from_before_wrapping_is_wrapped_when_opened(tmp_path):
    store, schema = _open(tmp_path)
    store.close()
    plain = os.urandom(32)
    settings = postgres_settings(tmp_path, schema)
    with psycopg.connect(host=settings.pg_host, port=settings.pg_port, user=settings.pg_user,
                         password=settings.pg_password.get_secret_value(), dbname=settings.pg_dbname,
                         autocommit=True) as conn:
        conn.execute(f'INSERT INTO "{schema}".noumena_data_keys VALUES (%s, %s)', (f"{T}/entity/person:old", plain))
    reopened, _ = _open(tmp_path, schema)
    stored = _rows(reopened)[f"{T}/entity/person:old"]
    assert is_wrapped(stored) and plain not in stored
    assert reopened.get(f"{T}/entity/person:old") == plain
    reopened.close()


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
