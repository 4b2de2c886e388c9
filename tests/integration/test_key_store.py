"""Key stores: a key written once is the key every writer gets, owners only grow, forgetting deletes for real.

Writers insert keys they have not seen without reading first (a new fact's key is almost always new); these
tests hold them to the cases where the key is there already: written by another process, or by a batch whose
events were never committed.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from domain.forgetting import ContentKey, ForgetPlan
from infra.adapters.keys.postgres import PostgresKeyStore
from infra.adapters.keys.sqlite import SQLiteKeyStore
from tests.conftest import postgres_settings


def _stores(backend: str, tmp_path: Path):  # type: ignore[no-untyped-def]
    """Two independent stores (as two processes) on the same keys."""
    if backend == "sqlite":
        return SQLiteKeyStore(tmp_path / "keys.sqlite"), SQLiteKeyStore(tmp_path / "keys.sqlite")
    settings = postgres_settings(tmp_path)
    connect = {"host": settings.pg_host, "port": settings.pg_port, "user": settings.pg_user,
               "password": settings.pg_password.get_secret_value(), "dbname": settings.pg_dbname}
    return PostgresKeyStore(connect, settings.pg_schema), PostgresKeyStore(connect, settings.pg_schema)


def _key(key_id: str, *owners: str) -> ContentKey:
    return ContentKey(key_id, frozenset(owners))


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_key_another_writer_stored_is_the_key_returned_and_gains_owners(backend, tmp_path):
    first, second = _stores(backend, tmp_path)
    stored = first.keys_for([_key("t/fact/f1", "fact:f1", "person:li")])["t/fact/f1"]
    # the second writer has never seen the key: it tries it as new, finds it stored, and keeps it
    got = second.keys_for([_key("t/fact/f1", "fact:f1", "person:wang"), _key("t/fact/f2", "fact:f2")])
    assert got["t/fact/f1"] == stored
    assert len(got["t/fact/f2"]) == 32 and got["t/fact/f2"] != stored
    assert first.get("t/fact/f2") == got["t/fact/f2"]  # committed before keys_for returned
    assert second.forget("t", "person:wang") == 1  # the owner it added was recorded
    first.evict_cache()  # (another process forgot: it learns so from `subject.forgotten` in the log)
    assert first.get("t/fact/f1") is None and first.get("t/fact/f2") == got["t/fact/f2"]
    first.close()
    second.close()


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_keys_written_by_a_batch_that_never_committed_its_events_are_reused(backend, tmp_path):
    first, second = _stores(backend, tmp_path)
    # a batch got its keys and then failed before its events were written (crash, conflict, rejection)
    keys = first.keys_for([_key(f"t/fact/f{i}", f"fact:f{i}") for i in range(5)])
    first.close()
    # the same batch again, in a fresh process, with more keys beside it
    again = second.keys_for([_key(f"t/fact/f{i}", f"fact:f{i}") for i in range(8)])
    assert all(again[key_id] == key for key_id, key in keys.items())
    assert len(set(again.values())) == 8
    assert second.forget("t", "fact:f3") == 1
    assert second.get("t/fact/f3") is None and second.get("t/fact/f4") == keys["t/fact/f4"]
    second.close()


def test_a_key_store_file_from_before_the_rowid_layout_keeps_working(tmp_path):
    path = tmp_path / "keys.sqlite"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE data_keys (key_id TEXT PRIMARY KEY, key BLOB NOT NULL, owners TEXT NOT NULL) "
               "WITHOUT ROWID")
    db.execute("INSERT INTO data_keys VALUES ('t/entity/person:li', ?, ' person:li ')", (b"k" * 32,))
    db.commit()
    db.close()
    store = SQLiteKeyStore(path)
    got = store.keys_for([_key("t/entity/person:li", "person:li"), _key("t/fact/f1", "fact:f1", "person:li")])
    assert got["t/entity/person:li"] == b"k" * 32
    assert store.forget("t", "person:li") == 2
    assert b"k" * 32 not in path.read_bytes() + _wal(path)
    assert got["t/fact/f1"] not in path.read_bytes() + _wal(path)
    store.close()


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_key_id_forgotten_before_gets_its_next_key_under_a_new_name_in_every_process(backend, tmp_path):
    first, second = _stores(backend, tmp_path)
    names, keys = [], []
    for life in range(3):
        # each life in turn from one of the two stores (as two processes); the other has its old key cached
        store = (first, second)[life % 2]
        sealings, ready = store.keys_pending([_key("t/entity/person:li", "person:li")])
        ready()()
        name, key = sealings["t/entity/person:li"]
        names.append(name)
        keys.append(key)
        assert (first.get(name), second.get(name)) == (key, key)
        assert all(first.get(old) is None and second.get(old) is None for old in names[:-1])
        plan = ForgetPlan(also=("t/entity/person:li",)) if life == 1 else None  # (by id: every name it had)
        assert store.forget("t", "nobody" if plan else "person:li", (lambda p=plan: p) if plan else None) == 1
        first.evict_cache()
        second.evict_cache()
    assert names[0] == "t/entity/person:li" and len(set(names)) == 3 and len(set(keys)) == 3
    assert all(first.get(name) is None for name in names)
    first.close()
    second.close()


def test_a_key_store_file_from_before_forgets_were_counted_never_names_a_new_key_as_a_forgotten_one(tmp_path):
    path = tmp_path / "keys.sqlite"
    db = sqlite3.connect(path)  # (the layout before `key_lives`: one forget ran, its key ids are not known)
    db.execute("CREATE TABLE data_keys (key_id TEXT PRIMARY KEY, key BLOB NOT NULL, owners TEXT NOT NULL) "
               "WITHOUT ROWID")
    db.execute("INSERT INTO data_keys VALUES ('t/entity/person:wang', ?, ' person:wang ')", (b"w" * 32,))
    db.execute("PRAGMA user_version = 1")
    db.commit()
    db.close()
    store = SQLiteKeyStore(path)
    sealings, ready = store.keys_pending([_key("t/entity/person:wang", "person:wang"),
                                          _key("t/entity/person:li", "person:li")])
    ready()()
    assert sealings["t/entity/person:wang"] == ("t/entity/person:wang", b"w" * 32)  # stored: kept as it is
    # person:li may have been the one forgotten: its events would name `t/entity/person:li`
    assert sealings["t/entity/person:li"][0] == "t/entity/person:li~1"
    assert store.get("t/entity/person:li") is None
    assert store.forget("t", "nobody", lambda: ForgetPlan(also=("t/entity/person:li",))) == 1
    assert store.keys_for([_key("t/entity/person:li", "person:li")])["t/entity/person:li"] == \
        store.get("t/entity/person:li~2")
    store.close()
    reopened = SQLiteKeyStore(path)
    assert reopened.get("t/entity/person:wang") == b"w" * 32 and reopened.get("t/entity/person:li~1") is None
    reopened.close()


def _wal(path: Path) -> bytes:
    wal = path.with_name(path.name + "-wal")
    return wal.read_bytes() if wal.exists() else b""


def test_the_mapper_returns_sealed_events_only_once_their_keys_are_committed(tmp_path):
    from datetime import UTC, datetime

    from domain.facts import FactAsserted
    from domain.ports import Pending
    from domain.values import Provenance
    from infra.adapters.mapper import EventMapper

    store = SQLiteKeyStore(tmp_path / "keys.sqlite")
    mapper = EventMapper(store)
    pending = []
    for i in range(300):
        event = FactAsserted(tenant="t", recorded_at=datetime(2026, 10, 1, tzinfo=UTC), fact_id=f"f{i}",
                             subject="person:li", relation="knows", object=f"person:p{i}", scope="org",
                             reason=f"said so {i}", confidence=0.8, provenance=Provenance())
        pending.append(Pending("t", i + 1, event, _key(f"t/fact/f{i}", f"fact:f{i}", "person:li")))
    stored = mapper.to_stored_batch(pending)
    # the keys' commit runs beside the sealing; by the time the events exist, another connection sees every key
    other = sqlite3.connect(tmp_path / "keys.sqlite")
    on_disk = dict(other.execute("SELECT key_id, key FROM data_keys"))
    other.close()
    assert len(on_disk) == 300
    assert all(b"said so" not in s.state for s in stored)
    assert [mapper.to_event(s.topic, s.state).reason for s in stored] == [f"said so {i}" for i in range(300)]
    store.close()


def test_events_are_not_committed_when_their_keys_could_not_be(tmp_path):
    from eventsourcing.persistence import StoredEvent

    from infra.adapters.eventlog import EventsourcingLog, SQLiteLogRecorder
    from infra.settings import Settings

    log = EventsourcingLog(Settings(home=tmp_path, event_store="sqlite").event_store_env())
    assert isinstance(log.recorder, SQLiteLogRecorder)
    rows = [StoredEvent(originator_id="tenant:t", originator_version=v, topic="x.v1", state=b"{}") for v in (1, 2)]

    def keys_not_stored() -> None:
        raise OSError("disk full")

    with pytest.raises(OSError):
        log.recorder.insert_events(rows, before_commit=keys_not_stored)
    assert log.max_position() == 0
    assert log.recorder.insert_events(rows, before_commit=lambda: None) == [1, 2]
    log.close()


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_the_key_cache_starts_over_past_its_limit_and_every_key_stays_the_same(backend, tmp_path, monkeypatch):
    import infra.adapters.keys.cache

    monkeypatch.setattr(infra.adapters.keys.cache, "CACHE_LIMIT", 50)
    store, _other = _stores(backend, tmp_path)
    first = store.keys_for([_key(f"t/fact/f{i}", f"fact:f{i}") for i in range(40)])
    generation = store.generation
    second = store.keys_for([_key(f"t/fact/f{i}", f"fact:f{i}", "person:li") for i in range(30, 80)])
    assert store.cached_keys <= 90 and store.generation == generation  # 40 + 50 new: not over yet
    third = store.keys_for([_key(f"t/fact/f{i}", f"fact:f{i}", "person:li") for i in range(0, 80, 3)])
    assert store.generation > generation and store.cached_keys <= 50  # started over
    assert all(third[k] == {**first, **second}[k] for k in third)  # read back, never made anew
    assert store.forget("t", "person:li") == 50 + sum(1 for i in range(0, 30, 3))  # owners kept across the restart
