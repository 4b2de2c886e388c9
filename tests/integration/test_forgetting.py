"""Real forgetting in an append-only log: plant markers, forget the subject, scan every byte noumena wrote."""

from __future__ import annotations

from pathlib import Path

import pytest

from domain import commands as c
from domain.application.ontology_service import OntologyService
from domain.errors import InvalidInput, UnknownEntity
from domain.forgetting import FORGOTTEN, SubjectForgotten
from infra.bootstrap import bootstrap
from infra.settings import Settings
from projections.export import export_parquet
from projections.files import ProjectionFiles
from projections.ontology_as_of import believed_at
from projections.projector import Projector
from projections.purge import register_export
from projections.replay import replay
from projections.snapshot import open_snapshot, publish_snapshot
from tests.conftest import TickingClock

T = "acme"
GONE = ["MARKER-ZHAO-NAME", "MARKER-ZHAO-ALIAS", "MARKER-ZHAO-MEMORY", "MARKER-ZHAO-REASON",
        "MARKER-ORG-ABOUT-ZHAO", "MARKER-ZHAO-MESSAGE", "MARKER-ZHAO-SUMMARY", "MARKER-ZHAO-TASK",
        "MARKER-ZHAO-WORKER-REPORT"]
KEPT = ["KEEP-QIAN-NAME", "KEEP-QIAN-REASON-ABOUT-ZHAO", "KEEP-ORG-REASON"]


def _plant(service: OntologyService) -> None:
    run = service.execute
    run(c.CreateTenant(tenant=T))
    run(c.RegisterEntity(tenant=T, ref="person:zhao", label="Zhao MARKER-ZHAO-NAME", aliases=("MARKER-ZHAO-ALIAS",)))
    run(c.RegisterEntity(tenant=T, ref="person:qian", label="Qian KEEP-QIAN-NAME"))
    run(c.RegisterEntity(tenant=T, ref="memory:zhao-tea", label="MARKER-ZHAO-MEMORY prefers green tea"))
    run(c.RegisterEntity(tenant=T, ref="agent:assistant", label="the assistant"))
    run(c.RegisterEntity(tenant=T, ref="file:price-list", label="price list"))
    run(c.AssertFact(tenant=T, subject="person:zhao", relation="prefers", object="memory:zhao-tea",
                     reason="MARKER-ZHAO-REASON said on a call", scope="person:zhao"))
    run(c.AssertFact(tenant=T, subject="person:zhao", relation="reads", object="file:price-list",
                     reason="MARKER-ORG-ABOUT-ZHAO", scope="org"))
    run(c.AssertFact(tenant=T, subject="person:qian", relation="knows", object="person:zhao",
                     reason="KEEP-QIAN-REASON-ABOUT-ZHAO", scope="person:qian"))
    run(c.AssertFact(tenant=T, subject="agent:assistant", relation="reads", object="file:price-list",
                     reason="KEEP-ORG-REASON", scope="org"))
    run(c.StartSession(tenant=T, session_id="s-zhao", agent="agent:assistant", serving="person:zhao"))
    run(c.AppendMessage(tenant=T, session_id="s-zhao", message_id="m1", role="user",
                        content="MARKER-ZHAO-MESSAGE please remember"))
    run(c.DispatchWorker(tenant=T, session_id="s-zhao", worker_session_id="w-zhao", task="MARKER-ZHAO-TASK",
                         about=("person:zhao",)))
    run(c.ReportWorker(tenant=T, session_id="w-zhao", status="working", summary="MARKER-ZHAO-WORKER-REPORT"))
    run(c.CompactSession(tenant=T, session_id="s-zhao", through_message_id="m1",
                         summary="MARKER-ZHAO-SUMMARY of the call"))


def _every_file(*roots: Path) -> list[Path]:
    return [p for root in roots for p in root.rglob("*") if p.is_file()]


def _scan(files: list[Path], markers: list[str]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path in files:
        try:
            data = path.read_bytes()
        except FileNotFoundError:  # a temporary file renamed into place while we scanned: its bytes are
            continue               # read under the final name on the next scan
        for marker in markers:
            if marker.encode() in data:
                found.setdefault(marker, []).append(path.name)
    return found


def test_forgetting_a_person_leaves_no_marker_in_any_file_and_keeps_everyone_else(tmp_path):
    home, exports = tmp_path / "home", tmp_path / "exports"
    clock = TickingClock()
    app = bootstrap(Settings(home=home, event_store="sqlite"), clock=clock)
    _plant(app.service)
    before_forget = clock.now
    files = ProjectionFiles(home)
    with Projector(app.log, files.live) as projector:
        projector.catch_up()
        publish_snapshot(projector.con, files.snapshot)
        export_parquet(projector.con, exports)
    register_export(home, exports)
    replay(app.log, tmp_path / "replayed-before.duckdb")
    everything = _every_file(home, exports)
    seen = _scan(everything, GONE)
    assert {"MARKER-ZHAO-NAME", "MARKER-ZHAO-REASON", "MARKER-ORG-ABOUT-ZHAO"} <= set(seen), \
        "the views held the plaintext before the forget (the scan can see it)"
    assert not any(name.startswith("events.sqlite") for names in seen.values() for name in names), \
        "the event log itself never holds content in the clear"

    report = app.application.forgetting.forget(T, "person:zhao")
    assert report.keys_deleted >= 4
    assert report.purged_at is not None  # no projector runs here: the forget purged the projections itself
    (tmp_path / "replayed-before.duckdb").unlink()  # an analyst's own copy is theirs to delete
    leftovers = _scan(_every_file(home, exports), GONE)
    assert leftovers == {}, f"forgotten content survived in {leftovers}"

    # structure and other people's content are intact, in the log and in the views
    state = OntologyService(app.log, clock=clock).ontology(T)
    assert state.entities["person:zhao"].label == FORGOTTEN and state.entities["person:zhao"].aliases == ()
    assert state.entities["person:qian"].label == "Qian KEEP-QIAN-NAME"
    reasons = {f.reason for f in state.facts.values()}
    assert {"KEEP-QIAN-REASON-ABOUT-ZHAO", "KEEP-ORG-REASON", FORGOTTEN} <= reasons
    assert state.sessions["s-zhao"].turns == [("m1", "user", FORGOTTEN)]
    assert len(state.facts) == 4 and state.sessions["w-zhao"].parent_session_id == "s-zhao"
    events = [x.event for x in app.log.read(0, 10_000)]
    assert isinstance(events[-1], SubjectForgotten) and "MARKER" not in events[-1].model_dump_json()
    assert believed_at(T, events, before_forget).entities["person:zhao"].label == FORGOTTEN

    # as-of queries and replays for times before the forget still run, and show [forgotten]
    con = open_snapshot(files.snapshot)
    try:
        rows = con.execute("SELECT reason FROM facts_as_of(?::TIMESTAMPTZ) ORDER BY reason",
                           [before_forget]).fetchall()
    finally:
        con.close()
    assert [r[0] for r in rows] == sorted(["KEEP-QIAN-REASON-ABOUT-ZHAO", "KEEP-ORG-REASON", FORGOTTEN, FORGOTTEN])
    replayed = replay(app.log, tmp_path / "replayed-after.duckdb", before_forget)
    assert replayed.events > 0
    assert _scan([replayed.path], GONE) == {}
    app.close()


def test_forgetting_a_single_fact_erases_only_its_reason(tmp_path):
    app = bootstrap(Settings(home=tmp_path, event_store="sqlite"), clock=TickingClock())
    _plant(app.service)
    state = app.service.ontology(T)
    (fact,) = [f for f in state.facts.values() if f.reason == "KEEP-ORG-REASON"]
    app.application.forgetting.forget(T, f"fact:{fact.fact_id}")
    after = app.service.ontology(T)
    assert after.facts[fact.fact_id].reason == FORGOTTEN
    assert after.entities["person:zhao"].label == "Zhao MARKER-ZHAO-NAME"
    app.close()


def test_forgetting_a_session_erases_its_turns_tasks_and_summaries(tmp_path):
    app = bootstrap(Settings(home=tmp_path, event_store="sqlite"), clock=TickingClock())
    _plant(app.service)
    app.application.forgetting.forget(T, "session:s-zhao")
    state = app.service.ontology(T)
    assert state.sessions["s-zhao"].turns == [("m1", "user", FORGOTTEN)]
    assert state.sessions["s-zhao"].summaries == [("s-zhao#1", FORGOTTEN)]
    assert state.sessions["w-zhao"].last_summary == FORGOTTEN  # the worker's report belonged to the session
    assert state.entities["person:zhao"].label == "Zhao MARKER-ZHAO-NAME"
    app.close()


def test_forget_names_a_bad_or_unknown_subject_and_deletes_nothing(tmp_path):
    app = bootstrap(Settings(home=tmp_path, event_store="sqlite"), clock=TickingClock())
    _plant(app.service)
    with pytest.raises(InvalidInput, match="not a forgettable subject"):
        app.application.forgetting.forget(T, "agent:assistant")
    with pytest.raises(UnknownEntity):
        app.application.forgetting.forget(T, "person:nobody")
    assert app.service.ontology(T).entities["person:zhao"].label == "Zhao MARKER-ZHAO-NAME"
    app.close()


def test_the_key_bytes_are_gone_from_the_key_store_file(tmp_path):
    app = bootstrap(Settings(home=tmp_path, event_store="sqlite"), clock=TickingClock())
    _plant(app.service)
    keys = app.log.keys
    key = keys.get(f"{T}/entity/person:zhao")  # type: ignore[union-attr]
    assert key is not None and key in (tmp_path / "keys.sqlite").read_bytes() + _wal(tmp_path)
    app.application.forgetting.forget(T, "person:zhao")
    assert key not in (tmp_path / "keys.sqlite").read_bytes() + _wal(tmp_path)
    assert keys.get(f"{T}/entity/person:zhao") is None  # type: ignore[union-attr]
    app.close()


def _wal(home: Path) -> bytes:
    wal = home / "keys.sqlite-wal"
    return wal.read_bytes() if wal.exists() else b""


def test_forgetting_needs_encryption_to_be_on(tmp_path):
    app = bootstrap(Settings(home=tmp_path, event_store="sqlite", encrypt_content=False), clock=TickingClock())
    _plant(app.service)
    with pytest.raises(InvalidInput, match="not encrypted"):
        app.application.forgetting.forget(T, "person:zhao")
    app.close()


def test_a_folded_state_dropped_after_a_forget_is_not_kept_alive_by_the_session_key_cache():
    """Services drop a tenant's folded state after a forget (it holds content); no cache may keep it alive."""
    import gc
    import weakref
    from datetime import UTC, datetime

    from domain.forgetting import content_key
    from domain.ontology import Ontology
    from domain.rules import decide

    now, state = datetime(2026, 3, 1, tzinfo=UTC), Ontology(tenant=T)
    for command in (c.CreateTenant(tenant=T), c.RegisterEntity(tenant=T, ref="agent:a", label="a"),
                    c.RegisterEntity(tenant=T, ref="person:li", label="MARKER-LI"),
                    c.StartSession(tenant=T, session_id="s-li", agent="agent:a", serving="person:li")):
        for event in decide(state, command, now):
            state.apply(event)
    message = decide(state, c.AppendMessage(tenant=T, session_id="s-li", message_id="m1", role="user",
                                            content="hello"), now)[0]
    assert content_key(state, message).owners == {"person:li", "session:s-li"}  # type: ignore[union-attr]
    dropped = weakref.ref(state)
    del state
    gc.collect()
    assert dropped() is None


def test_after_a_forget_the_tenant_is_folded_again_behind_the_writes_and_reads_of_everyone(make_noumena, backend):
    """A forget drops the tenant's folded state; its next use folds it again from the log in a thread of its own,
    holding no lock, and waits for it (folded under the lock, a large tenant held every writer and reader of the
    process back).
    Another tenant writes and reads meanwhile; the tenant's own next write waits for the fold and lands on it;
    afterwards its state is a fresh fold of the log, the forgotten person's content read `[forgotten]`."""
    from domain.ontology import Ontology

    noumena = make_noumena(backend, clock=TickingClock())
    run = noumena.service.execute
    for tenant in (T, "other"):
        run(c.CreateTenant(tenant=tenant))
        for ref, label in (("person:x", "MARKER-X"), ("person:y", "Yan"), ("memory:tea", "green tea")):
            run(c.RegisterEntity(tenant=tenant, ref=ref, label=label))
    run(c.AssertFact(tenant=T, subject="person:x", relation="likes", object="memory:tea", reason="MARKER-X said"))
    noumena.application.forgetting.forget(T, "person:x")
    run(c.AssertFact(tenant="other", subject="person:y", relation="likes", object="memory:tea", reason="other"))
    with noumena.service.reading("other") as state:
        assert state.entities["person:x"].label == "MARKER-X"
    run(c.AssertFact(tenant=T, subject="person:y", relation="likes", object="memory:tea", reason="Yan said"))
    with noumena.service.reading(T) as state:
        fresh = Ontology(tenant=T)
        for event in noumena.log.read_stream(T):
            fresh.apply(event)
        assert state == fresh
        assert state.entities["person:x"].label == FORGOTTEN and state.entities["person:y"].label == "Yan"
        assert "person:x" in state.forgotten_people
