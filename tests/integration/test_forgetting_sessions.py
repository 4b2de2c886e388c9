"""Forgetting a person erases every session that served them: main and worker sessions, and the reasons of facts
scoped to any of those sessions (`scope: session:<id>`, owned by the session alone); forgetting a session erases
its workers'. Another person's facts, sessions and the structure stay, on every event store."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from domain import commands as c
from domain.application.ontology_service import OntologyService
from domain.forgetting import FORGOTTEN
from projections.perspectives import Perspectives
from projections.replay import replay
from tests.conftest import TickingClock

T = "acme"
GONE = ["MARKER-X-MAIN-SCOPED", "MARKER-X-WORKER-SCOPED", "MARKER-X-WORKER-MESSAGE", "MARKER-X-WORKER-TASK"]
KEPT = ["KEEP-Y-MAIN-SCOPED", "KEEP-Y-EPISODIC", "KEEP-Y-MESSAGE", "KEEP-ORG"]


def _plant(service: OntologyService) -> None:
    run = service.execute
    run(c.CreateTenant(tenant=T))
    for ref, label in (("person:x", "X"), ("person:y", "Y"), ("agent:a", "agent A"), ("file:doc", "a doc")):
        run(c.RegisterEntity(tenant=T, ref=ref, label=label))
    run(c.StartSession(tenant=T, session_id="s-x", agent="agent:a", serving="person:x"))
    run(c.DispatchWorker(tenant=T, session_id="s-x", worker_session_id="w-x", task="MARKER-X-WORKER-TASK",
                         about=("file:doc",)))
    run(c.AppendMessage(tenant=T, session_id="w-x", message_id="wm1", role="assistant",
                        content="MARKER-X-WORKER-MESSAGE"))
    run(c.AssertFact(tenant=T, subject="agent:a", relation="reads", object="file:doc",
                     reason="MARKER-X-MAIN-SCOPED", scope="session:s-x"))
    run(c.AssertFact(tenant=T, subject="agent:a", relation="summarised", object="file:doc",
                     reason="MARKER-X-WORKER-SCOPED", scope="session:w-x"))
    run(c.StartSession(tenant=T, session_id="s-y", agent="agent:a", serving="person:y"))
    run(c.AppendMessage(tenant=T, session_id="s-y", message_id="m1", role="user", content="KEEP-Y-MESSAGE"))
    run(c.AssertFact(tenant=T, subject="agent:a", relation="reads", object="file:doc",
                     reason="KEEP-Y-MAIN-SCOPED", scope="session:s-y"))
    run(c.AssertFact(tenant=T, subject="person:y", relation="reads", object="file:doc",
                     reason="KEEP-Y-EPISODIC", scope="person:y"))
    run(c.AssertFact(tenant=T, subject="agent:a", relation="owns", object="file:doc", reason="KEEP-ORG",
                     scope="org"))


def _texts(service: OntologyService) -> set[str]:
    state = service.ontology(T)
    texts = {f.reason for f in state.facts.values() if f.reason}
    for session in state.sessions.values():
        texts |= {turn[2] for turn in session.turns} | {session.task or ""}
    return texts


def test_forgetting_a_person_erases_their_sessions_workers_and_session_scoped_facts(make_noumena, backend):
    noumena = make_noumena(backend)
    _plant(noumena.service)
    assert set(GONE) | set(KEPT) <= _texts(noumena.service)
    noumena.application.forgetting.forget(T, "person:x")
    fresh = OntologyService(noumena.log, clock=TickingClock())  # read back from the log, not from a cache
    texts = _texts(fresh)
    assert not set(GONE) & texts, set(GONE) & texts
    assert set(KEPT) <= texts
    state = fresh.ontology(T)
    assert state.sessions["w-x"].parent_session_id == "s-x" and state.sessions["w-x"].task == FORGOTTEN
    assert {f.scope for f in state.facts.values()} == {"session:s-x", "session:w-x", "session:s-y", "person:y",
                                                       "org"}  # structure intact
    assert state.entities["person:y"].label == "Y"


def test_forgetting_a_session_erases_the_facts_scoped_to_its_workers(make_noumena, backend):
    noumena = make_noumena(backend)
    _plant(noumena.service)
    noumena.application.forgetting.forget(T, "session:s-x")
    texts = _texts(OntologyService(noumena.log, clock=TickingClock()))
    assert not set(GONE) & texts and set(KEPT) <= texts
    assert noumena.service.ontology(T).entities["person:x"].label == "X"  # the person is not forgotten


def test_after_forgetting_a_person_replay_as_of_and_perspectives_still_work_for_everyone_else(make_noumena,
                                                                                              tmp_path):
    clock = TickingClock(datetime(2026, 3, 1, tzinfo=UTC), step=timedelta(minutes=1))
    noumena = make_noumena("sqlite", clock=clock)
    _plant(noumena.service)
    perspectives = Perspectives(noumena.log, clock)
    served = perspectives.perspective_for(T, "agent:a", serving="person:y")
    before = clock.now
    noumena.application.forgetting.forget(T, "person:x")
    perspectives = Perspectives(noumena.log, clock)  # (a forget reloads them)
    again = perspectives.reproduce(served)
    assert [(i.fact_id, i.tier) for i in again.items] == [(i.fact_id, i.tier) for i in served.items]
    after = perspectives.perspective_for(T, "agent:a", serving="person:y")
    assert "KEEP-Y-EPISODIC" in after.context and "MARKER" not in after.context
    past = perspectives.perspective_for(T, "agent:a", serving="person:x", as_of=before)
    assert "MARKER" not in past.context
    replayed = replay(noumena.log, tmp_path / "replayed.duckdb", before)
    data = replayed.path.read_bytes()
    assert b"KEEP-Y-EPISODIC" in data and b"MARKER" not in data
