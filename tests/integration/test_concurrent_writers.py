"""Writers of one PostgreSQL tenant in several processes take turns: all of them finish (none gives up after
version conflicts), the log holds exactly what each wrote, in each one's order; a write that waited too long for
its turn is refused as retryable (ConcurrencyError; over HTTP a 503 problem with Retry-After) and writes nothing."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

import pytest

from domain import commands as c
from domain.errors import ConcurrencyError
from domain.facts import FactAsserted
from infra.bootstrap import bootstrap
from tests.api_support import start_server, stop_server
from tests.conftest import TickingClock, postgres_settings

pytestmark = pytest.mark.postgres  # (every test here writes one PostgreSQL tenant from several processes)

T = "acme"
ROOT = Path(__file__).resolve().parents[2]
WRITER = """
import sys
from pathlib import Path
from domain import commands as c
from infra.bootstrap import bootstrap
from infra.settings import Settings
app = bootstrap(Settings(home=Path(sys.argv[1]), event_store="postgres", pg_schema=sys.argv[2]))
name, batches = sys.argv[3], int(sys.argv[4])
for n in range(batches):  # (a tight loop: each batch decides on the facts the others wrote just before)
    app.service.execute_batch([c.AssertFact(tenant="acme", subject=person, relation=f"{name}_{n}",
                                            object="file:x", reason=f"{name} {n}")
                               for person in ("person:p0", "person:p1")], all_or_nothing=True)
app.close()
"""


def _tenant(settings):  # noqa: ANN001, ANN202
    app = bootstrap(settings, clock=TickingClock())
    app.service.execute(c.CreateTenant(tenant=T))
    for ref in ("person:p0", "person:p1", "file:x"):
        app.service.execute(c.RegisterEntity(tenant=T, ref=ref, label=f"label of {ref}"))
    return app


def test_four_writer_processes_on_one_postgres_tenant_all_finish_and_the_log_holds_what_each_wrote(tmp_path):
    settings = postgres_settings(tmp_path)
    app = _tenant(settings)
    names, batches = ["a", "b", "c", "d"], 40
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), settings.pg_schema, name,
                                 str(batches)], cwd=ROOT, stderr=subprocess.PIPE, text=True) for name in names]
    failures = [(writer.returncode, writer.stderr.read()[-2000:]) for writer in writers  # type: ignore[union-attr]
                if writer.wait(600) != 0]
    assert failures == []

    logged = [x for x in app.log.read(0, 100_000) if isinstance(x.event, FactAsserted)]
    written = Counter((x.event.relation, x.event.subject) for x in logged)
    expected = {(f"{name}_{n}", person) for name in names for n in range(batches)
                for person in ("person:p0", "person:p1")}
    assert set(written) == expected
    assert max(written.values()) == 1, "a batch was written twice"
    for name in names:  # each process's batches in the order it wrote them
        mine = [int(x.event.relation.split("_")[1]) for x in logged if x.event.relation.startswith(f"{name}_")]
        assert mine == sorted(mine)
    with app.service.reading(T) as state:  # this process's state caught up with all of them
        assert len(state.facts) == len(expected)
    app.close()


def test_a_write_that_waits_too_long_for_its_tenant_is_refused_as_retryable_and_writes_nothing(tmp_path):
    settings = postgres_settings(tmp_path).model_copy(update={"write_lock_wait_seconds": 0.3})
    app = _tenant(settings)
    other = bootstrap(settings, clock=TickingClock())
    before = app.log.max_position()
    with other.service.serialized(T) as held:  # another process's writer holds the tenant's turn
        assert held
        try:
            app.service.execute(c.AssertFact(tenant=T, subject="person:p0", relation="late", object="file:x"))
            raise AssertionError("the write did not wait for the tenant's turn")
        except ConcurrencyError as error:
            assert "try again" in str(error)
        assert app.log.max_position() == before
        app.service.execute(c.CreateTenant(tenant="beta"))  # (another tenant's writers do not wait for it)
    before = app.log.max_position()
    app.service.execute(c.AssertFact(tenant=T, subject="person:p0", relation="late", object="file:x"))
    assert app.log.max_position() == before + 1
    other.close()
    app.close()


def test_over_http_a_write_refused_for_contention_is_a_503_problem_with_retry_after(tmp_path):
    settings = postgres_settings(tmp_path / "pg")
    server = start_server(tmp_path / "home", NOUMENA_EVENT_STORE="postgres", NOUMENA_PG_SCHEMA=settings.pg_schema,
                          NOUMENA_PG_PORT=str(settings.pg_port), NOUMENA_WRITE_LOCK_WAIT_SECONDS="0.3")
    try:
        tenant = server.tenant(T)
        registered = tenant.client.post("/v1/events", json={"events": [
            {"event_id": f"e-{ref}", "tenant": T, "type": "entity.registered", "payload": {"ref": ref, "label": ref}}
            for ref in ("person:p0", "person:p1")]})
        assert registered.status_code == 200, registered.text
        body = {"subject": "person:p0", "relation": "knows", "object": "person:p1"}
        other = bootstrap(settings.model_copy(update={"home": tmp_path / "other",
                                                      "kek_file": server.home / "keys.kek"}))  # (the server's KEK)
        held, done = threading.Event(), threading.Event()

        def hold() -> None:
            with other.service.serialized(T):
                held.set()
                done.wait(60)

        holder = threading.Thread(target=hold)
        holder.start()
        held.wait(30)
        refused = tenant.client.post("/v1/facts", json=body)
        done.set()
        holder.join()
        assert refused.status_code == 503, refused.text
        assert refused.headers["content-type"].startswith("application/problem+json")
        assert int(refused.headers["retry-after"]) >= 1
        assert refused.json()["type"].endswith("/write-contended")
        assert "try again" in refused.json()["detail"]
        accepted = tenant.client.post("/v1/facts", json=body)
        assert accepted.status_code == 200, accepted.text
        other.close()
    finally:
        stop_server(server)
