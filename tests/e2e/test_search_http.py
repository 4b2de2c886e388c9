"""Search over HTTP against a real `noumena serve`: read your writes, the wire answer, errors that name the field,
the evidence, and a fact searchable right after it is written."""

from __future__ import annotations

import time

from tests.api_support import Server, api_server, register_story  # noqa: F401


def test_a_fact_written_over_http_is_found_by_its_words_and_explained(api_server: Server) -> None:  # noqa: F811
    tenant = api_server.tenant("searcher")
    story = register_story(tenant, "zebra")
    c = tenant.client
    answer = c.post("/v1/search", json={"agent": "agent:assistant", "serving": "person:boss",
                                        "query": "how does the customer want to pay? monthly?",
                                        "min_position": story["position"]})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    top = body["items"][0]
    assert top["fact_id"] == story["facts"]["prefers"]["fact_id"]
    assert top["message_ids"] == ["m7"] and top["session_id"] == "main"
    assert set(top["scores"]) == {"lexical", "semantic", "activation", "recency", "entity", "time", "context",
                                "session"}
    assert abs(sum(top["scores"].values()) - top["score"]) < 1e-5
    explained = c.get(f"/v1/searches/{body['search_id']}/explain")
    assert explained.status_code == 200 and explained.json()["recall_held"] is True  # written by the next flush


def test_bad_search_requests_are_refused_naming_the_field(api_server: Server) -> None:  # noqa: F811
    tenant = api_server.tenant("careless")
    register_story(tenant, "yak")
    c = tenant.client
    for body, field in (({"agent": "agent:assistant", "query": ""}, "body.query"),  # refused by the schema
                        ({"agent": "agent:nobody", "query": "pay"}, "agent"),  # by the use case: no such agent
                        ({"agent": "agent:assistant", "query": "pay", "k": 0}, "body.k"),
                        ({"agent": "not a ref", "query": "pay"}, "body.agent")):
        response = c.post("/v1/search", json=body)
        assert response.status_code == 422, response.text
        assert response.json()["field"] == field, response.text
    assert c.get("/v1/searches/srch-nothing/explain").status_code == 404


def test_a_fact_is_searchable_as_soon_as_its_write_is_acknowledged(api_server: Server) -> None:  # noqa: F811
    tenant = api_server.tenant("quick")
    register_story(tenant, "quokka")
    c = tenant.client
    waits = []
    for k in range(5):
        word = f"marmalade{k}x"
        c.post("/v1/entities", json={"ref": f"memory:jam-{k}", "label": f"the customer likes {word}"})
        written = c.post("/v1/facts", json={"subject": "person:customer", "relation": "likes",
                                            "object": f"memory:jam-{k}"})
        assert written.status_code == 200, written.text
        started = time.perf_counter()
        found = c.post("/v1/search", json={"agent": "agent:assistant", "query": word,
                                           "min_position": written.json()["position"]}).json()
        waits.append(time.perf_counter() - started)
        assert found["items"][0]["object"] == f"memory:jam-{k}"
    print(f"write acknowledged -> found by search: max {max(waits) * 1000:.0f} ms")


def test_an_observers_read_of_the_current_view_records_no_use(api_server: Server) -> None:  # noqa: F811
    tenant = api_server.tenant("observed")
    story = register_story(tenant, "ocelot")
    c = tenant.client
    standpoint = {"agent": "agent:assistant", "serving": "person:boss", "min_position": story["position"]}
    observed = c.get("/v1/perspectives", params=standpoint | {"record": "false"}).json()
    assert observed["recall"] is None and observed["as_of"] is None  # the live view, not an as-of fold
    served = c.get("/v1/perspectives", params=standpoint).json()
    assert served["recall"] is not None and served["recall"]["fact_ids"]
    assert [(i["fact_id"], i["tier"]) for i in observed["items"]] == [(i["fact_id"], i["tier"])
                                                                      for i in served["items"]]
    looked = c.post("/v1/search", json={"agent": "agent:assistant", "serving": "person:boss", "query": "pay monthly",
                                        "record": False}).json()
    assert looked["items"] and looked["as_of"] is None
    evidence = c.get(f"/v1/searches/{looked['search_id']}/explain").json()
    assert evidence["recall_position"] is None and not evidence["recall_held"]
    assert c.post("/v1/search", json={"agent": "agent:assistant", "query": "pay", "record": "maybe"}
                  ).status_code == 422
