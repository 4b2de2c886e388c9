"""Agent-scoped keys on a real `noumena serve`: a key naming its agents asks only as them, only about
persons they serve (a main session or a `serves` fact), never through the tenant-wide routes; tenant-wide keys
are labelled and keep working everywhere."""

from __future__ import annotations

import httpx
import pytest

from tests.api_support import Server, Tenant, api_server  # noqa: F401


@pytest.fixture(scope="module")
def org(api_server: Server) -> dict[str, object]:  # noqa: F811
    """Agent a serves Li (a `serves` fact); agent b serves Wang (a main session); nobody serves Zhao."""
    tenant = api_server.tenant("scoped")
    c = tenant.client
    events = [{"event_id": f"e{i}", "tenant": "scoped", "type": "entity.registered",
               "payload": {"ref": ref, "label": ref.split(":")[1]}}
              for i, ref in enumerate(["agent:a", "agent:b", "person:li", "person:wang", "person:zhao",
                                       "memory:li-private", "memory:wang-private"])]
    events.append({"event_id": "s1", "tenant": "scoped", "type": "session.started",
                   "payload": {"session_id": "b-main", "agent": "agent:b", "serving": "person:wang"}})
    assert c.post("/v1/events", json={"events": events}).status_code == 200
    for body in ({"subject": "agent:a", "relation": "serves", "object": "person:li"},
                 {"subject": "person:li", "relation": "prefers", "object": "memory:li-private",
                  "reason": "li's secret", "scope": "person:li"},
                 {"subject": "person:wang", "relation": "prefers", "object": "memory:wang-private",
                  "reason": "wang's secret", "scope": "person:wang"}):
        written = c.post("/v1/facts", json=body)
        assert written.status_code == 200, written.text
    with api_server.admin() as admin:
        scoped = admin.post("/v1/admin/keys", json={"tenant": "scoped", "label": "agent a", "agents": ["agent:a"]})
        assert scoped.status_code == 200, scoped.text
        listed = admin.get("/v1/admin/keys", params={"tenant": "scoped"}).json()["data"]
        bad = admin.post("/v1/admin/keys", json={"tenant": "scoped", "agents": ["person:li"]})
    wang_view = c.get("/v1/perspectives", params={"agent": "agent:b", "serving": "person:wang",
                                                  "min_position": written.json()["position"]})
    assert wang_view.status_code == 200, wang_view.text
    return {"tenant": tenant, "scoped": api_server.client(scoped.json()["key"]), "listed": listed, "bad": bad,
            "issued": scoped.json(), "wang_perspective": wang_view.json()["perspective_id"],
            "position": written.json()["position"]}


def _refused(response: httpx.Response, field: str) -> None:
    assert response.status_code == 403, response.text
    assert response.json()["field"] == field, response.json()


def test_keys_are_labelled_tenant_wide_or_scoped_to_agents(org: dict) -> None:
    assert org["issued"]["scope"] == "agents" and org["issued"]["agents"] == ["agent:a"]
    assert {k["scope"] for k in org["listed"]} == {"tenant", "agents"}
    assert org["bad"].status_code == 422 and "agents" in org["bad"].json()["field"]


def test_a_scoped_key_sees_its_agents_view_of_the_persons_they_serve(org: dict) -> None:
    scoped: httpx.Client = org["scoped"]
    view = scoped.get("/v1/perspectives", params={"agent": "agent:a", "serving": "person:li",
                                                 "min_position": org["position"]})
    assert view.status_code == 200, view.text
    assert "li's secret" in view.text and "wang's secret" not in view.text
    assert scoped.post(f"/v1/perspectives/{view.json()['perspective_id']}/deepen").status_code == 200
    recall = scoped.post("/v1/memory/recall", json={"agent": "agent:a", "serving": "person:li",
                                                    "subject": "person:li"})
    assert recall.status_code == 200, recall.text
    search = scoped.post("/v1/search", json={"agent": "agent:a", "serving": "person:li", "query": "secret"})
    assert search.status_code == 200 and "wang's secret" not in search.text


def test_a_scoped_key_cannot_ask_as_another_agent_or_about_a_person_its_agents_do_not_serve(org: dict) -> None:
    scoped: httpx.Client = org["scoped"]
    _refused(scoped.get("/v1/perspectives", params={"agent": "agent:b", "serving": "person:wang"}), "agent")
    _refused(scoped.get("/v1/perspectives", params={"agent": "agent:a", "serving": "person:wang"}), "serving")
    _refused(scoped.get("/v1/perspectives", params={"agent": "agent:a", "serving": "person:zhao"}), "serving")
    _refused(scoped.post("/v1/search", json={"agent": "agent:b", "query": "secret"}), "agent")
    _refused(scoped.post("/v1/memory/recall", json={"agent": "agent:a", "serving": "person:wang",
                                                    "subject": "person:wang"}), "serving")
    _refused(scoped.post("/v1/memory/recall", json={"agent": "agent:a", "subject": "person:wang",
                                                    "session_id": "b-main"}), "session_id")
    _refused(scoped.post("/v1/sessions/b-main/context", json={"message": "wang"}), "agent")
    _refused(scoped.get(f"/v1/perspectives/{org['wang_perspective']}/explain"), "agent")
    _refused(scoped.post(f"/v1/perspectives/{org['wang_perspective']}/deepen"), "agent")


def test_a_scoped_key_cannot_use_tenant_wide_routes_or_widen_its_own_reach(org: dict) -> None:
    scoped: httpx.Client = org["scoped"]
    for response in (scoped.get("/v1/graph"), scoped.get("/v1/entities"), scoped.get("/v1/sessions/b-main/workers"),
                     scoped.post("/v1/forget", json={"subject": "person:wang"}),
                     scoped.post("/v1/events", json={"events": [{"event_id": "x", "tenant": "scoped",
                                                                 "type": "session.started", "payload": {
                                                                     "session_id": "a-main", "agent": "agent:a",
                                                                     "serving": "person:wang"}}]})):
        _refused(response, "Authorization")
    _refused(scoped.post("/v1/facts", json={"subject": "agent:a", "relation": "serves", "object": "person:wang"}),
             "relation")
    remembered = scoped.post("/v1/facts", json={"subject": "person:li", "relation": "knows",
                                               "object": "person:zhao", "reason": "said so"})
    assert remembered.status_code == 200, remembered.text


def test_a_tenant_wide_key_still_serves_every_agent(org: dict) -> None:
    tenant: Tenant = org["tenant"]
    for agent, person in (("agent:a", "person:li"), ("agent:b", "person:wang"), ("agent:a", "person:zhao")):
        assert tenant.client.get("/v1/perspectives", params={"agent": agent, "serving": person}).status_code == 200
    assert tenant.client.get("/v1/graph").status_code == 200
