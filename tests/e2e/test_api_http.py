"""The HTTP API over a real `noumena serve` process: writes, read-your-writes, history, perspectives, memory,
sessions, operations, and errors as RFC 9457 problems that name the field and write nothing."""

from __future__ import annotations

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.api_support import Server, Tenant, api_server, register_story  # noqa: F401

PROBLEM = "application/problem+json"


@pytest.fixture(scope="module")
def acme(api_server: Server) -> Tenant:  # noqa: F811
    return api_server.tenant("acme")


@pytest.fixture(scope="module")
def story(acme: Tenant) -> dict[str, object]:
    return register_story(acme, "s3cret")


def assert_problem(response: httpx.Response, status: int, field: str | None = None) -> dict[str, object]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM)
    body = response.json()
    assert body["status"] == status and body["type"].startswith("https://") and body["title"] and body["detail"]
    if field is not None:
        assert body["field"] == field, body
    return dict(body)


def test_a_write_returns_its_position_and_a_read_with_min_position_sees_it(acme: Tenant) -> None:
    written = acme.client.post("/v1/entities", json={"ref": "person:ryw", "label": "Read Your Writes"}).json()
    assert written["position"] > 0
    read = acme.client.get("/v1/entities/person:ryw", params={"min_position": written["position"]})
    assert read.status_code == 200 and read.json()["label"] == "Read Your Writes"


def test_a_position_beyond_the_end_of_the_log_is_invalid_input(acme: Tenant) -> None:
    body = assert_problem(acme.client.get("/v1/entities", params={"min_position": 10**12}), 422, "min_position")
    assert "beyond the end of the log" in str(body["detail"])


def test_a_fact_has_its_full_history_and_provenance(acme: Tenant, story: dict) -> None:
    fact_id = story["facts"]["prefers"]["fact_id"]
    again = acme.client.post("/v1/facts", json={"subject": "person:customer", "relation": "prefers",
                                                "object": "memory:pref", "confidence": 0.5,
                                                "source": {"actor": "agent:other"}}).json()
    assert again["change"] == "corroborated" and again["fact_id"] == fact_id
    ended = acme.client.post(f"/v1/facts/{fact_id}/invalidate", json={"reason": "now pays weekly"}).json()
    assert ended["change"] == "invalidated"
    fact = acme.client.get(f"/v1/facts/{fact_id}", params={"min_position": ended["position"]}).json()
    assert [c["change"] for c in fact["changes"]] == ["asserted", "corroborated", "invalidated"]
    assert fact["changes"][0]["session_id"] == story["session"] and fact["changes"][0]["message_ids"] == ["m7"]
    assert fact["changes"][1]["actor"] == "agent:other"
    assert fact["current"]["status"] == "invalidated" and fact["current"]["ended_reason"] == "now pays weekly"
    assert [v["status"] for v in fact["versions"]] == ["current", "current", "invalidated"]
    assert fact["versions"][0]["recorded_to"] == fact["versions"][1]["recorded_from"]


def test_invalidating_twice_is_a_conflict_that_names_the_state(acme: Tenant, story: dict) -> None:
    fact_id = story["facts"]["knows"]["fact_id"]
    assert acme.client.post(f"/v1/facts/{fact_id}/invalidate", json={"reason": "no"}).status_code == 200
    body = assert_problem(acme.client.post(f"/v1/facts/{fact_id}/invalidate", json={"reason": "no"}), 409,
                          "fact_id")
    assert "invalidated" in str(body["detail"])


def test_the_graph_as_believed_at_a_moment_is_paged(api_server: Server, acme: Tenant,  # noqa: F811
                                                    story: dict) -> None:
    with api_server.client() as anonymous:  # every page read at the log's end (earlier tests wrote after the story)
        end = anonymous.get("/readyz").json()["log_position"]
    assert end >= story["position"]

    def page(**params: int) -> dict:
        return dict(acme.client.get("/v1/graph", params={"min_position": end, **params}).json())

    everything = page(limit=1000)["data"]
    assert len(everything) >= 2 and [f["fact_id"] for f in everything] == sorted(f["fact_id"] for f in everything)
    first, second = page(limit=1), page(skip=1, limit=1)
    assert first["count"] == second["count"] == len(everything)
    assert first["data"] + second["data"] == everything[:2]  # consecutive slices in fact-id order
    before = acme.client.get("/v1/graph", params={"recorded_at": "2000-01-01T00:00:00Z"}).json()
    assert before == {"recorded_at": "2000-01-01T00:00:00Z", "valid_at": None, "data": [], "count": 0}


def test_entities_are_found_by_label_and_alias(acme: Tenant) -> None:
    written = acme.client.post("/v1/entities", json={"ref": "person:li", "label": "Li Wei",
                                                     "aliases": ["李总", "Mr. Li"]}).json()
    found = acme.client.get("/v1/entities", params={"q": "李总", "min_position": written["position"]}).json()
    assert [e["ref"] for e in found["data"]] == ["person:li"]
    assert acme.client.get("/v1/entities", params={"q": "mr. li"}).json()["data"][0]["label"] == "Li Wei"


def test_entities_of_one_kind_are_listed_without_a_name(acme: Tenant) -> None:
    acme.client.post("/v1/entities", json={"ref": "agent:lister", "label": "the listing agent"})
    written = acme.client.post("/v1/entities", json={"ref": "memory:note", "label": "a note naming agent:lister"})
    agents = acme.client.get("/v1/entities", params={"kind": "agent", "min_position": written.json()["position"]})
    assert agents.status_code == 200, agents.text
    refs = [e["ref"] for e in agents.json()["data"]]
    assert "agent:lister" in refs and all(ref.startswith("agent:") for ref in refs)  # not the note naming one
    assert_problem(acme.client.get("/v1/entities", params={"kind": "Agent!"}), 422, "query.kind")


def test_a_perspective_in_json_and_markdown_then_deeper_then_explained(acme: Tenant, story: dict) -> None:
    owns = acme.client.post("/v1/facts", json={"subject": "person:boss", "relation": "owns",
                                                "object": "file:contract-v3", "reason": "signed it"}).json()
    params = {"agent": "agent:assistant", "serving": "person:boss", "min_position": owns["position"]}
    served = acme.client.get("/v1/perspectives", params=params)
    assert served.status_code == 200, served.text
    body = served.json()
    assert body["items"] and {"full", "gist", "marker", "count", "forgotten"} <= set(body["counts"])
    assert all({"tier", "fact_id", "activation", "hops"} <= set(item) for item in body["items"])
    markdown = acme.client.get("/v1/perspectives", params=params | {"format": "markdown", "budget_tokens": 200})
    assert markdown.headers["content-type"].startswith("text/markdown") and markdown.text.startswith("# ")
    deeper = acme.client.post(f"/v1/perspectives/{body['perspective_id']}/deepen").json()
    assert deeper["deeper"] is True and deeper["perspective_id"] != body["perspective_id"]
    explained = acme.client.get(f"/v1/perspectives/{body['perspective_id']}/explain").json()
    assert explained["inputs"]["agent"] == "agent:assistant" and explained["parameters"]["depth"] == 3
    assert [i["fact_id"] for i in explained["outputs"]["items"]] == [i["fact_id"] for i in body["items"]]


def test_an_unknown_agent_is_invalid_input_naming_the_field(acme: Tenant) -> None:
    assert_problem(acme.client.get("/v1/perspectives", params={"agent": "agent:nobody"}), 422, "agent")
    assert_problem(acme.client.get("/v1/perspectives", params={"agent": "not a ref"}), 422, "query.agent")


def test_marking_facts_used_and_recalling_by_tier(acme: Tenant, story: dict) -> None:
    contract = story["facts"]["contract"]["fact_id"]
    used = acme.client.post("/v1/memory/used", json={"agent": "agent:assistant", "fact_ids": [contract]})
    assert used.status_code == 200 and used.json()["position"] > 0
    assert_problem(acme.client.post("/v1/memory/used", json={"agent": "agent:assistant", "fact_ids": ["nope"]}),
                   422, "fact_ids[0]")
    episodic = acme.client.post("/v1/memory/recall", json={"agent": "agent:assistant", "serving": "person:boss",
                                                           "subject": "person:customer"}).json()
    assert episodic["answered_by"] == "episodic"
    assert episodic["tiers_checked"] == ["session", "episodic", "semantic"]
    assert [f["fact_id"] for f in episodic["data"]] == [contract] and episodic["position"] > used.json()["position"]
    # (earlier tests of the module invalidate the story's org facts about the customer: this one is its own)
    org_fact = acme.client.post("/v1/facts", json={"subject": "person:customer", "relation": "knows",
                                                   "object": "person:boss", "reason": "met at the fair"}).json()
    semantic = acme.client.post("/v1/memory/recall", json={"agent": "agent:assistant", "subject": "person:customer",
                                                           "min_position": org_fact["position"]}).json()
    assert semantic["answered_by"] == "semantic" and {f["scope"] for f in semantic["data"]} == {"org"}
    assert org_fact["fact_id"] in {f["fact_id"] for f in semantic["data"]}
    assert contract not in {f["fact_id"] for f in semantic["data"]}  # episodic facts need the person served
    assert_problem(acme.client.post("/v1/memory/recall", json={"agent": "agent:assistant", "subject": "person:nope"}),
                   422, "subject")


def test_the_workers_of_a_main_session(acme: Tenant, story: dict) -> None:
    workers = acme.client.get(f"/v1/sessions/{story['session']}/workers",
                              params={"min_position": story["position"]}).json()
    assert workers["session"]["kind"] == "main" and workers["count"] == 1
    assert workers["data"][0]["task"] == "draft quote s3cret" and workers["data"][0]["about"] == ["person:customer"]


def test_forgetting_a_person_erases_their_content_from_every_read(acme: Tenant) -> None:
    c = acme.client
    c.post("/v1/entities", json={"ref": "person:zhao", "label": "Zhao Unique-Name"})
    c.post("/v1/entities", json={"ref": "agent:forgetful", "label": "forgetful agent"})
    fact = c.post("/v1/facts", json={"subject": "agent:forgetful", "relation": "serves", "object": "person:zhao",
                                     "reason": "Zhao's private reason", "scope": "person:zhao"}).json()
    seen = c.get("/v1/perspectives", params={"agent": "agent:forgetful", "serving": "person:zhao",
                                             "min_position": fact["position"]}).text
    assert "serving Zhao Unique-Name" in seen  # the label the forget must then erase (the header shows it)
    found = c.get("/v1/entities", params={"q": "Unique-Name", "min_position": fact["position"]}).json()
    assert found["data"][0]["ref"] == "person:zhao"  # (the name index holds the label the forget must drop)
    forgotten = c.post("/v1/forget", json={"subject": "person:zhao"})
    assert forgotten.status_code == 200, forgotten.text
    receipt = forgotten.json()
    assert receipt["keys_deleted"] >= 1 and receipt["receipt_id"].startswith("fgt-")
    assert receipt["events_affected"] >= 2 and receipt["forgotten_at"] is not None
    assert any(line.startswith("evidence: ") for line in receipt["files_rewritten"])
    position = forgotten.json()["position"]
    # writes about the forgotten person answer 409 naming them, until they are registered anew
    refused = c.post("/v1/facts", json={"subject": "agent:forgetful", "relation": "serves", "object": "person:zhao",
                                        "reason": "again", "scope": "org"})
    assert_problem(refused, 409, "object")
    assert "person:zhao was forgotten" in refused.text and receipt["receipt_id"] in refused.text
    assert c.get("/v1/entities/person:zhao", params={"min_position": position}).json()["label"] == "[forgotten]"
    again = c.post("/v1/entities", json={"ref": "person:zhao", "label": "Zhao, registered anew"})
    assert again.status_code == 200, again.text
    accepted = c.post("/v1/facts", json={"subject": "agent:forgetful", "relation": "serves", "object": "person:zhao",
                                         "reason": "again", "scope": "org"})
    assert accepted.status_code == 200, accepted.text
    anew = c.get("/v1/entities/person:zhao", params={"min_position": again.json()["position"]}).json()
    assert anew["label"] == "Zhao, registered anew"
    history = c.get(f"/v1/facts/{fact['fact_id']}").json()
    assert history["current"]["reason"] == "[forgotten]" and history["changes"][0]["reason"] == "[forgotten]"
    for response in (c.get("/v1/entities", params={"q": "unique-name"}), c.get("/v1/graph", params={"limit": 1000}),
                     c.get("/v1/perspectives", params={"agent": "agent:forgetful", "serving": "person:zhao"}),
                     c.post("/v1/memory/recall", json={"agent": "agent:forgetful", "serving": "person:zhao",
                                                       "subject": "person:zhao"})):
        assert response.status_code == 200, response.text
        assert "Unique-Name" not in response.text and "private reason" not in response.text
    assert_problem(c.post("/v1/forget", json={"subject": "person:never-was"}), 422)
    assert_problem(c.post("/v1/forget", json={"subject": "team:x"}), 422, "body.subject")


def test_a_batch_with_one_bad_envelope_writes_nothing_and_names_the_field(acme: Tenant) -> None:
    events = [{"event_id": "b1", "tenant": "acme", "type": "entity.registered",
               "payload": {"ref": "person:batch", "label": "Batch"}},
              {"event_id": "b2", "tenant": "acme", "type": "fact.asserted",
               "payload": {"subject": "person:batch", "relation": "knows", "object": "person:boss",
                           "confidence": 7}}]
    body = assert_problem(acme.client.post("/v1/events", json={"events": events}), 422,
                          "events[1].payload.confidence")
    assert body["errors"][0]["index"] == 1
    assert_problem(acme.client.get("/v1/entities/person:batch"), 404, "path.ref")


def test_an_envelope_for_another_tenant_is_forbidden(acme: Tenant) -> None:
    events = [{"event_id": "x1", "tenant": "other", "type": "entity.registered",
               "payload": {"ref": "person:x", "label": "X"}}]
    assert_problem(acme.client.post("/v1/events", json={"events": events}), 403, "events[0].tenant")


@pytest.mark.parametrize(("body", "field"), [
    ({"subject": "person:boss", "relation": "knows", "object": "person:nope"}, "object"),
    ({"subject": "person:boss", "relation": "Knows", "object": "person:customer"}, "body.relation"),
    ({"subject": "person:boss", "relation": "knows", "object": "person:customer", "confidence": -1},
     "body.confidence"),
    ({"subject": "person:boss", "relation": "knows", "object": "person:customer",
      "valid_from": "2026-01-01T00:00:00"}, "body.valid_from"),
    ({"subject": "person:boss", "relation": "knows", "object": "person:customer", "scope": "team:x"}, "body.scope"),
    ({"subject": "person:boss", "relation": "knows"}, "body.object"),
])
def test_bad_facts_are_4xx_naming_the_field(acme: Tenant, story: dict, body: dict, field: str) -> None:
    assert_problem(acme.client.post("/v1/facts", json=body), 422, field)


def test_no_key_or_a_wrong_key_is_401_and_a_tenant_key_on_an_admin_route_is_401_too(
        api_server: Server, acme: Tenant) -> None:  # noqa: F811
    with api_server.client() as anonymous:
        assert_problem(anonymous.get("/v1/entities"), 401, "Authorization")
    with api_server.client("nk_000000000000_forged") as forged:
        assert_problem(forged.get("/v1/entities"), 401, "Authorization")
    assert_problem(acme.client.post("/v1/admin/tenants", json={"tenant": "evil"}), 401, "Authorization")


def test_keys_are_stored_hashed_and_a_revoked_key_stops_working(api_server: Server) -> None:  # noqa: F811
    tenant = api_server.tenant("revocable")
    stored = (api_server.home / "api_keys.json").read_text()
    assert tenant.key not in stored and tenant.key.split("_", 2)[2] not in stored
    assert tenant.client.get("/v1/entities").status_code == 200
    key_id = tenant.key.split("_")[1]
    with api_server.admin() as admin:
        assert admin.get("/v1/admin/keys", params={"tenant": "revocable"}).json()["count"] == 1
        assert admin.delete(f"/v1/admin/keys/{key_id}").status_code == 200
        assert_problem(admin.delete(f"/v1/admin/keys/{key_id}"), 404)
        assert_problem(admin.post("/v1/admin/keys", json={"tenant": "ghost"}), 404, "body.tenant")
        assert_problem(admin.post("/v1/admin/tenants", json={"tenant": "revocable"}), 409, "tenant")
    assert_problem(tenant.client.get("/v1/entities"), 401)


def test_health_readiness_with_projection_lag_and_metrics(api_server: Server, acme: Tenant,  # noqa: F811
                                                        story: dict) -> None:
    with api_server.client() as anonymous:
        assert anonymous.get("/healthz").json() == {"status": "ok"}
        end = anonymous.get("/readyz").json()["log_position"]
        assert end >= story["position"]
        acme.client.get("/v1/entities", params={"min_position": end})  # the projector reaches the end; no writes
        ready = anonymous.get("/readyz").json()
        assert ready["status"] == "ready" and ready["projector"] == "running"
        assert (ready["log_position"], ready["projection_position"], ready["projection_lag"]) == (end, end, 0)
        metrics = anonymous.get("/metrics").text
    assert 'noumena_http_requests_total{method="POST",route="/v1/facts",status="200"}' in metrics
    assert "noumena_projection_lag " in metrics and "noumena_http_request_seconds_bucket" in metrics
    # one registry, in a format Prometheus parses: the API's, the event log's and (when it runs here) Kafka's
    families = {family.name for family in text_string_to_metric_families(metrics)}
    assert {"noumena_http_requests", "noumena_http_request_seconds", "noumena_log_position",
            "noumena_corrupted_events"} <= families


def test_the_openapi_document_has_every_route_with_examples(api_server: Server) -> None:  # noqa: F811
    with api_server.client() as anonymous:
        document = anonymous.get("/v1/openapi.json").json()
    paths = set(document["paths"])
    assert {"/v1/events", "/v1/entities", "/v1/entities/{ref}", "/v1/facts", "/v1/facts/{fact_id}",
            "/v1/facts/{fact_id}/invalidate", "/v1/graph", "/v1/perspectives",
            "/v1/perspectives/{perspective_id}/deepen", "/v1/perspectives/{perspective_id}/explain",
            "/v1/memory/used", "/v1/memory/recall", "/v1/sessions/{session_id}/workers", "/v1/forget",
            "/v1/admin/tenants", "/v1/admin/keys", "/healthz", "/readyz", "/metrics"} <= paths
    schemas = document["components"]["schemas"]
    assert all("examples" in schemas[name] for name in ("FactCreate", "EntityCreate", "EventsCreate", "RecallCreate"))
