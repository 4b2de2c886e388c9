"""Forgetting is exact although a fact's key is derived from its group's key (the facts with the same other
owners): hypothesis plays random assertions, corroborations and forgets (of facts, people, sessions and
memories) on a real event log and key store, and every content field in the log must read `[forgotten]`
exactly when one of its owners was forgotten after it was written. On the SQLite file (derived keys), and on
PostgreSQL and in memory (one key per fact), which must agree."""

from __future__ import annotations

import sqlite3
import tempfile
from contextlib import closing
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from domain import commands as c
from domain.entities import EntityRegistered
from domain.facts import FactAsserted, FactCorroborated
from domain.forgetting import FORGOTTEN, SubjectForgotten
from infra.adapters.keys.sqlite import SQLiteKeyStore
from infra.bootstrap import bootstrap
from infra.settings import Settings
from tests.conftest import TickingClock, postgres_settings
from tests.properties import examples
from tests.race_support import wait_until

T = "acme"
PEOPLE = ["person:p0", "person:p1", "person:p2"]
MEMORIES = ["memory:m0", "memory:m1"]
REFS = PEOPLE + MEMORIES + ["file:x", "agent:a"]
SCOPES = ["org", "org", "person:p0", "person:p1", "session:s0"]

SOURCES = [None, None, ("session", "s0"), ("actor", "person:p1"), ("actor", "person:p2"), ("actor", "agent:a")]
"""Who said it: no one named, session s0 (its words are person:p0's), a person, or an agent."""

asserts = st.tuples(st.just("assert"), st.sampled_from(REFS), st.sampled_from(["r0", "r1", "r2"]),
                    st.sampled_from(REFS), st.sampled_from(SCOPES), st.sampled_from(SOURCES))
forgets = st.tuples(st.just("forget"), st.sampled_from(PEOPLE + MEMORIES + ["session:s0", "fact"]),
                    st.integers(0, 1000))
programs = st.lists(st.one_of(asserts, asserts, forgets), min_size=1, max_size=24)


def _author(event: FactAsserted | FactCorroborated) -> str | None:
    """The reference for `domain.forgetting.author_of`: session s0 serves person:p0; a person may be the actor."""
    if event.provenance.session_id == "s0":
        return "person:p0"
    actor = event.provenance.actor
    return actor if actor is not None and actor.startswith("person:") else None


def _owners(asserted: FactAsserted, event: FactAsserted | FactCorroborated) -> set[str]:
    """Who owns `event`'s reason (an assertion or a corroboration of the fact `asserted`): docs/forgetting.md's
    rule, written out plainly."""
    if asserted.scope == "session:s0":  # the session serves person:p0: forgetting p0 erases the session's facts
        return {f"fact:{asserted.fact_id}", asserted.scope, "person:p0"}
    if asserted.scope != "org":
        return {f"fact:{asserted.fact_id}", asserted.scope}
    named = {ref for ref in (asserted.subject, asserted.object) if ref.startswith("person:")}
    author = _author(event)
    if len(named) == 2 and author in named:  # between two people: each party's own words are theirs alone
        return {f"fact:{asserted.fact_id}", author}  # type: ignore[arg-type]
    return {f"fact:{asserted.fact_id}"} | named


@pytest.mark.parametrize("backend", ["sqlite", "popo", "postgres"])
def test_every_field_is_forgotten_exactly_when_an_owner_was_forgotten_after_it_was_written(backend):
    settings(max_examples=examples(0.05 if backend == "postgres" else 0.13),
             suppress_health_check=[HealthCheck.too_slow])(given(programs)(_check_program))(backend)


def _check_program(backend: str, program: list[tuple]) -> None:
    with tempfile.TemporaryDirectory() as home:
        config = postgres_settings(Path(home)) if backend == "postgres" else \
            Settings(home=Path(home), event_store=backend)  # type: ignore[arg-type]
        app = bootstrap(config, clock=TickingClock())
        run = app.service.execute
        run(c.CreateTenant(tenant=T))
        for ref in REFS:
            run(c.RegisterEntity(tenant=T, ref=ref, label=f"label of {ref}"))
        run(c.StartSession(tenant=T, session_id="s0", agent="agent:a", serving="person:p0"))
        for n, step in enumerate(program):
            if step[0] == "assert":
                _kind, subject, relation, obj, scope, said = step
                source = None if said is None else c.Source(session_id=said[1]) if said[0] == "session" else \
                    c.Source(actor=said[1])
                app.service.execute_batch([c.AssertFact(tenant=T, subject=subject, relation=relation, object=obj,
                                                        scope=scope, reason=f"reason {n}", source=source)])
            else:
                _kind, subject, pick = step
                if subject == "fact":
                    facts = sorted(app.service.ontology(T).facts)
                    if not facts:
                        continue
                    subject = f"fact:{facts[pick % len(facts)]}"
                app.application.forgetting.forget(T, subject)

        logged = list(app.log.read(0, 100_000))
        forgets = [(x.position, x.event.subject) for x in logged if isinstance(x.event, SubjectForgotten)]
        asserted = {x.event.fact_id: x.event for x in logged if isinstance(x.event, FactAsserted)}
        links = [(x.position, x.event) for x in logged if isinstance(x.event, FactAsserted)]
        checked = 0
        for x in logged:
            event = x.event
            if isinstance(event, FactAsserted | FactCorroborated) and event.reason is not None:
                owners = _owners(asserted[event.fact_id], event)
                gone = any(at > x.position and subject in owners for at, subject in forgets)
                assert (event.reason == FORGOTTEN) == gone, (event, owners, forgets)
                checked += 1
            elif isinstance(event, EntityRegistered):
                def linked_at(at: int, ref: str = event.ref) -> set[str]:
                    # the people facts written before `at` link the entity to: those they name, and person:p0 for
                    # a fact scoped to or drawn from session s0, which serves p0
                    return {o for p, f in links if p < at and ref in (f.subject, f.object)
                            for o in (f.subject, f.object, f.scope,
                                      "person:p0" if "s0" in (f.scope[8:], f.provenance.session_id) else "")
                            if o.startswith("person:")}

                def erased_by(at: int, subject: str, ref: str = event.ref) -> bool:
                    if subject == ref:
                        return ref.startswith(("person:", "memory:"))
                    linked = linked_at(at)
                    if ref.startswith("memory:"):  # a memory goes with every person a fact linked it to
                        return subject in linked
                    # another thing's label goes with the last person still remembered that it is linked to
                    earlier = {who for when, who in forgets if when < at}
                    return ref.startswith("file:") and subject in linked and not linked - {subject} - earlier

                gone = any(at > x.position and erased_by(at, subject) for at, subject in forgets)
                assert (event.label == FORGOTTEN) == gone, (event, forgets)
                checked += 1
        assert checked >= len(REFS)
        app.close()


def test_forgetting_one_fact_stores_its_siblings_keys_and_deletes_the_group_key_for_real(tmp_path):
    app = bootstrap(Settings(home=tmp_path, event_store="sqlite"), clock=TickingClock())
    run = app.service.execute
    run(c.CreateTenant(tenant=T))
    for ref in ("person:li", "file:a", "file:b", "file:c"):
        run(c.RegisterEntity(tenant=T, ref=ref, label=ref))
    for obj in ("file:a", "file:b", "file:c"):  # three facts of one group: scoped to Li
        run(c.AssertFact(tenant=T, subject="person:li", relation="reads", object=obj, scope="person:li",
                         reason=f"Li reads {obj}"))
    keys = app.log.keys
    assert isinstance(keys, SQLiteKeyStore)
    (group_key_id,) = _stored(tmp_path, "SELECT key_id FROM key_groups WHERE group_id = ?", f"{T}/facts/person:li")
    group_key = keys.get(group_key_id)
    assert group_key is not None and group_key in (tmp_path / "keys.sqlite").read_bytes() + _wal(tmp_path)
    (rows_before,) = _stored(tmp_path, "SELECT count(*) FROM data_keys")

    state = app.service.ontology(T)
    (doomed,) = [f for f in state.facts.values() if f.object == "file:b"]
    report = app.application.forgetting.forget(T, f"fact:{doomed.fact_id}")
    assert report.keys_deleted == 1  # the group's key; the other two members' keys are now stored on their own
    # only the forgotten fact's event: its siblings' events were sealed with the same group, but their keys stay
    assert report.receipt is not None and report.receipt.events_affected == 1
    assert _stored(tmp_path, "SELECT count(*) FROM data_keys") == (rows_before + 1,)
    assert group_key not in (tmp_path / "keys.sqlite").read_bytes() + _wal(tmp_path)
    reasons = {f.object: f.reason for f in app.service.ontology(T).facts.values()}
    assert reasons == {"file:a": "Li reads file:a", "file:b": FORGOTTEN, "file:c": "Li reads file:c"}

    # a new member gets a new group key; forgetting Li erases old and new members alike
    run(c.RegisterEntity(tenant=T, ref="file:d", label="file:d"))
    run(c.AssertFact(tenant=T, subject="person:li", relation="reads", object="file:d", scope="person:li",
                     reason="Li reads file:d"))
    assert app.service.ontology(T).facts[[f.fact_id for f in app.service.ontology(T).facts.values()
                                          if f.object == "file:d"][0]].reason == "Li reads file:d"
    app.application.forgetting.forget(T, "person:li")
    assert {f.reason for f in app.service.ontology(T).facts.values()} == {FORGOTTEN}
    app.close()

    # a fresh process reads the same
    again = bootstrap(Settings(home=tmp_path, event_store="sqlite"), clock=TickingClock())
    assert {f.reason for f in again.service.ontology(T).facts.values()} == {FORGOTTEN}
    again.close()


def _stored(home: Path, statement: str, *params: str) -> tuple:
    """One row of the key store's SQLite file, read as anyone holding the file would (a connection of its own)."""
    with closing(sqlite3.connect(home / "keys.sqlite")) as db:
        return tuple(db.execute(statement, params).fetchone())


def _wal(home: Path) -> bytes:
    wal = home / "keys.sqlite-wal"
    return wal.read_bytes() if wal.exists() else b""


WRITER = """
import sys
from pathlib import Path
from domain import commands as c
from infra.bootstrap import bootstrap
from infra.settings import Settings
app = bootstrap(Settings(home=Path(sys.argv[1]), event_store="sqlite"))
for n in range(int(sys.argv[2])):
    app.service.execute_batch([c.AssertFact(tenant="acme", subject="person:li", relation=f"r{n}_{i}",
                                            object="file:x", scope="person:li", reason=f"KEEP {n}-{i}")
                               for i in range(4)])
app.close()
"""


def test_a_forget_in_one_process_never_erases_facts_another_process_writes_meanwhile(tmp_path):
    """Process B keeps writing facts of one group while this process forgets single facts of it: every fact B
    wrote stays readable unless it was itself forgotten, although B caches the group's key. (B's batches that
    were sealed with a group key a forget deleted are decided and sealed again; the forget's plan of siblings
    is checked against the log with every sealed write held off.)"""
    import subprocess
    import sys
    import time

    app = bootstrap(Settings(home=tmp_path, event_store="sqlite"), clock=TickingClock())
    run = app.service.execute
    run(c.CreateTenant(tenant=T))
    for ref in ("person:li", "file:x"):
        run(c.RegisterEntity(tenant=T, ref=ref, label=ref))
    run(c.AssertFact(tenant=T, subject="person:li", relation="seed", object="file:x", scope="person:li",
                     reason="seed"))
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), "300"],
                              cwd=Path(__file__).resolve().parents[2])
    forgotten, deadline = 0, time.monotonic() + 300
    while writer.poll() is None:
        if time.monotonic() > deadline:  # (bounded: a writer that stalls fails the test instead of the run)
            writer.kill()
            raise AssertionError("the writer process did not finish its 300 facts within 300 s")
        facts = sorted(app.service.ontology(T).facts)
        receipt = app.application.forgetting.forget(T, f"fact:{facts[len(facts) // 2]}").receipt
        forgotten += 1
        wait_until(lambda at=receipt.position: writer.poll() is not None or app.log.max_position() > at, 300,
                   "the writer wrote nothing after a forget")  # (so that every forget races writes)
    assert writer.wait() == 0
    assert forgotten >= 3
    app.close()

    fresh = bootstrap(Settings(home=tmp_path, event_store="sqlite"), clock=TickingClock())
    logged = list(fresh.log.read(0, 100_000))
    forgets = {x.event.subject: x.position for x in logged if isinstance(x.event, SubjectForgotten)}
    asserted = [x for x in logged if isinstance(x.event, FactAsserted)]
    assert len(asserted) == 1 + 300 * 4
    for x in asserted:
        gone = forgets.get(f"fact:{x.event.fact_id}", 0) > x.position
        assert (x.event.reason == FORGOTTEN) == gone, (x.event.relation, x.event.reason)
    fresh.close()
