"""The PostgreSQL forget holds every writer off: two writer processes keep writing facts about a person (their
reasons sealed with keys the person owns) while this process forgets that person; afterwards nothing written
before the `subject.forgotten` event is readable, and everything written about someone else is."""

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
from tests.conftest import TickingClock, postgres_settings

T = "acme"
WRITER = """
import sys
import time
from pathlib import Path
from domain import commands as c
from domain.errors import ConcurrencyError
from infra.bootstrap import bootstrap
from infra.settings import Settings
settings = Settings(home=Path(sys.argv[1]), event_store="postgres", pg_schema=sys.argv[2])
app = bootstrap(settings)
name = sys.argv[3]
for n in range(int(sys.argv[4])):
    try:
        app.service.execute_batch([c.AssertFact(tenant="acme", subject=person, relation=f"{name}_{n}_{i}",
                                                object="file:x", scope=person, reason=f"{person} {name} {n}-{i}")
                                   for i, person in enumerate(["person:li", "person:li", "person:wang",
                                                               "person:li"])])
    except ConcurrencyError:  # two writers in tight loops on one PostgreSQL tenant may give up after 20 version
        time.sleep(0.01)      # conflicts (they did before this test's forget existed): not this test's point
app.close()
"""


@pytest.mark.postgres
def test_nothing_written_before_the_forget_event_stays_readable_with_two_writer_processes_on_postgres(tmp_path):
    settings = postgres_settings(tmp_path)
    app = bootstrap(settings, clock=TickingClock())
    run = app.service.execute
    run(c.CreateTenant(tenant=T))
    for ref in ("person:li", "person:wang", "file:x"):
        run(c.RegisterEntity(tenant=T, ref=ref, label=f"label of {ref}"))
    root = Path(__file__).resolve().parents[2]

    def facts() -> int:
        return sum(isinstance(x.event, FactAsserted) for x in app.log.read(0, 100_000))

    writers = []
    for name in ("a", "b"):  # (one after the other: two processes opening a new schema at once race on its DDL)
        writers.append(subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), settings.pg_schema, name,
                                         "150"], cwd=root))
        while facts() < 20 * len(writers):
            time.sleep(0.05)
    report = app.application.forget(T, "person:li").receipt
    assert all(writer.wait(300) == 0 for writer in writers)
    app.close()

    fresh = bootstrap(settings, clock=TickingClock())
    logged = list(fresh.log.read(0, 1_000_000))
    (forgot,) = [x.position for x in logged if isinstance(x.event, SubjectForgotten)]
    assert forgot == report.position
    asserted = [x for x in logged if isinstance(x.event, FactAsserted)]
    before = [x for x in asserted if x.position < forgot]
    after = [x for x in asserted if x.position > forgot]
    assert before and after, "the forget ran while both writers were writing"
    leftovers = [x.event.reason for x in before if x.event.scope == "person:li" and x.event.reason != FORGOTTEN]
    assert leftovers == []
    assert all(x.event.reason != FORGOTTEN for x in asserted if x.event.scope == "person:wang")
    fresh.close()
