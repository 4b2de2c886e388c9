"""Entities by name over a real `noumena serve`: `GET /v1/entities?q=` ranks what a name may mean, a route taking
a ref takes an unambiguous name instead and refuses an ambiguous one (422, listing the candidates), and an
agent-scoped key never finds a person its agents do not serve."""

from __future__ import annotations

from typing import Any

import pytest

from tests.api_support import Server, Tenant, api_server  # noqa: F401

ENTITIES = [
    {"ref": "person:wang", "label": "Wang Wei", "aliases": ["王总", "王伟"]},
    {"ref": "person:wangfang", "label": "Wang Fang", "aliases": ["王芳", "Boss"]},
    {"ref": "person:li", "label": "Li Wei", "aliases": ["李总", "Boss"]},
    {"ref": "person:zhao", "label": "Zhao Min"},
    {"ref": "agent:wang-assistant", "label": "Wang's assistant"},
    {"ref": "agent:cs", "label": "Customer service", "hub": True},
]


@pytest.fixture(scope="module")
def names(api_server: Server) -> dict[str, Any]:  # noqa: F811
    tenant: Tenant = api_server.tenant("names")
    for entity in ENTITIES:
        assert tenant.client.post("/v1/entities", json=entity).status_code == 200
    written = tenant.client.post("/v1/facts", json={"subject": "agent:wang-assistant", "relation": "serves",
                                                    "object": "person:wang"}).json()
    with api_server.admin() as admin:
        scoped = admin.post("/v1/admin/keys", json={"tenant": "names", "label": "assistant",
                                                    "agents": ["agent:wang-assistant"]}).json()["key"]
    return {"tenant": tenant, "position": written["position"], "scoped": api_server.client(scoped)}


def _find(names: dict[str, Any], q: str, client: Any = None) -> dict[str, Any]:
    client = client or names["tenant"].client
    response = client.get("/v1/entities", params={"q": q, "limit": 5, "min_position": names["position"]})
    assert response.status_code == 200, response.text
    return dict(response.json())


def test_wang_comes_first_by_chinese_title_by_name_in_any_case_and_by_a_typo(names: dict[str, Any]) -> None:
    for q in ("王总", "Wang", "wang", "Wnag"):
        found = _find(names, q)
        assert found["data"][0]["ref"] == "person:wang", (q, found)
    top = _find(names, "王总")["data"][0]
    assert top == {"ref": "person:wang", "label": "Wang Wei", "kind": "person", "aliases": ["王总", "王伟"],
                   "hub": False, "score": top["score"], "match": "exact", "matched": "王总"} and 0.9 < top["score"] <= 1


def test_a_found_entity_says_whether_it_is_a_hub(names: dict[str, Any]) -> None:
    assert _find(names, "customer service")["data"][0] | {"score": 0} == {
        "ref": "agent:cs", "label": "Customer service", "kind": "agent", "aliases": [], "hub": True, "score": 0,
        "match": "exact", "matched": "Customer service"}
    assert _find(names, "Li Wei")["data"][0]["hub"] is False


def test_a_kind_keeps_the_names_of_that_kind(names: dict[str, Any]) -> None:
    agents = names["tenant"].client.get("/v1/entities", params={"q": "wang", "kind": "agent"}).json()
    assert [f["ref"] for f in agents["data"]] == ["agent:wang-assistant"] and agents["count"] == 1
    every_agent = names["tenant"].client.get("/v1/entities", params={"kind": "agent", "limit": 1}).json()
    assert every_agent["count"] == 2 and [f["ref"] for f in every_agent["data"]] == ["agent:cs"]
    second = names["tenant"].client.get("/v1/entities", params={"kind": "agent", "skip": 1}).json()
    assert [f["ref"] for f in second["data"]] == ["agent:wang-assistant"] and second["data"][0]["hub"] is False


def test_the_ranked_list_is_paged_and_counted(names: dict[str, Any]) -> None:
    everything = _find(names, "wang")
    assert everything["count"] == len(everything["data"]) >= 3
    second = names["tenant"].client.get("/v1/entities", params={"q": "wang", "skip": 1, "limit": 1}).json()
    assert second["data"] == everything["data"][1:2] and second["count"] == everything["count"]


def test_a_route_taking_a_ref_takes_an_unambiguous_name(names: dict[str, Any]) -> None:
    response = names["tenant"].client.get("/v1/perspectives", params={
        "agent": "Wang's assistant", "serving": "王总", "min_position": names["position"]})
    assert response.status_code == 200, response.text
    assert response.json()["agent"] == "agent:wang-assistant" and response.json()["serving"] == "person:wang"


def test_recall_and_search_take_names_too(names: dict[str, Any]) -> None:
    client = names["tenant"].client
    recalled = client.post("/v1/memory/recall", json={"agent": "Wang's assistant", "subject": "王总",
                                                      "min_position": names["position"]})
    assert recalled.status_code == 200, recalled.text
    assert [f["relation"] for f in recalled.json()["data"]] == ["serves"]
    searched = client.post("/v1/search", json={"agent": "Wang's assistant", "serving": "王总", "query": "serves",
                                               "about": ["Wang Wei"]})
    assert searched.status_code == 200, searched.text
    assert searched.json()["agent"] == "agent:wang-assistant" and searched.json()["about"] == ["person:wang"]
    ambiguous = client.post("/v1/search", json={"agent": "agent:wang-assistant", "query": "x", "about": ["Boss"]})
    assert ambiguous.status_code == 422 and ambiguous.json()["field"] == "body.about.0"
    assert {c["ref"] for c in ambiguous.json()["candidates"]} == {"person:wangfang", "person:li"}


def test_an_ambiguous_name_is_refused_listing_the_candidates(names: dict[str, Any]) -> None:
    response = names["tenant"].client.get("/v1/perspectives", params={
        "agent": "agent:wang-assistant", "serving": "Boss", "min_position": names["position"]})
    assert response.status_code == 422 and response.headers["content-type"].startswith("application/problem+json")
    body = response.json()
    assert body["type"].endswith("/ambiguous-name") and body["field"] == "query.serving"
    assert {c["ref"] for c in body["candidates"]} == {"person:wangfang", "person:li"}
    assert "person:li" in body["detail"] and "pass the ref" in body["detail"]
    unknown = names["tenant"].client.get("/v1/perspectives", params={"agent": "agent:wang-assistant",
                                                                     "serving": "Nobody At All"}).json()
    assert unknown["status"] == 422 and unknown["candidates"] == [] and "register" in unknown["detail"]


def test_an_agent_scoped_key_finds_the_persons_its_agents_serve_and_no_one_else(names: dict[str, Any]) -> None:
    mine = _find(names, "wang", names["scoped"])
    assert [f["ref"] for f in mine["data"]] == ["person:wang", "agent:wang-assistant"]
    assert _find(names, "Zhao", names["scoped"]) == {"data": [], "count": 0}
    assert _find(names, "Zhao")["data"][0]["ref"] == "person:zhao"  # (the tenant-wide key finds him)
    listing = names["scoped"].get("/v1/entities")
    assert listing.status_code == 403 and listing.json()["field"] == "Authorization"
