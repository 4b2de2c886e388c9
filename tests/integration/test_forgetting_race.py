"""A forget holds every writer off, on PostgreSQL and on SQLite: three writer processes keep writing facts about
six people (their reasons sealed with keys each person owns) while this process forgets them one after the other;
afterwards nothing about a person written before their `subject.forgotten` event is readable, and everything
written about someone else is. (Several forgets, because a gap between a forget's keys and its event shows up in
some forgets, not every one.)"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from domain import commands as c
from domain.facts import FactAsserted
from domain.forgetting import FORGOTTEN, SubjectForgotten
from infra.bootstrap import bootstrap
from infra.settings import Settings
from tests.conftest import TickingClock, postgres_settings
from tests.race_support import wait_until

T = "acme"
PEOPLE = [f"person:p{n}" for n in range(6)]
WRITER = """
import sys
import time
from pathlib import Path
from domain import commands as c
from domain.errors import ConcurrencyError
from infra.bootstrap import bootstrap
from infra.settings import Settings
settings = Settings(home=Path(sys.argv[1]), event_store=sys.argv[5], pg_schema=sys.argv[2])
app = bootstrap(settings)
name = sys.argv[3]
for n in range(int(sys.argv[4])):
    try:
        app.service.execute_batch([c.AssertFact(tenant="acme", subject=person, relation=f"{name}_{n}_{i}",
                                                object="file:x", scope=person, reason=f"{person} {name} {n}-{i}")
                                   for i, person in enumerate(["person:p0", "person:p1", "person:p2", "person:wang",
                                                               "person:p3", "person:p4", "person:p5"])])
    except ConcurrencyError:  # (a refusal to try again: on SQLite, writers in tight loops retry a version conflict a
        time.sleep(0.01)      # bounded number of times; on PostgreSQL they take turns): not this test's point
app.close()
"""


@pytest.mark.parametrize("backend", ["postgres", "sqlite"])
def test_nothing_written_before_a_forget_event_stays_readable_while_three_writer_processes_write(tmp_path, backend):
    settings = postgres_settings(tmp_path) if backend == "postgres" else Settings(home=tmp_path, event_store="sqlite")
    app = bootstrap(settings, clock=TickingClock())
    run = app.service.execute
    run(c.CreateTenant(tenant=T))
    for ref in (*PEOPLE, "person:wang", "file:x"):
        run(c.RegisterEntity(tenant=T, ref=ref, label=f"label of {ref}"))
    root = Path(__file__).resolve().parents[2]

    def facts() -> int:
        return sum(isinstance(x.event, FactAsserted) for x in app.log.read(0, 100_000))

    writers = []
    for name in ("a", "b", "c"):  # (one after the other: two processes opening a new schema at once race on its DDL)
        writers.append(subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), settings.pg_schema, name,
                                         "300", backend], cwd=root))
        deadline = time.monotonic() + 120
        while facts() < 20 * len(writers):  # (bounded: a writer that died or stalls fails the test, saying so)
            assert all(w.poll() in (None, 0) for w in writers), [w.returncode for w in writers]
            assert time.monotonic() < deadline, f"writer {name} wrote no 20 facts within 120 s"
            time.sleep(0.05)
    receipts = {}
    for person in PEOPLE:  # (each forget races writes: the next one waits until the writers wrote after it)
        receipts[person] = receipt = app.application.forgetting.forget(T, person).receipt
        wait_until(lambda at=receipt.position: app.log.max_position() > at
                   or all(w.poll() is not None for w in writers), 120, f"no writer wrote after the forget of {person}")
    assert all(writer.wait(300) == 0 for writer in writers)
    app.close()

    fresh = bootstrap(settings, clock=TickingClock())
    logged = list(fresh.log.read(0, 1_000_000))
    forgot = {x.event.subject: x.position for x in logged if isinstance(x.event, SubjectForgotten)}
    assert forgot == {person: receipt.position for person, receipt in receipts.items()}
    asserted = [x for x in logged if isinstance(x.event, FactAsserted)]
    assert any(x.position > min(forgot.values()) for x in asserted), "the forgets ran while the writers wrote"
    for person, position in forgot.items():
        before = [x for x in asserted if x.position < position and x.event.scope == person]
        assert before, f"{person} was written about before the forget"
        leftovers = [x.event.reason for x in before if x.event.reason != FORGOTTEN]
        assert leftovers == [], person
    assert all(x.event.reason != FORGOTTEN for x in asserted if x.event.scope == "person:wang")
    fresh.close()
