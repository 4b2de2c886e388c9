"""Snapshots of the folded state (infra/state_snapshots.py): a process that starts from a snapshot plus the log's
tail decides on exactly the state a full fold gives; snapshots are sealed, dropped by forgets, never stored after a
forget they predate, and ignored (with a warning, and a full fold) when old, corrupt or of another log."""

from __future__ import annotations

import json
import logging
import pickle
import random
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from domain import commands as c
from domain.application.forgetting import forget
from domain.application.ontology_service import OntologyService
from domain.errors import DomainError
from infra.bootstrap import Noumena, bootstrap
from infra.settings import Settings
from infra.state_snapshots import MAGIC
from tests.conftest import TickingClock, postgres_settings
from tests.projection_support import Workload
from tests.properties import examples

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
        workload.run(noumena.service, workload.next())


def _full_fold(noumena: Noumena, tenant: str):  # type: ignore[no-untyped-def]
    return OntologyService(noumena.log, clock=TickingClock()).ontology(tenant)


def _check_snapshot_plus_tail(tmp_path: Path, backend: str, seed: int, prefix: int, tail: int, forgets: float
                              ) -> None:
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
       forgets=st.sampled_from([0.0, 0.03, 0.1, 0.3]))
def test_state_from_a_snapshot_plus_the_tail_equals_the_state_folded_from_the_whole_log(tmp_path_factory, seed,
                                                                                        prefix, tail, forgets):
    _check_snapshot_plus_tail(tmp_path_factory.mktemp("snap"), "sqlite", seed, prefix, tail, forgets)


@pytest.mark.postgres
@hsettings(max_examples=examples(0.04), suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1), prefix=st.integers(0, 40), tail=st.integers(0, 30),
       forgets=st.sampled_from([0.0, 0.05]))
def test_on_postgresql_a_replica_starting_from_its_snapshot_folds_what_others_wrote_since(tmp_path_factory, seed,
                                                                                         prefix, tail, forgets):
    _check_snapshot_plus_tail(tmp_path_factory.mktemp("snap"), "postgres", seed, prefix, tail, forgets)


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
        loaded = noumena.service._snapshots.load(T)  # type: ignore[union-attr]  # noqa: SLF001
        state = noumena.service.ontology(T)
        assert state == _full_fold(noumena, T)
        return loaded is not None, state.version
    finally:
        noumena.close()


def test_a_stopped_process_leaves_a_sealed_snapshot_that_the_next_one_starts_from(snapshotted):
    path, settings = snapshotted
    data = path.read_bytes()
    assert data.startswith(MAGIC) and b"SNAPMARKER" not in data and b"said so" not in data
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    header = json.loads(data[len(MAGIC):data.index(b"\n", len(MAGIC))])
    assert header["version"] == 4 and header["key"] == f"{T}/state-snapshot"
    assert _starts_from_snapshot(settings) == (True, 4)


@pytest.mark.parametrize("damage", ["flipped byte", "truncated", "other format", "other code", "other log",
                                    "not a snapshot"])
def test_an_unusable_snapshot_is_ignored_with_a_warning_and_the_whole_log_is_folded(snapshotted, damage, caplog,
                                                                                     tmp_path):
    path, settings = snapshotted
    data = path.read_bytes()
    end = data.index(b"\n", len(MAGIC))
    header = json.loads(data[len(MAGIC):end])
    if damage == "flipped byte":
        data = data[:-10] + bytes([data[-10] ^ 1]) + data[-9:]
    elif damage == "truncated":
        data = data[: len(data) // 2]
    elif damage == "not a snapshot":
        data = b"hello"
    else:
        if damage == "other format":
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
        data = MAGIC + json.dumps(header, sort_keys=True).encode() + data[end:]
    path.write_bytes(data)
    with caplog.at_level(logging.WARNING, logger="infra.state_snapshots"):
        assert _starts_from_snapshot(settings)[0] is False
    assert any("ignored" in r.getMessage() for r in caplog.records), caplog.text


def test_a_forget_deletes_the_snapshot_key_so_no_copy_of_an_older_snapshot_opens_again(snapshotted, tmp_path):
    path, settings = snapshotted
    copy = tmp_path / "backup.snapshot"
    shutil.copy(path, copy)
    noumena = bootstrap(settings, clock=TickingClock())
    try:
        noumena.application.forget(T, "person:x")
        assert noumena.log.keys.get(f"{T}/state-snapshot") is None or not path.exists()  # type: ignore[union-attr]
        shutil.copy(copy, path)  # the old snapshot put back (from a backup, or another replica's home)
        assert noumena.service._snapshots.load(T) is None  # type: ignore[union-attr]  # noqa: SLF001
        assert noumena.service.ontology(T).entities["person:x"].label != "Xu SNAPMARKER"
    finally:
        noumena.close()
    assert _starts_from_snapshot(settings)[1] == 5


def test_a_snapshot_taken_before_another_process_forgets_is_never_stored(snapshotted, tmp_path):
    path, settings = snapshotted
    late = bootstrap(settings, clock=TickingClock())
    forgetting = bootstrap(settings.model_copy(update={"state_snapshot_every": 0}), clock=TickingClock())
    try:
        before = late.service.ontology(T)  # the state still holding person:x's name
        path.unlink()
        forgetting.application.forget(T, "person:x")
        late.service._snapshots.save(T, before)  # type: ignore[union-attr]  # noqa: SLF001
        late.service._snapshots.close()  # type: ignore[union-attr]  # noqa: SLF001
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
