"""A read of the served read model sees one committed batch of the projector, whatever it commits meanwhile.

A perspective index is loaded from DuckDB table by table (entities, facts, sessions, uses, then the position it
stands at) while the projector keeps committing batches. Were each statement its own transaction, the index would
be stamped with a later position than some of its tables were read at, and the rows committed in between (a
session, an entity) would be missing from it for good: following the log resumes after the stamped position.
"""

from __future__ import annotations

from typing import Any

from infra.bootstrap import bootstrap
from infra.runtime.serving import ProjectionFollower
from infra.settings import Settings
from projections.perspective_index import fold
from projections.perspective_load import from_duckdb
from projections.perspectives import Perspectives

TENANT = "acme"


class CommitsBetweenStatements:
    """A read connection before each of whose statements the projector commits one more batch: the worst
    interleaving a reader can meet, made deterministic."""

    def __init__(self, con: Any, follower: ProjectionFollower) -> None:
        self._con = con
        self._follower = follower
        self.batches = 0

    def _commit_one(self) -> None:
        self.batches += bool(self._follower._projector.run_once())

    def sql(self, *args: Any, **kwargs: Any) -> Any:
        self._commit_one()
        return self._con.sql(*args, **kwargs)

    def execute(self, *args: Any, **kwargs: Any) -> Any:
        self._commit_one()
        return self._con.execute(*args, **kwargs)


def test_an_index_loaded_while_the_projector_commits_holds_every_row_up_to_its_position(tmp_path):
    noumena = bootstrap(Settings(home=tmp_path / "home", event_store="sqlite", projection_batch_size=7,
                                 state_snapshot_every=0))
    follower = ProjectionFollower(noumena.log, noumena.settings, publish_snapshots=False)
    try:
        app = noumena.application
        app.tenants.create_tenant(TENANT)
        app.facts.register_entity(TENANT, "agent:companion", "Companion")
        for i in range(40):
            app.facts.register_entity(TENANT, f"person:p{i}", f"Person {i}")
            app.facts.ingest(TENANT, [{"event_id": f"s{i}", "tenant": TENANT, "type": "session.started",
                                       "payload": {"session_id": f"s{i}", "agent": "agent:companion",
                                                   "serving": f"person:p{i}"}}])
            app.facts.assert_fact(TENANT, subject=f"person:p{i}", relation="knows", object="agent:companion")
        follower._projector.run_once()  # the first batch only: the rest is committed while the index loads
        with follower.reader() as con:
            interleaved = CommitsBetweenStatements(con, follower)
            loaded = from_duckdb(interleaved, TENANT)  # type: ignore[arg-type]
        assert interleaved.batches >= 3, "the projector committed between the loader's statements"
        expected = fold(TENANT, Perspectives(noumena.log, noumena.clock).records(loaded.position))
        assert loaded.position == expected.position
        assert set(loaded.entity_ids) == set(expected.entity_ids)
        assert set(loaded.scopes.sessions) == set(expected.scopes.sessions)
        assert loaded.fact_count == expected.fact_count
    finally:
        follower.stop()
        noumena.close()


def test_the_live_read_model_works_on_the_threads_its_setting_names(tmp_path):
    """A serving process's DuckDB works on `live_read_model_threads` (one by default: its requests keep the cores
    while a large query runs), also after a purge swapped a rebuilt file in (the same opening)."""
    noumena = bootstrap(Settings(home=tmp_path / "home", event_store="sqlite", state_snapshot_every=0))
    try:
        for threads in (1, 3):
            settings = noumena.settings.model_copy(update={"live_read_model_threads": threads})
            follower = ProjectionFollower(noumena.log, settings, publish_snapshots=False)
            try:
                with follower.reader() as con:
                    assert con.execute("SELECT current_setting('threads')").fetchone()[0] == threads
            finally:
                follower.stop()
    finally:
        noumena.close()
