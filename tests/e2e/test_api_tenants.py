"""Two tenants on one server try to read each other's data through every route: zero leaks.

Each tenant's story has the same refs (person:boss, agent:assistant, ...) but labels, reasons, tasks and session
ids carrying its own secret word, so any leak shows up as the other tenant's secret in a response. The test
also checks it exercised every /v1 route in the OpenAPI document, so a new route cannot skip it.
"""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest

from tests.api_support import Server, Tenant, api_server, register_story  # noqa: F401

SECRETS = {"alpha": "alpha-secret", "bravo": "bravo-secret"}


@pytest.fixture(scope="module")
def tenants(api_server: Server) -> dict[str, tuple[Tenant, dict]]:  # noqa: F811
    made = {}
    for name, secret in SECRETS.items():
        tenant = api_server.tenant(name)
        story = register_story(tenant, secret)
        served = tenant.client.get("/v1/perspectives", params={"agent": "agent:assistant", "serving": "person:boss",
                                                               "min_position": story["position"]})
        assert served.status_code == 200, served.text
        story["perspective_id"] = served.json()["perspective_id"]
        context = tenant.client.post("/v1/sessions/main/context", json={"message": f"quote for {secret}"})
        assert context.status_code == 200, context.text
        story["context_id"] = context.json()["context_id"]
        search = tenant.client.post("/v1/search", json={"agent": "agent:assistant", "serving": "person:boss",
                                                        "query": f"quote {secret}"})
        assert search.status_code == 200, search.text
        story["search_id"] = search.json()["search_id"]
        made[name] = (tenant, story)
    return made


@pytest.mark.parametrize(("me", "other"), [("alpha", "bravo"), ("bravo", "alpha")])
def test_no_route_shows_one_tenant_anything_of_another(api_server: Server, tenants: dict, me: str,  # noqa: F811
                                                       other: str) -> None:
    mine, my_story = tenants[me]
    theirs, their_story = tenants[other]
    secret = SECRETS[other]
    their_fact = their_story["facts"]["prefers"]["fact_id"]
    their_perspective = their_story["perspective_id"]
    c = mine.client
    exercised: set[tuple[str, str]] = set()

    def call(method: str, template: str, expected: set[int], request: Callable[[], httpx.Response]) -> None:
        response = request()
        exercised.add((method, template))
        assert response.status_code in expected, (template, response.status_code, response.text)
        assert secret not in response.text, (template, response.text)

    wait = {"min_position": max(my_story["position"], their_story["position"])}
    call("post", "/v1/events", {403}, lambda: c.post("/v1/events", json={"events": [
        {"event_id": "leak-1", "tenant": other, "type": "entity.registered",
         "payload": {"ref": "person:boss", "label": "overwritten"}}]}))
    call("post", "/v1/entities", {200}, lambda: c.post("/v1/entities", json={"ref": f"person:only-{me}", "label": "m"}))
    call("get", "/v1/entities", {200}, lambda: c.get("/v1/entities", params={"q": secret, **wait}))
    call("get", "/v1/entities", {200}, lambda: c.get("/v1/entities", params={"limit": 1000}))
    call("get", "/v1/entities/{ref}", {200}, lambda: c.get("/v1/entities/person:boss"))
    call("post", "/v1/facts", {422}, lambda: c.post("/v1/facts", json={
        "subject": "person:boss", "relation": "knows", "object": "person:only-there"}))
    call("get", "/v1/facts/{fact_id}", {404}, lambda: c.get(f"/v1/facts/{their_fact}", params=wait))
    call("post", "/v1/facts/{fact_id}/invalidate", {404},
         lambda: c.post(f"/v1/facts/{their_fact}/invalidate", json={"reason": "sabotage"}))
    call("get", "/v1/graph", {200}, lambda: c.get("/v1/graph", params={"limit": 1000, **wait}))
    call("get", "/v1/perspectives", {200}, lambda: c.get("/v1/perspectives", params={
        "agent": "agent:assistant", "serving": "person:boss", "focus": ["person:customer"], "budget_tokens": 5000}))
    call("get", "/v1/perspectives", {200}, lambda: c.get("/v1/perspectives", params={
        "agent": "agent:assistant", "format": "markdown"}))
    call("post", "/v1/perspectives/{perspective_id}/deepen", {404},
         lambda: c.post(f"/v1/perspectives/{their_perspective}/deepen"))
    call("get", "/v1/perspectives/{perspective_id}/explain", {404},
         lambda: c.get(f"/v1/perspectives/{their_perspective}/explain"))
    call("post", "/v1/memory/used", {422}, lambda: c.post("/v1/memory/used", json={
        "agent": "agent:assistant", "fact_ids": [their_fact]}))
    call("post", "/v1/memory/recall", {200}, lambda: c.post("/v1/memory/recall", json={
        "agent": "agent:assistant", "serving": "person:boss", "subject": "person:boss"}))
    call("post", "/v1/memory/recall", {200}, lambda: c.post("/v1/memory/recall", json={
        "agent": "agent:assistant", "serving": "person:boss", "subject": "person:customer", "deeper": True}))
    call("get", "/v1/sessions/{session_id}/workers", {200},
         lambda: c.get(f"/v1/sessions/{their_story['session']}/workers", params=wait))
    call("post", "/v1/sessions/{session_id}/context", {200},
         lambda: c.post("/v1/sessions/main/context", json={"message": "the customer and the contract"}))
    call("get", "/v1/contexts/{context_id}/explain", {404},
         lambda: c.get(f"/v1/contexts/{their_story['context_id']}/explain"))
    call("post", "/v1/search", {200}, lambda: c.post("/v1/search", json={
        "agent": "agent:assistant", "serving": "person:boss",
        "query": secret.replace("-", " ") + " quote contract customer"}))
    call("get", "/v1/searches/{search_id}/explain", {404},
         lambda: c.get(f"/v1/searches/{their_story['search_id']}/explain"))
    call("post", "/v1/forget", {404}, lambda: c.post("/v1/forget", json={"subject": f"fact:{their_fact}"}))
    for method, path in (("post", "/v1/admin/tenants"), ("post", "/v1/admin/keys"), ("get", "/v1/admin/keys"),
                         ("delete", "/v1/admin/keys/{key_id}")):
        target = path.replace("{key_id}", theirs.key.split("_")[1])
        body = {"tenant": other} if method == "post" else None
        call(method, path, {401}, lambda m=method, t=target, b=body: c.request(m.upper(), t, json=b))

    # The other tenant's data is untouched by everything above.
    fact = theirs.client.get(f"/v1/facts/{their_fact}").json()
    assert fact["current"]["status"] == "current" and len(fact["changes"]) == 1
    assert theirs.client.get("/v1/entities/person:boss").json()["label"] == f"boss {secret}"
    assert theirs.client.get(f"/v1/entities/person:only-{me}").status_code == 404

    with api_server.client() as anonymous:
        document = anonymous.get("/v1/openapi.json").json()
    routes = {(method, path) for path, item in document["paths"].items() if path.startswith("/v1/")
              for method in item}
    assert routes - exercised == set(), "routes without a tenant-isolation check"
