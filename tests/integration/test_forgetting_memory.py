"""After a forget, the serving process drops its plaintext copies of what was forgotten: the folded state, the
perspective and search indexes, caches and the embedder's inputs. A walk of the interpreter's heap from noumena's
own objects (tests/memory_scan.py) finds none of the person's markers once the purge is done. On SQLite and
PostgreSQL, through the served API in this process (its projector, purge worker and indexes)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from domain import commands as c
from infra.bootstrap import bootstrap
from infra.settings import Settings
from tests.conftest import TickingClock, postgres_settings
from tests.memory_scan import held_by_noumena

T = "acme"
Z_MARKERS = ["qzvname9", "qzvalias9", "qzvreason9", "qzvorg9", "qzvmsg9", "qzvtask9", "qzvsummary9",
             "qzvticket9", "qzvquery9", "qzvask9", "qzvwire9"]
Y_MARKER = "kpyreason9"


def _plant(run) -> None:  # type: ignore[no-untyped-def]
    """Z's content under every kind of field, built here (the test's own constants are whole markers only)."""
    run(c.CreateTenant(tenant=T))
    for ref, label, aliases in (("person:z", "Zed qzvname9", ("Zeddy qzvalias9",)), ("person:y", "Yan", ()),
                                ("agent:a", "the assistant", ()), ("ticket:z-1", "Zed: qzvticket9 parcel", ())):
        run(c.RegisterEntity(tenant=T, ref=ref, label=label, aliases=aliases))
    run(c.StartSession(tenant=T, session_id="s-z", agent="agent:a", serving="person:z"))
    run(c.StartSession(tenant=T, session_id="s-y", agent="agent:a", serving="person:y"))
    run(c.AssertFact(tenant=T, subject="person:z", relation="prefers", object="ticket:z-1", scope="person:z",
                     reason="Zed said qzvreason9 on the phone"))
    run(c.AssertFact(tenant=T, subject="person:z", relation="opened", object="ticket:z-1", scope="org",
                     reason="the desk logged qzvorg9"))
    run(c.AssertFact(tenant=T, subject="agent:a", relation="serves", object="person:y", scope="person:y",
                     reason=f"Yan asked {Y_MARKER}"))
    run(c.AppendMessage(tenant=T, session_id="s-z", message_id="m1", role="user", content="my qzvmsg9 parcel"))
    run(c.DispatchWorker(tenant=T, session_id="s-z", worker_session_id="w-z", task="chase qzvtask9"))
    run(c.CompactSession(tenant=T, session_id="s-z", through_message_id="m1", summary="call about qzvsummary9"))


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_after_the_purge_no_object_of_noumena_holds_the_forgotten_persons_text(tmp_path: Path, store: str):
    settings = postgres_settings(tmp_path) if store == "postgres" else Settings(home=tmp_path, event_store="sqlite")
    noumena = bootstrap(settings, clock=TickingClock())
    _plant(noumena.service.execute)
    app = create_app(noumena, start_projector=True, start_kafka=False)
    try:
        with TestClient(app) as client:
            key = app.state.keys.create(T).key
            client.headers["Authorization"] = f"Bearer {key}"
            wire = client.post("/v1/events", json={"events": [{
                "event_id": "e-wire", "tenant": T, "type": "message.appended",
                "payload": {"session_id": "s-z", "message_id": "m2", "role": "user", "content": "qzvwire9 too"}}]})
            assert wire.status_code == 200, wire.text
            position = wire.json()["position"]
            served = [
                client.get("/v1/perspectives", params={"agent": "agent:a", "serving": "person:z",
                                                       "min_position": position}),
                client.post("/v1/search", json={"agent": "agent:a", "serving": "person:z",
                                                "query": "what did qzvquery9 prefer, qzvreason9?",
                                                "min_position": position}),
                client.post("/v1/sessions/s-z/context", json={"message": "qzvask9: where is my parcel?"}),
                client.get("/v1/entities/ticket:z-1", params={"min_position": position}),
                client.post("/v1/search", json={"agent": "agent:a", "serving": "person:y", "query": "asked",
                                                "min_position": position}),
                client.get("/v1/entities", params={"q": "Zeddy", "min_position": position}),
            ]
            assert [r.status_code for r in served] == [200] * 6, [r.text for r in served]
            assert served[5].json()["data"][0]["ref"] == "person:z"  # (the name index holds the label and alias)
            assert "qzvreason9" in served[0].text and Y_MARKER in served[4].text
            before = held_by_noumena(Z_MARKERS)
            assert {"qzvname9", "qzvreason9", "qzvmsg9"} <= set(before), before  # (the walk sees them)

            forgotten = client.post("/v1/forget", json={"subject": "person:z"})
            assert forgotten.status_code == 200, forgotten.text
            del served, wire, forgotten
            assert held_by_noumena(Z_MARKERS) == {}
            # nothing more is written into Z's sessions: a late session-scoped fact is refused like a message
            late = client.post("/v1/facts", json={"subject": "agent:a", "relation": "reads", "object": "ticket:z-1",
                                                  "reason": "late", "scope": "session:s-z"})
            assert late.status_code == 409 and late.json()["field"] == "scope", late.text
            assert "person:z was forgotten" in late.json()["detail"]
            # the rest is still served, from the same process
            after = client.post("/v1/search", json={"agent": "agent:a", "serving": "person:y", "query": "asked"})
            assert Y_MARKER in after.text
    finally:
        noumena.close()
