"""Snapshots of the folded state (infra/adapters/state_snapshots.py): a process that starts from a snapshot plus the
log's tail decides on exactly the state a full fold gives; snapshots are sealed, dropped by forgets, never stored after
a forget they predate, and ignored (with a warning, and a full fold) when old, corrupt or of another log."""

from __future__ import annotations

import json
import logging
import os
import pickle
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from domain import commands as c
from domain.application.forgetting import forget
from domain.application.ontology_service import OntologyService
from domain.errors import DomainError
from domain.ontology import Ontology
from domain.ports import SnapshotDamaged
from infra.adapters.state_snapshots import BUCKET_BITS, LAZY, OLD_MAGIC, FileStateSnapshots
from infra.bootstrap import Noumena, bootstrap
from infra.settings import Settings
from tests.conftest import TickingClock, postgres_settings
from tests.projection_support import Workload
from tests.properties import examples
from tests.race_support import wait_until

T = "t1"


def _settings(home: Path, backend: str, every: int, schema_of: dict[str, Settings]) -> Settings:
    if backend == "postgres":
        base = schema_of.get("pg") or postgres_settings(home)
        schema_of["pg"] = base  # (one key-encryption key for every process of the store, as replicas share it)
        return base.model_copy(update={"home": home, "state_snapshot_every": every,
                                       "kek_file": home.parent / "shared.kek"})
    return Settings(home=home, event_store=backend, state_snapshot_every=every)  # type: ignore[arg-type]


def _process(home: Path, backend: str, every: int, schema_of: dict[str, Settings]) -> Noumena:
    return bootstrap(_settings(home, backend, every, schema_of), clock=TickingClock())


def _run(noumena: Noumena, workload: Workload, rng: random.Random, steps: int, forget_share: float) -> None:
    """Random commands, and now and then a forget of a fact, a person, a memory or a session (which the workload
    may register or start again: its new key gets a new name, `<id>~<n>`, so the old events keep reading
    `[forgotten]` in a fresh fold)."""
    for _ in range(steps):
        if rng.random() < forget_share:
            tenant = rng.choice(workload.tenants)
            facts = workload.fact_ids[tenant]
            others = ["person:a", "memory:m", "session:s0", "session:s1"]
            subject = rng.choice([*others, *(f"fact:{f}" for f in facts[-3:])])
            try:
                forget(noumena.service, noumena.log.keys, tenant, subject)  # type: ignore[arg-type]
            except DomainError:
                continue  # (nothing of it was written yet, or forgotten already)
            if not subject.startswith("fact:") and rng.random() < 0.5:  # and at once registered (started) again
                kind, _, name = subject.partition(":")
                workload.run(noumena.service, c.StartSession(tenant=tenant, session_id=name, agent="agent:z",
                                                             serving="person:a") if kind == "session" else
                             c.RegisterEntity(tenant=tenant, ref=subject, label=rng.choice(["A", "B", "C"])))
            continue
        if rng.random() < 0.2:  # messages (some sent again under the same event id), compactions, merges
            workload.run(noumena.service, _session_work(rng, rng.choice(workload.tenants)))
            continue
        workload.run(noumena.service, workload.next())


def _session_work(rng: random.Random, tenant: str) -> c.Command:
    session_id = f"s{rng.randint(0, 2)}"
    kind = rng.choice(["message", "message", "message", "compact", "merge"])
    if kind == "message":
        return c.AppendMessage(tenant=tenant, session_id=session_id, message_id=f"m{rng.randint(0, 6)}",
                               role=rng.choice(["user", "assistant"]), content=rng.choice(["hi", "tea?", "yes"]),
                               event_id=rng.choice([None, f"e{rng.randint(0, 9)}"]))
    if kind == "compact":
        return c.CompactSession(tenant=tenant, session_id=session_id, through_message_id=f"m{rng.randint(0, 6)}",
                                summary=rng.choice([None, "they talked"]))
    return c.MergeEntities(tenant=tenant, merged_ref="thing:x", into_ref="thing:y")


def _full_fold(noumena: Noumena, tenant: str):  # type: ignore[no-untyped-def]
    return OntologyService(noumena.log, clock=TickingClock()).ontology(tenant)


def _check_snapshot_plus_tail(tmp_path: Path, backend: str, seed: int, prefix: int, tail: int, forgets: float,
                              more: int) -> None:
    rng = random.Random(seed)
    schema_of: dict[str, Settings] = {}
    workload = Workload(rng)
    first = _process(tmp_path / "a", backend, 1, schema_of)  # snapshots after every write, and at its stop
    try:
        for command in workload.setup():
            first.service.execute(command)
        _run(first, workload, rng, prefix, forgets)
    finally:
        first.close()
    # another process in another home writes the tail, taking no snapshots (a replica, or a CLI process)
    writer = _process(tmp_path / "b", backend, 0, schema_of) if backend == "postgres" else \
        _process(tmp_path / "a", backend, 0, schema_of)
    try:
        _run(writer, workload, rng, tail, forgets)
    finally:
        writer.close()
    # a process that starts from the snapshot, reads records on demand, writes, and stores only its changes at its
    # stop (nothing here reads a whole map, which would bring every record into memory)
    changing = _process(tmp_path / "a", backend, 1, schema_of)
    try:
        _run(changing, workload, rng, more, forgets)
    finally:
        changing.close()
    restarted = _process(tmp_path / "a", backend, 1, schema_of)
    try:
        for tenant in workload.tenants:
            loaded = restarted.service.ontology(tenant)
            assert loaded == _full_fold(restarted, tenant)
        # and it decides the same as a process that folded everything: one more write agrees too
        command = workload.next()
        workload.run(restarted.service, command)
        for tenant in workload.tenants:
            assert restarted.service.ontology(tenant) == _full_fold(restarted, tenant)
    finally:
        restarted.close()


@hsettings(max_examples=examples(0.2), suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1), prefix=st.integers(0, 60), tail=st.integers(0, 40),
       forgets=st.sampled_from([0.0, 0.03, 0.1, 0.3]), more=st.integers(0, 30))
def test_state_from_a_snapshot_plus_the_tail_equals_the_state_folded_from_the_whole_log(tmp_path_factory, seed,
                                                                                        prefix, tail, forgets, more):
    _check_snapshot_plus_tail(tmp_path_factory.mktemp("snap"), "sqlite", seed, prefix, tail, forgets, more)


@pytest.mark.postgres
@hsettings(max_examples=examples(0.04), suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1), prefix=st.integers(0, 40), tail=st.integers(0, 30),
       forgets=st.sampled_from([0.0, 0.05]), more=st.integers(0, 20))
def test_on_postgresql_a_replica_starting_from_its_snapshot_folds_what_others_wrote_since(tmp_path_factory, seed,
                                                                                         prefix, tail, forgets, more):
    _check_snapshot_plus_tail(tmp_path_factory.mktemp("snap"), "postgres", seed, prefix, tail, forgets, more)


def _story(noumena: Noumena) -> None:
    run = noumena.service.execute
    run(c.CreateTenant(tenant=T))
    run(c.RegisterEntity(tenant=T, ref="person:x", label="Xu SNAPMARKER"))
    run(c.RegisterEntity(tenant=T, ref="thing:tea", label="tea"))
    run(c.AssertFact(tenant=T, subject="person:x", relation="likes", object="thing:tea", reason="said so",
                     scope="person:x"))


@pytest.fixture
def snapshotted(tmp_path: Path) -> tuple[Path, Settings]:
    settings = Settings(home=tmp_path / "home", event_store="sqlite", state_snapshot_every=1)
    noumena = bootstrap(settings, clock=TickingClock())
    _story(noumena)
    noumena.close()
    return settings.home / "state" / f"{T}.snapshot", settings


def _starts_from_snapshot(settings: Settings) -> tuple[bool, int]:
    """Whether a new process loads the snapshot (True) or folds the whole log, and the state's version."""
    noumena = bootstrap(settings.model_copy(update={"state_snapshot_every": 1}), clock=TickingClock())
    try:
        loaded = noumena.snapshots.load(T)
        state = noumena.service.ontology(T)
        assert state == _full_fold(noumena, T)
        return loaded is not None, state.version
    finally:
        noumena.close()


def _header(path: Path) -> dict:  # type: ignore[type-arg]
    with closing(sqlite3.connect(path)) as db:
        return json.loads(db.execute("SELECT value FROM meta WHERE name = 'header'").fetchone()[0])


def _flipped(value: bytes) -> bytes:
    return value[:-5] + bytes([value[-5] ^ 1]) + value[-4:]


def _edit(path: Path, *statements: tuple[str, tuple]) -> None:  # type: ignore[type-arg]
    with closing(sqlite3.connect(path)) as db:
        for sql, params in statements:
            db.execute(sql, params)
        db.commit()


def _records(path: Path, name: str) -> list[tuple[int, bytes]]:
    """(id, sealed value) of every bucket of the map `name`."""
    with closing(sqlite3.connect(path)) as db:
        return db.execute("SELECT id, value FROM records WHERE id >> ? = ?", (BUCKET_BITS, LAZY.index(name))
                          ).fetchall()


def _damage(path: Path, name: str) -> None:
    """Flip a byte in every bucket of the map `name`."""
    _edit(path, *[("UPDATE records SET value = ? WHERE id = ?", (_flipped(value), record_id))
                  for record_id, value in _records(path, name)])


def test_a_stopped_process_leaves_a_sealed_snapshot_that_the_next_one_starts_from(snapshotted):
    path, settings = snapshotted
    data = path.read_bytes()
    assert data.startswith(b"SQLite format 3\x00")
    for plain in (b"SNAPMARKER", b"said so", b"person:x", b"thing:tea", b"likes"):
        assert plain not in data  # (values sealed, keys stored as keyed digests)
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    header = _header(path)
    assert header["version"] == 4 and header["key"] == f"{T}/state-snapshot"
    assert _starts_from_snapshot(settings) == (True, 4)


@pytest.mark.parametrize("damage", ["flipped byte", "header edited", "truncated", "other format", "other code",
                                    "other log", "not a snapshot", "the former format"])
def test_an_unusable_snapshot_is_ignored_with_a_warning_and_the_whole_log_is_folded(snapshotted, damage, caplog,
                                                                                     tmp_path):
    path, settings = snapshotted
    header = _header(path)
    if damage == "flipped byte":  # in the sealed core (a damaged record is found when it is read: tests below)
        with closing(sqlite3.connect(path)) as db:
            core = db.execute("SELECT value FROM meta WHERE name = 'core'").fetchone()[0]
        _edit(path, ("UPDATE meta SET value = ? WHERE name = 'core'", (_flipped(core),)))
    elif damage == "truncated":
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])
    elif damage == "not a snapshot":
        path.write_bytes(b"hello")
    elif damage == "the former format":
        path.write_bytes(OLD_MAGIC + b'{"format": 1}\n' + bytes(100))
    else:
        if damage == "header edited":  # every check passes, but the core's seal covers the header
            header["lineage"] = "0" * 32
        elif damage == "other format":
            header["format"] = 0
        elif damage == "other code":
            header["code"] = "0" * 32
        else:  # the same tenant and version in another log: the event at that version differs
            other = bootstrap(Settings(home=tmp_path / "other", event_store="sqlite"), clock=TickingClock())
            _story(other)
            other.service.execute(c.RegisterEntity(tenant=T, ref="thing:other", label="other"))
            other.close()
            shutil.copy(tmp_path / "other" / "events.sqlite", settings.home / "events.sqlite")
            shutil.copy(tmp_path / "other" / "keys.sqlite", settings.home / "keys.sqlite")
        _edit(path, ("UPDATE meta SET value = ? WHERE name = 'header'", (json.dumps(header, sort_keys=True),)))
    with caplog.at_level(logging.WARNING, logger="infra.adapters.state_snapshots"):
        assert _starts_from_snapshot(settings)[0] is False
    assert any("ignored" in r.getMessage() for r in caplog.records), caplog.text


def test_a_damaged_record_found_by_a_write_makes_it_fold_the_whole_log_and_succeed(snapshotted):
    path, settings = snapshotted
    _damage(path, "facts")
    noumena = bootstrap(settings, clock=TickingClock())
    try:
        # the same fact again: a corroboration, which reads the fact's record
        outcome = noumena.service.execute(c.AssertFact(tenant=T, subject="person:x", relation="likes",
                                                       object="thing:tea", reason="said so", scope="person:x"))
        assert [type(e).__name__ for e in outcome.events] == ["FactCorroborated"]
        state = noumena.service.ontology(T)
        assert FileStateSnapshots.reads(state) is None  # (folded from the log)
        assert state == _full_fold(noumena, T)
    finally:
        noumena.close()
    assert _starts_from_snapshot(settings) == (True, 5)  # (and the stop stored a good one)


def test_a_damaged_record_found_by_a_reader_fails_that_read_and_the_next_use_folds_the_whole_log(snapshotted):
    path, settings = snapshotted
    _damage(path, "entities")
    noumena = bootstrap(settings, clock=TickingClock())
    try:
        with pytest.raises(SnapshotDamaged, match="entities"):
            _ = noumena.service.ontology(T).entities["person:x"]
        state = noumena.service.ontology(T)
        assert state.entities["person:x"].label == "Xu SNAPMARKER"
        assert FileStateSnapshots.reads(state) is None
    finally:
        noumena.close()


def _home_with_facts(home: Path, n: int) -> tuple[Settings, list[str]]:
    """A tenant with `n` facts among 40 entities and a session with messages; its snapshot stored whole."""
    settings = Settings(home=home, event_store="sqlite", state_snapshot_every=0)
    noumena = bootstrap(settings, clock=TickingClock())
    refs = [f"thing:e{i}" for i in range(40)]
    try:
        run = noumena.service.execute_batch
        started = run([c.CreateTenant(tenant=T), *(c.RegisterEntity(tenant=T, ref=r, label=r)
                                                    for r in [*refs, "agent:z"]),
                       c.StartSession(tenant=T, session_id="s", agent="agent:z")])
        assert all(o.ok for o in started.outcomes)
        facts: list[str] = []
        for start in range(0, n, 100):
            result = run([c.AssertFact(tenant=T, subject=refs[i % 40], relation=f"r{i % 10}",
                                       object=refs[(i // 40) % 40], reason=f"because {i}")
                          for i in range(start, min(n, start + 100))])
            facts += [o.events[0].fact_id for o in result.outcomes]  # type: ignore[attr-defined]
            noumena.service.execute(c.AppendMessage(tenant=T, session_id="s", message_id=f"m{start}", role="user",
                                                    content="hi", event_id=f"e{start}"))
    finally:
        noumena.close()
    settings = settings.model_copy(update={"state_snapshot_every": 1})
    folding = bootstrap(settings, clock=TickingClock())
    folding.service.ontology(T)
    folding.close()
    return settings, facts


def test_the_first_writes_after_a_restart_read_a_bucket_per_key_looked_up_whatever_the_size_of_the_state(tmp_path):
    reads = {}
    for n in (100, 800):
        settings, facts = _home_with_facts(tmp_path / f"home-{n}", n)
        noumena = bootstrap(settings, clock=TickingClock())
        try:
            writes = [
                c.AssertFact(tenant=T, subject="thing:e1", relation="restarted", object="thing:e2", reason="new"),
                c.AssertFact(tenant=T, subject="thing:e0", relation="r0", object="thing:e0", reason="again"),
                c.AppendMessage(tenant=T, session_id="s", message_id="after", role="user", content="back",
                                event_id="e-after"),
                c.AppendMessage(tenant=T, session_id="s", message_id="m0", role="user", content="hi",
                                event_id="e0"),  # (sent again: seen already, a no-op)
                c.CorrectFact(tenant=T, fact_id=facts[1], reason="later", valid_to=datetime(2030, 1, 1, tzinfo=UTC)),
                c.InvalidateFact(tenant=T, fact_id=facts[2], reason="no longer"),
            ]
            for command in writes:
                noumena.service.execute(command)
            state = noumena.service.ontology(T)
            reads[n] = FileStateSnapshots.reads(state)
            assert not any(getattr(state, name).complete for name in LAZY)  # (no map was read whole)
            assert state == _full_fold(noumena, T)
        finally:
            noumena.close()
    # at most a bucket per key looked up (fewer where two share one), each of some 8 entries, at either size: at 800
    # facts a few percent of the state's ~2,500 entries
    assert all(buckets <= 20 and entries <= 12 * buckets for buckets, entries in reads.values()), reads
    assert reads[800][1] <= 120, reads


def test_a_restarted_process_stores_only_its_changes_and_the_next_one_starts_from_them(snapshotted):
    path, settings = snapshotted
    lineage = _header(path)["lineage"]
    for step in range(2):
        noumena = bootstrap(settings, clock=TickingClock())
        try:
            noumena.service.execute(c.AssertFact(tenant=T, subject="person:x", relation="likes",
                                                 object="thing:0", reason="said so", scope="org")
                                    if step else c.RegisterEntity(tenant=T, ref="thing:0", label="zero"))
        finally:
            noumena.close()
        assert noumena.snapshots.stored == [(T, 5 + step, "changes")]
        assert _header(path)["lineage"] == lineage
    assert _starts_from_snapshot(settings) == (True, 6)


def test_changes_are_not_written_over_a_snapshot_another_process_replaced_meanwhile(snapshotted):
    path, settings = snapshotted
    first = bootstrap(settings, clock=TickingClock())
    try:
        first.service.execute(c.RegisterEntity(tenant=T, ref="thing:a", label="a"))  # (loaded from the snapshot)
        path.unlink()
        second = bootstrap(settings, clock=TickingClock())  # folds the whole log, stores the snapshot whole
        second.service.execute(c.RegisterEntity(tenant=T, ref="thing:b", label="b"))
        second.close()
        stored = second.snapshots.stored
        assert stored[-1] == (T, 6, "whole") and {kind for _, _, kind in stored} == {"whole"}
        first.service.execute(c.RegisterEntity(tenant=T, ref="thing:c", label="c"))
    finally:
        first.close()
    assert first.snapshots.stored == []
    assert _header(path)["version"] == 6
    assert _starts_from_snapshot(settings) == (True, 7)


def test_readers_on_other_threads_while_a_restarted_process_writes_see_no_lost_or_revived_entries(snapshotted):
    _, settings = snapshotted
    noumena = bootstrap(settings, clock=TickingClock())
    stop = threading.Event()
    failures: list[BaseException] = []
    refs = [f"thing:r{i}" for i in range(12)]

    def read() -> None:
        try:
            while not stop.is_set():
                state = noumena.service.ontology(T)
                for ref in refs:
                    _ = ref in state.entities
                    state.current_by_key.get((ref, "likes", "thing:tea", "org"))
                    state.slots.get((ref, "likes", "org"))
        except BaseException as error:  # noqa: BLE001
            failures.append(error)

    readers = [threading.Thread(target=read) for _ in range(3)]
    try:
        for thread in readers:
            thread.start()
        rng = random.Random(5)
        service = noumena.service
        for ref in refs:
            service.execute(c.RegisterEntity(tenant=T, ref=ref, label=ref))
        facts: list[str] = []
        for _ in range(150):
            if facts and rng.random() < 0.3:
                try:
                    service.execute(c.InvalidateFact(tenant=T, fact_id=facts.pop(rng.randrange(len(facts))),
                                                     reason="no longer"))
                except DomainError:
                    pass
                continue
            outcome = service.execute(c.AssertFact(tenant=T, subject=rng.choice(refs), relation="likes",
                                                   object="thing:tea", reason="yes"))
            facts.append(outcome.events[0].fact_id)  # type: ignore[attr-defined]
    finally:
        stop.set()
        for thread in readers:
            thread.join()
    try:
        assert not failures, failures
        assert noumena.service.ontology(T) == _full_fold(noumena, T)
    finally:
        noumena.close()


def test_a_forget_deletes_the_snapshot_key_so_no_copy_of_an_older_snapshot_opens_again(snapshotted, tmp_path):
    path, settings = snapshotted
    copy = tmp_path / "backup.snapshot"
    shutil.copy(path, copy)
    noumena = bootstrap(settings, clock=TickingClock())
    try:
        noumena.application.forgetting.forget(T, "person:x")
        assert noumena.log.keys.get(f"{T}/state-snapshot") is None  # type: ignore[union-attr]
        assert not path.exists()  # (and this home's snapshot is deleted with it)
        shutil.copy(copy, path)  # the old snapshot put back (from a backup, or another replica's home)
        assert noumena.snapshots.load(T) is None
        assert noumena.service.ontology(T).entities["person:x"].label != "Xu SNAPMARKER"
    finally:
        noumena.close()
    assert _starts_from_snapshot(settings)[1] == 5


@pytest.mark.parametrize("state", ["loaded from the snapshot", "folded from the log"])
def test_a_snapshot_taken_before_another_process_forgets_is_never_stored(snapshotted, tmp_path, state):
    path, settings = snapshotted
    late = bootstrap(settings, clock=TickingClock())
    forgetting = bootstrap(settings.model_copy(update={"state_snapshot_every": 0}), clock=TickingClock())
    try:
        # the state still holding person:x's name
        before = late.service.ontology(T) if state == "loaded from the snapshot" else _full_fold(late, T)
        path.unlink()
        forgetting.application.forgetting.forget(T, "person:x")
        late.snapshots.save(T, before)
        late.snapshots.close()
        assert not path.exists()
    finally:
        forgetting.close()
        late.close()
    fresh = bootstrap(settings, clock=TickingClock())
    try:
        assert fresh.service.ontology(T).entities["person:x"].label != "Xu SNAPMARKER"
    finally:
        fresh.close()


def test_a_fact_state_pickles_to_an_equal_one_with_every_field():
    from dataclasses import fields
    from datetime import UTC, datetime

    from domain.facts import FactState, FactStatus
    from domain.values import Provenance

    at = datetime(2026, 1, 2, tzinfo=UTC)
    fact = FactState(fact_id="f", subject="person:a", relation="knows", object="person:b", scope="person:a",
                     reason="r", confidence=0.5, valid_from=at, valid_to=at, status=FactStatus.ARCHIVED,
                     asserted_at=at, provenance=[Provenance(actor="agent:z")], superseded_by="g", supersedes="h",
                     ended_reason="e", ranges=[(at, None)])
    assert len(fact.__reduce__()[1]) == len(fields(FactState))
    assert pickle.loads(pickle.dumps(fact)) == fact  # noqa: S301


def _snapshotters() -> list[str]:
    """The command lines of this process's children that are state snapshotters (`ps`)."""
    listed = subprocess.run(["ps", "-o", "pid=,args=", "--ppid", str(os.getpid())], capture_output=True, text=True,
                            check=False).stdout
    return [line.strip() for line in listed.splitlines() if "infra.runtime.state_snapshotter" in line]


def test_a_closed_process_leaves_no_snapshot_thread_or_snapshotter_process_running_and_takes_no_snapshot_after(
        tmp_path):
    """Each bootstrap may start the snapshotter (a process) and the threads that feed it and store snapshots in
    place; closing it ends them (a process that bootstraps again and again, as a test suite does, must not gather
    idle threads or processes), and a late write takes no snapshot."""
    names = ("noumena-snapshotter", "noumena-state-snapshot")

    def snapshot_threads() -> list[str]:
        return [t.name for t in threading.enumerate() if t.name.startswith(names)]

    before = snapshot_threads()
    noumena = bootstrap(Settings(home=tmp_path / "home", event_store="sqlite", state_snapshot_every=1),
                        clock=TickingClock())
    noumena.application.tenants.create_tenant(T)
    noumena.application.facts.register_entity(T, "person:x", "X")
    store = noumena.snapshots
    assert store.wait(60)
    pid = store.snapshotter.pid
    assert pid is not None and any(line.startswith(f"{pid} ") for line in _snapshotters())
    assert len(snapshot_threads()) > len(before)  # (the writes above asked for snapshots: the threads ran)
    assert store.stored and {kind for _, _, kind in store.stored} <= {"whole", "changes"}
    noumena.close()
    assert snapshot_threads() == before
    assert _snapshotters() == []
    stored = list(store.stored)
    store.request(T)  # (closed: nothing starts)
    noumena.service._ask_for_snapshot(noumena.service._states[T], 0)  # noqa: SLF001
    assert store.snapshotter.pid is None and _snapshotters() == []
    assert store.stored == stored


def _fold_up_to(noumena: Noumena, tenant: str, version: int) -> Ontology:
    state = Ontology(tenant=tenant)
    for event in list(noumena.log.read_stream(tenant))[:version]:
        state.apply(event)
    return state


def _check_snapshotter_races_writes(tmp_path: Path, backend: str, seed: int, steps: int, forgets: float) -> None:
    """A process writes a random workload (with forgets) while its snapshotter takes snapshots; every snapshot
    seen on disk meanwhile (copied as it appears) is the fold of the log up to its version, and so is the one a
    last request leaves at the log's end."""
    rng = random.Random(seed)
    schema_of: dict[str, Settings] = {}
    workload = Workload(rng)
    noumena = _process(tmp_path / "home", backend, 2, schema_of)  # (asked for at 2, 4, 8, 16, ... events)
    store = noumena.snapshots
    assert isinstance(store, FileStateSnapshots) and store.snapshotter is not None
    store.snapshotter.pause = 0.0  # (handed over at once, not when the writes pause: they race it)
    seen: dict[str, int] = {}
    copies = iter(range(10**9))
    checked = 0

    def check_new_snapshots() -> None:
        nonlocal checked
        for tenant in workload.tenants:
            path = store.path(tenant)
            copy = tmp_path / f"copy{next(copies)}" / "state"
            copy.mkdir(parents=True)
            for file in [path, *path.parent.glob(f"{path.name}.*.delta")]:  # (the snapshot, then its deltas)
                try:
                    shutil.copyfile(file, copy / file.name)
                except FileNotFoundError:  # (discarded, or a delta merged meanwhile: the copy loads less far)
                    continue
            reader = FileStateSnapshots(copy.parent, noumena.log, noumena.log.keys, 1)
            loaded = reader.load(tenant)
            reader.close()
            if loaded is None or seen.get(tenant) == loaded.version:
                continue
            seen[tenant] = loaded.version
            assert loaded == _fold_up_to(noumena, tenant, loaded.version)
            checked += 1

    try:
        for command in workload.setup():
            noumena.service.execute(command)
        assert store.wait(120)  # (the snapshotter runs: from here on its snapshots race the writes)
        for _ in range(steps):
            _run(noumena, workload, rng, 1, forgets)
            for tenant in workload.tenants:  # (asked for far more often than a process asks: more races)
                store.request(tenant)
            check_new_snapshots()
        assert store._pending == []  # (the writing process serialized no state: the snapshotter did)  # noqa: SLF001
        assert store.wait(120)  # (what was asked for while writing)
        for tenant in workload.tenants:  # a last request, answered: a snapshot at the log's end
            store.request(tenant)
        assert store.wait(120)
        for tenant in workload.tenants:
            end = noumena.service.ontology(tenant).version
            assert store.stored_version(tenant) == end, (tenant, end, store.stored)
        seen.clear()
        check_new_snapshots()
        assert checked >= len(workload.tenants)
    finally:
        noumena.close()


@hsettings(max_examples=examples(0.05), suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1), steps=st.integers(20, 120), forgets=st.sampled_from([0.0, 0.05, 0.2]))
def test_snapshots_the_snapshotter_process_takes_while_writes_race_it_are_the_fold_of_the_log_up_to_them(
        tmp_path_factory, seed, steps, forgets):
    _check_snapshotter_races_writes(tmp_path_factory.mktemp("snapper"), "sqlite", seed, steps, forgets)


@pytest.mark.postgres
@hsettings(max_examples=examples(0.04), suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1), steps=st.integers(20, 80), forgets=st.sampled_from([0.0, 0.1]))
def test_on_postgresql_the_snapshotter_process_takes_snapshots_equal_to_the_fold_while_writes_race_it(
        tmp_path_factory, seed, steps, forgets):
    _check_snapshotter_races_writes(tmp_path_factory.mktemp("snapper"), "postgres", seed, steps, forgets)


def test_a_killed_snapshotter_never_holds_writes_up_they_go_on_with_the_snapshot_on_disk(snapshotted, caplog):
    path, settings = snapshotted
    noumena = bootstrap(settings, clock=TickingClock())
    store = noumena.snapshots
    try:
        run = noumena.service.execute
        for i in range(4):  # (from version 4 to 8: the state doubled, a snapshot is asked for)
            run(c.RegisterEntity(tenant=T, ref=f"thing:k{i}", label=f"k{i}"))
        assert store.wait(60)
        pid = store.snapshotter.pid
        assert pid is not None and store.stored_version(T) == 8
        with caplog.at_level(logging.WARNING, logger="infra.runtime.state_snapshotter"):
            os.kill(pid, signal.SIGKILL)
            for _ in range(200):  # (the reader notices the exit)
                if store.snapshotter.pid is None and caplog.records:
                    break
                time.sleep(0.05)
            for i in range(4, 12):  # past the next doubling: asked for, with no snapshotter (not started again
                run(c.RegisterEntity(tenant=T, ref=f"thing:k{i}", label=f"k{i}"))  # within the minute)
            assert store.wait(60)
        assert any("exited with -9" in r.getMessage() and "writes go on" in r.getMessage()
                   for r in caplog.records), caplog.text
        assert store.stored_version(T) == 8  # (the older snapshot stays, and is used)
        assert noumena.service.ontology(T).version == 16
        assert _snapshotters() == []
    finally:
        noumena.close()
    assert _snapshotters() == []
    assert _starts_from_snapshot(settings) == (True, 16)  # (the stop snapshotted in place)


def test_a_stop_while_the_snapshotter_folds_leaves_no_process_no_temporary_file_and_a_snapshot_to_start_from(
        tmp_path):
    """A first start folds the whole log and asks for a snapshot; the snapshotter folds the log too. A stop
    meanwhile ends the snapshotter (a snapshot it is taking is not stored, its temporary file deleted) and
    snapshots in place."""
    settings = Settings(home=tmp_path / "home", event_store="sqlite", state_snapshot_every=0)
    writer = bootstrap(settings, clock=TickingClock())
    writer.service.execute(c.CreateTenant(tenant=T))
    for start in range(0, 3000, 500):
        writer.service.execute_batch([c.RegisterEntity(tenant=T, ref=f"thing:e{i}", label=f"e{i}")
                                      for i in range(start, start + 500)])
    writer.close()
    settings = settings.model_copy(update={"state_snapshot_every": 1000})
    noumena = bootstrap(settings, clock=TickingClock())
    store = noumena.snapshots
    noumena.service.ontology(T)  # (3,001 events folded: a snapshot asked for)
    for _ in range(200):
        if store.snapshotter.pid is not None:
            break
        time.sleep(0.01)
    assert store.snapshotter.pid is not None
    noumena.close()
    assert _snapshotters() == []
    assert [kind for _, _, kind in store.stored][-1:] == ["whole"]
    assert not list((settings.home / "state").glob(".*.tmp"))
    assert _starts_from_snapshot(settings) == (True, 3001)


def test_the_snapshotter_starts_when_the_writes_pause_or_at_the_latest_while_they_go_on(tmp_path):
    settings = Settings(home=tmp_path / "home", event_store="sqlite", state_snapshot_every=10**6)  # (asked by hand)
    noumena = bootstrap(settings, clock=TickingClock())
    store = noumena.snapshots
    assert store.snapshotter is not None
    store.snapshotter.pause, store.snapshotter.latest = 0.4, 1.5
    run = noumena.service.execute
    try:
        run(c.CreateTenant(tenant=T))
        asked = time.monotonic()
        store.request(T)
        n = 0
        while not store.stored and time.monotonic() - asked < 20:  # writes with no pause
            run(c.RegisterEntity(tenant=T, ref=f"thing:w{n}", label="w"))
            n += 1
        waited = time.monotonic() - asked
        assert store.stored and 1.5 <= waited < 20, (waited, store.stored)  # (not before `latest`)
        first = len(store.stored)
        store.request(T)
        asked = time.monotonic()
        assert store.wait(20)  # the writes stopped: it starts after the pause
        assert len(store.stored) == first + 1 and 0.4 <= time.monotonic() - asked
        assert store.stored[-1][1] == noumena.service.ontology(T).version
    finally:
        noumena.close()


# ---------------------------------------------------------------------- delta files


def _deltas(settings: Settings) -> list[Path]:
    return sorted((settings.home / "state").glob(f"{T}.snapshot.*.delta"))


def test_a_restart_stores_its_changes_as_a_small_delta_and_leaves_the_snapshot_as_it_was(snapshotted):
    path, settings = snapshotted
    before = path.read_bytes()
    noumena = bootstrap(settings.model_copy(update={"state_snapshot_every": 1}), clock=TickingClock())
    try:
        noumena.service.execute(c.RegisterEntity(tenant=T, ref="thing:d", label="delta SNAPMARKER"))
    finally:
        noumena.close()
    assert path.read_bytes() == before  # (not copied, not rewritten)
    [delta] = _deltas(settings)
    assert delta.name == f"{T}.snapshot.4-5.delta" and oct(delta.stat().st_mode & 0o777) == "0o600"
    assert b"SNAPMARKER" not in delta.read_bytes() and delta.stat().st_size < path.stat().st_size * 2
    assert _header(delta) | {"after": 4} == _header(delta) and _header(delta)["lineage"] == _header(path)["lineage"]
    assert _starts_from_snapshot(settings) == (True, 5)


def _loaded_version(settings: Settings) -> int | None:
    """The version a fresh store loads the tenant's state at (None: no usable snapshot), checked against the fold
    of the log up to it."""
    noumena = bootstrap(settings.model_copy(update={"state_snapshot_every": 0}), clock=TickingClock())
    try:
        store = FileStateSnapshots(settings.home, noumena.log, noumena.log.keys, 1)
        loaded = store.load(T)
        store.close()
        if loaded is None:
            return None
        assert loaded == _fold_up_to(noumena, T, loaded.version)
        return loaded.version
    finally:
        noumena.close()


def _write_and_stop(settings: Settings, *refs: str) -> None:
    noumena = bootstrap(settings, clock=TickingClock())
    try:
        for ref in refs:
            noumena.service.execute(c.RegisterEntity(tenant=T, ref=ref, label=ref))
    finally:
        noumena.close()


def _rewrite_header(path: Path, **changes: object) -> None:
    _edit(path, ("UPDATE meta SET value = ? WHERE name = 'header'",
                 (json.dumps(_header(path) | changes, sort_keys=True),)))


@contextmanager
def _store(settings: Settings) -> Iterator[FileStateSnapshots]:
    """A snapshot store on the home's log, with no snapshotter (what the snapshotter process runs)."""
    noumena = bootstrap(settings.model_copy(update={"state_snapshot_every": 0}), clock=TickingClock())
    store = FileStateSnapshots(settings.home, noumena.log, noumena.log.keys, 1)
    try:
        yield store
    finally:
        store.close()
        noumena.close()


def _merge(settings: Settings) -> None:
    """The snapshotter's next fold merges the deltas into the snapshot (as it does once they grow)."""
    import infra.adapters.state_snapshots as module

    with pytest.MonkeyPatch.context() as patch, _store(settings) as store:
        patch.setattr(module, "MERGE_AFTER", 1)
        assert store.take_from_log(T) is not None and store.stored[-1][2] == "merged"


@pytest.mark.parametrize("damage", ["torn", "flipped byte", "its list of records edited", "of another lineage",
                                    "header and name disagree", "older than the snapshot", "after a gap"])
def test_a_delta_that_does_not_fit_is_skipped_and_the_state_is_the_fold_of_the_log(snapshotted, damage, caplog):
    path, settings = snapshotted
    quiet = settings.model_copy(update={"state_snapshot_every": 0})  # (writes that take no snapshot)
    _write_and_stop(settings, "thing:a")
    [delta] = _deltas(settings)
    assert delta.name == f"{T}.snapshot.4-5.delta"
    if damage == "torn":
        data = delta.read_bytes()
        delta.write_bytes(data[: len(data) - 700])
    elif damage == "flipped byte":  # in the delta's sealed core
        with closing(sqlite3.connect(delta)) as db:
            core = db.execute("SELECT value FROM meta WHERE name = 'core'").fetchone()[0]
        _edit(delta, ("UPDATE meta SET value = ? WHERE name = 'core'", (_flipped(core),)))
    elif damage == "its list of records edited":  # (sealed with its header: a record left out would read stale)
        with closing(sqlite3.connect(delta)) as db:
            ids = db.execute("SELECT value FROM meta WHERE name = 'ids'").fetchone()[0]
        _edit(delta, ("UPDATE meta SET value = ? WHERE name = 'ids'", (_flipped(ids),)))
    elif damage == "of another lineage":  # a delta kept from before the snapshot was written whole again
        kept = delta.read_bytes()
        path.unlink()
        delta.unlink()
        assert _starts_from_snapshot(settings) == (False, 5)  # (folds the whole log, stores it whole at its stop)
        assert _header(path)["version"] == 5
        _write_and_stop(quiet, "thing:b")
        delta = delta.with_name(f"{T}.snapshot.5-6.delta")
        delta.write_bytes(kept)
        _rewrite_header(delta, after=5, version=6)
    elif damage == "header and name disagree":
        delta.rename(delta.with_name(f"{T}.snapshot.3-5.delta"))
    elif damage == "older than the snapshot":  # a delta merged into the snapshot, then put back (from a backup)
        kept = delta.read_bytes()
        _write_and_stop(quiet, "thing:b")
        _merge(settings)
        assert not _deltas(settings) and _header(path)["version"] == 6
        delta.write_bytes(kept)
    else:  # "after a gap": a delta of a state loaded at a version no chain from the snapshot reaches
        gap = delta.with_name(f"{T}.snapshot.5-7.delta")
        delta.rename(gap)
        _rewrite_header(gap, after=5, version=7)
        _write_and_stop(quiet, "thing:b", "thing:c")
    with caplog.at_level(logging.WARNING, logger="infra.adapters.state_snapshots"):
        version = _loaded_version(settings)
    assert version == {"of another lineage": 5, "older than the snapshot": 6}.get(damage, 4)
    if damage in ("torn", "flipped byte", "its list of records edited", "of another lineage",
                  "header and name disagree"):
        assert any("delta" in r.getMessage() and "ignored" in r.getMessage() for r in caplog.records), caplog.text
    assert _starts_from_snapshot(settings)[0] is True  # (a process starting there decides on the fold)


def test_a_process_killed_while_it_writes_a_delta_leaves_the_snapshot_and_earlier_deltas_in_use(snapshotted):
    path, settings = snapshotted
    _write_and_stop(settings, "thing:a")
    code = ("import os, signal, sys\n"
            "import infra.adapters.state_snapshots as s\n"
            "from domain import commands as c\n"
            "from infra.bootstrap import bootstrap\n"
            "from infra.settings import Settings\n"
            "def killed(*_):\n"
            "    os.kill(os.getpid(), signal.SIGKILL)\n"
            "s.os.replace = killed  # (the delta is written and fsynced: the process dies before it is in place)\n"
            f"n = bootstrap(Settings(home={str(settings.home)!r}, event_store='sqlite', state_snapshot_every=1))\n"
            "n.service._snapshots._snapshotter = None  # (the stop snapshots in place)\n"
            f"n.service.execute(c.RegisterEntity(tenant={T!r}, ref='thing:b', label='b'))\n"
            "n.close()\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[2], capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == -9, done.stderr
    assert [d.name for d in _deltas(settings)] == [f"{T}.snapshot.4-5.delta"]
    assert list((settings.home / "state").glob(".*.delta.*.tmp"))  # (left by the killed process)
    assert _loaded_version(settings) == 5
    assert _starts_from_snapshot(settings) == (True, 6)  # (the next process folds the tail, and stores its own)
    assert not list((settings.home / "state").glob(".*.tmp"))  # (the dead process's temporary file is deleted)


_CHAIN_STEPS = st.lists(st.tuples(st.sampled_from(["write", "process", "snapshotter", "kept", "merge", "lose",
                                                   "tear", "restore"]), st.integers(1, 12)), min_size=1, max_size=12)


@hsettings(max_examples=examples(0.1), suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(steps=_CHAIN_STEPS)
def test_whatever_deltas_are_written_merged_lost_torn_or_put_back_a_load_is_the_fold_of_the_log_up_to_it(
        tmp_path_factory, steps):
    """Writers, processes that start from the snapshot and store their changes as deltas, the snapshotter's folds
    (some merging; `kept`: one snapshotter that keeps its state from one step to the next), deltas lost, torn or
    put back from earlier: after each step, a state loaded from the files is the fold of the log up to its
    version, and one caught up from it is the fold of the whole log."""
    import infra.adapters.state_snapshots as module

    home = tmp_path_factory.mktemp("chain") / "home"
    settings = Settings(home=home, event_store="sqlite", state_snapshot_every=0)
    noumena = bootstrap(settings, clock=TickingClock())
    rng = random.Random(len(steps))
    kept: dict[str, bytes] = {}
    written = [0]

    def write(n: int) -> None:
        for _ in range(n):
            k = written[0] = written[0] + 1
            try:
                noumena.service.execute(c.RegisterEntity(tenant=T, ref=f"thing:{rng.randrange(30)}", label=f"l{k}")
                                        if rng.random() < 0.4 else
                                        c.AssertFact(tenant=T, subject=f"thing:{rng.randrange(30)}",
                                                     relation="likes", object=f"thing:{rng.randrange(30)}",
                                                     reason=f"r{k}"))
            except DomainError:
                continue  # (an entity not registered yet)

    def store() -> FileStateSnapshots:
        return FileStateSnapshots(home, noumena.log, noumena.log.keys, 1)

    kept_store = store()
    try:
        noumena.service.execute(c.CreateTenant(tenant=T))
        noumena.service.execute_batch([c.RegisterEntity(tenant=T, ref=f"thing:{i}", label="new") for i in range(30)])
        write(3)
        for name, n in steps:
            deltas = sorted((home / "state").glob(f"{T}.snapshot.*.delta"))
            kept.update({d.name: d.read_bytes() for d in deltas if d.exists()})
            if name == "write":
                write(n)
            elif name == "process":  # starts from the files, writes, stores its changes (as a stop does)
                files = store()
                service = OntologyService(noumena.log, clock=TickingClock(), seal_content=True, snapshots=files)
                written[0] += 1
                service.execute(c.RegisterEntity(tenant=T, ref=f"thing:p{written[0]}", label=f"p{n}"))
                service.execute(c.AssertFact(tenant=T, subject=f"thing:p{written[0]}", relation="likes",
                                             object=f"thing:{rng.randrange(30)}", reason=f"p{written[0]}"))
                state = service.ontology(T)
                files._store_now(T, state.version, *files._serialized(state))  # noqa: SLF001
                files.close()
            elif name == "kept":
                kept_store.take_from_log(T)
            elif name in ("snapshotter", "merge"):
                with pytest.MonkeyPatch.context() as patch:
                    if name == "merge":
                        patch.setattr(module, "MERGE_AFTER", 1)
                    files = store()
                    files.take_from_log(T)
                    files.close()
            elif deltas and name == "lose":
                rng.choice(deltas).unlink(missing_ok=True)
            elif deltas and name == "tear":
                torn = rng.choice(deltas)
                torn.write_bytes(torn.read_bytes()[: n * 100])
            elif kept and name == "restore":
                restored = rng.choice(sorted(kept))
                (home / "state" / restored).write_bytes(kept[restored])
            files = store()
            loaded = files.load(T)
            files.close()
            if loaded is not None:
                fold = _fold_up_to(noumena, T, loaded.version)
                for field in LAZY:  # key by key first (each bucket read on demand), then whole
                    held, expected = getattr(loaded, field), getattr(fold, field)
                    if isinstance(expected, set):
                        assert all(item in held for item in expected), (name, field)
                    else:
                        assert all(held.get(key) == value for key, value in expected.items()), (name, field)
                assert loaded == fold, (name, loaded.version)
            files = store()
            caught_up = OntologyService(noumena.log, clock=TickingClock(), seal_content=True, snapshots=files)
            assert caught_up.ontology(T) == _full_fold(noumena, T), name
            files.close()
    finally:
        kept_store.close()
        noumena.close()


def test_a_snapshotter_whose_writing_process_died_ends_even_while_it_takes_a_snapshot(tmp_path):
    """A writing process starts the snapshotter and is killed while the snapshotter is busy (a sleep stands for a
    long fold: it reads no stdin meanwhile, so the closed pipe tells it nothing); the snapshotter notices that its
    parent changed and stops as a stop does (SIGTERM, its handler)."""
    started = tmp_path / "started"
    snapshotter = ("import os, signal, sys, threading, time\n"
                   "from infra.runtime import state_snapshotter as s\n"
                   "signal.signal(signal.SIGTERM, s._stop)\n"
                   "threading.Thread(target=s._end_with_the_writer, args=(os.getppid(),), daemon=True).start()\n"
                   f"open({str(started)!r}, 'w').write(str(os.getpid()))\n"
                   "time.sleep(120)\n")
    writer = ("import subprocess, sys, time\n"
              f"subprocess.Popen([sys.executable, '-c', {snapshotter!r}], stdin=subprocess.PIPE)\n"
              "time.sleep(120)\n")
    parent = subprocess.Popen([sys.executable, "-c", writer], cwd=Path(__file__).resolve().parents[2])
    try:
        wait_until(lambda: started.exists() and started.read_text() != "", 30, "the snapshotter starts")
        pid = int(started.read_text())
        assert _alive(pid)
        parent.kill()
        parent.wait()
        wait_until(lambda: not _alive(pid), 10, "the orphaned snapshotter ends")
    finally:
        parent.kill()


def _alive(pid: int) -> bool:
    """Whether the process runs (a zombie no one has reaped yet has ended)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in status
