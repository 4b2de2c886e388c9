"""Agent-scoped keys hold for writes, on a real `noumena serve` and the MCP server over stdio: a key scoped to
agent:sales writes only as its agents, into memory they see. Every write route and tool is tried with the
key's own agent, person, session and messages (accepted) and with another agent, another agent's session, a
person it does not serve, a hub and another session's messages (each a 403 naming the field); nothing refused
shows in another agent's perspective."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from domain.commands import CreateTenant
from infra.adapters.api_keys import ApiKeyStore
from infra.bootstrap import bootstrap
from infra.settings import Settings
from tests.api_support import ROOT, Server, Tenant, api_server  # noqa: F401

T = "authz"
SECRET = "4242"
"""A word only agent:other's private message holds."""


def org_events(tenant: str) -> list[dict[str, Any]]:
    """agent:sales serves person:c1 (main session sales-c1); agent:other serves person:c3 (main session other-c3,
    whose message om1 holds SECRET, as does memory:c3-door, remembered in Cao's scope); agent:hub and team:all are
    hubs; ticket:t1 is a plain thing; memory:unlinked a statement no fact touches yet."""
    entities = [("agent:sales", "Sales", False), ("agent:other", "Other", False), ("agent:hub", "Hub", True),
                ("team:all", "Everyone", True), ("person:c1", "Chen", False), ("person:c3", "Cao", False),
                ("ticket:t1", "Ticket one", False), ("memory:c3-door", f"Cao's door code is {SECRET}", False),
                ("memory:unlinked", "A statement nobody remembered yet", False)]
    events: list[dict[str, Any]] = [{"event_id": f"e-{ref}", "tenant": tenant, "type": "entity.registered",
                                     "payload": {"ref": ref, "label": label, "hub": hub}}
                                    for ref, label, hub in entities]
    for session, agent, person in (("sales-c1", "agent:sales", "person:c1"), ("other-c3", "agent:other",
                                                                               "person:c3")):
        events.append({"event_id": f"s-{session}", "tenant": tenant, "type": "session.started",
                       "payload": {"session_id": session, "agent": agent, "serving": person}})
    events += [{"event_id": "m-m1", "tenant": tenant, "type": "message.appended",
                "payload": {"session_id": "sales-c1", "message_id": "m1", "role": "user",
                            "content": "Chen asks about ticket one"}},
               {"event_id": "m-om1", "tenant": tenant, "type": "message.appended",
                "payload": {"session_id": "other-c3", "message_id": "om1", "role": "user",
                            "content": f"Cao's door code is {SECRET}"}}]
    return events


OWN = {"subject": "person:c1", "relation": "mentioned", "object": "ticket:t1", "scope": "person:c1",
       "source": {"session_id": "sales-c1", "message_ids": ["m1"], "actor": "agent:sales"}}
"""A fact the scoped key may write: about a person its agent serves, in that person's memory, citing its own
session's message, extracted by its own agent."""

ACCEPTED: dict[str, dict[str, Any]] = {
    "own person, scope, session, message, actor": {},
    "own agent as subject": {"subject": "agent:sales"},
    "org scope": {"scope": "org"},
    "own session scope": {"scope": "session:sales-c1"},
    "own message without a session": {"relation": "quoted", "source": {"message_ids": ["m1"]}},
    "a plain thing as subject": {"subject": "ticket:t1", "object": "person:c1"},
    "another agent as object": {"subject": "person:c1", "relation": "asked_for", "object": "agent:other"},
    "a memory no fact touches yet": {"object": "memory:unlinked"},
}
REFUSED: dict[str, tuple[dict[str, Any], str]] = {
    "other agent as subject": ({"subject": "agent:other"}, "subject"),
    "hub agent as subject": ({"subject": "agent:hub"}, "subject"),
    "hub thing as subject": ({"subject": "team:all"}, "subject"),
    "unserved person as subject": ({"subject": "person:c3"}, "subject"),
    "unserved person's scope": ({"scope": "person:c3"}, "scope"),
    "other agent's session scope": ({"scope": "session:other-c3"}, "scope"),
    "unknown session scope": ({"scope": "session:nobody"}, "scope"),
    "other agent as actor": ({"source": {"actor": "agent:other"}}, "source.actor"),
    "someone else as actor": ({"source": {"actor": "an extractor"}}, "source.actor"),
    "other agent's session": ({"source": {"session_id": "other-c3"}}, "source.session_id"),
    "foreign message in own session": ({"source": {"session_id": "sales-c1", "message_ids": ["om1"]}},
                                       "source.message_ids[0]"),
    "foreign message without a session": ({"source": {"message_ids": ["m1", "om1"]}}, "source.message_ids[1]"),
    "a serves fact": ({"subject": "agent:sales", "relation": "serves", "object": "person:c3"}, "relation"),
    "another person's memory as object": ({"object": "memory:c3-door"}, "object"),
    "another person's memory as subject": ({"subject": "memory:c3-door"}, "subject"),
}


def fact(case: str, change: dict[str, Any]) -> dict[str, Any]:
    return OWN | change | {"reason": f"INJECTED {case}"}


@pytest.fixture(scope="module")
def org(api_server: Server) -> dict[str, Any]:  # noqa: F811
    tenant = api_server.tenant(T)
    c = tenant.client
    assert (w := c.post("/v1/events", json={"events": org_events(T)})).status_code == 200, w.text
    private = c.post("/v1/facts", json={"subject": "person:c3", "relation": "owns", "object": "ticket:t1",
                                        "scope": "person:c3", "reason": "Cao's private ticket"})
    assert private.status_code == 200, private.text
    door = c.post("/v1/facts", json={"subject": "person:c3", "relation": "told", "object": "memory:c3-door",
                                     "scope": "person:c3"})
    assert door.status_code == 200, door.text
    with api_server.admin() as admin:
        issued = admin.post("/v1/admin/keys", json={"tenant": T, "label": "sales", "agents": ["agent:sales"]})
        assert issued.status_code == 200, issued.text
    return {"tenant": tenant, "scoped": api_server.client(issued.json()["key"]),
            "private_fact": private.json()["fact_id"]}


def _refused(response: httpx.Response, field: str) -> None:
    assert response.status_code == 403, response.text
    body = response.json()
    assert response.headers["content-type"].startswith("application/problem+json")
    assert body["field"] == field, body


@pytest.mark.parametrize("case", list(ACCEPTED))
def test_a_scoped_key_writes_facts_as_its_own_agent(org: dict[str, Any], case: str) -> None:
    written = org["scoped"].post("/v1/facts", json=fact(case, ACCEPTED[case]))
    assert written.status_code == 200, written.text


@pytest.mark.parametrize("case", list(REFUSED))
def test_a_scoped_key_cannot_write_as_another_or_into_memory_it_does_not_see(org: dict[str, Any], case: str
                                                                            ) -> None:
    change, field = REFUSED[case]
    _refused(org["scoped"].post("/v1/facts", json=fact(case, change)), field)


def test_every_other_write_route_takes_only_the_keys_own_agent_person_and_session(org: dict[str, Any]) -> None:
    scoped: httpx.Client = org["scoped"]
    own = scoped.post("/v1/facts", json=fact("for use", {}))
    assert own.status_code == 200, own.text
    own_fact = own.json()["fact_id"]
    used = {"agent": "agent:sales", "fact_ids": [own_fact]}
    assert scoped.post("/v1/memory/used", json=used).status_code == 200
    _refused(scoped.post("/v1/memory/used", json=used | {"agent": "agent:other"}), "agent")
    _refused(scoped.post("/v1/memory/used", json=used | {"fact_ids": [own_fact, org["private_fact"]]}),
             "fact_ids[1]")
    asks = {"/v1/memory/recall": {"agent": "agent:sales", "subject": "person:c1"},
            "/v1/search": {"agent": "agent:sales", "query": "ticket"}}
    for path, body in asks.items():
        assert (ok := scoped.post(path, json=body | {"serving": "person:c1", "session_id": "sales-c1"})
                ).status_code == 200, ok.text
        _refused(scoped.post(path, json=body | {"agent": "agent:other"}), "agent")
        _refused(scoped.post(path, json=body | {"agent": "agent:hub"}), "agent")
        _refused(scoped.post(path, json=body | {"serving": "person:c3"}), "serving")
        _refused(scoped.post(path, json=body | {"session_id": "other-c3"}), "session_id")
    assert scoped.post("/v1/sessions/sales-c1/context", json={"message": "hi"}).status_code == 200
    _refused(scoped.post("/v1/sessions/other-c3/context", json={"message": "hi"}), "agent")
    view = scoped.get("/v1/perspectives", params={"agent": "agent:sales", "serving": "person:c1"})
    assert view.status_code == 200, view.text
    _refused(scoped.get("/v1/perspectives", params={"agent": "agent:other"}), "agent")
    _refused(scoped.get("/v1/perspectives", params={"agent": "agent:sales", "serving": "person:c3"}), "serving")
    other_view = org["tenant"].client.get("/v1/perspectives", params={"agent": "agent:other", "serving": "person:c3"})
    _refused(scoped.post(f"/v1/perspectives/{other_view.json()['perspective_id']}/deepen"), "agent")
    tenant_wide = {"/v1/events": {"events": org_events(T)[:1]},
                   "/v1/entities": {"ref": "person:new", "label": "New"},
                   f"/v1/facts/{org['private_fact']}/invalidate": {"reason": "gone"},
                   "/v1/forget": {"subject": "person:c3"}}
    for path, body in tenant_wide.items():
        _refused(scoped.post(path, json=body), "Authorization")


def test_nothing_a_scoped_key_was_refused_shows_in_another_agents_perspective(org: dict[str, Any]) -> None:
    for case, (change, _) in REFUSED.items():
        org["scoped"].post("/v1/facts", json=fact(case, change))
    for case, change in ACCEPTED.items():  # (written here too: the test must not depend on another having run)
        written = org["scoped"].post("/v1/facts", json=fact(case, change))
        assert written.status_code == 200, written.text
    position = org["tenant"].client.post("/v1/facts", json={"subject": "agent:other", "relation": "knows",
                                                            "object": "ticket:t1"}).json()["position"]
    for agent, person in (("agent:other", "person:c3"), ("agent:hub", None), ("agent:other", None)):
        params = {"agent": agent, "min_position": position, "format": "markdown"} | (
            {"serving": person} if person else {})
        view = org["tenant"].client.get("/v1/perspectives", params=params)
        assert view.status_code == 200, view.text
        assert not any(f"INJECTED {case}" in view.text for case in REFUSED), view.text
    own_view = org["scoped"].get("/v1/perspectives", params={"agent": "agent:sales", "serving": "person:c1",
                                                             "min_position": position, "format": "markdown"})
    assert own_view.status_code == 200 and SECRET not in own_view.text, own_view.text
    graph = org["tenant"].client.get("/v1/graph", params={"limit": 1000, "min_position": position}).json()["data"]
    reasons = {row["reason"] for row in graph}
    assert not reasons & {f"INJECTED {case}" for case in REFUSED}
    assert {f"INJECTED {case}" for case in ACCEPTED} <= reasons


def test_a_search_never_confirms_the_words_of_a_message_the_searcher_may_not_read(org: dict[str, Any]) -> None:
    """A tenant-wide writer cites agent:other's message om1 from facts in three scopes: its words enter only the
    document of the fact scoped to the person that session serves, so agent:sales finds nothing by them (a guess
    is neither confirmed nor refuted) and agent:other, serving Cao, finds its own."""
    c = org["tenant"].client
    cited = {"session_id": "other-c3", "message_ids": ["om1"]}
    written = {}
    for scope, subject in (("person:c1", "person:c1"), ("org", "ticket:t1"), ("person:c3", "person:c3")):
        response = c.post("/v1/facts", json={"subject": subject, "relation": "cites", "object": "ticket:t1",
                                             "scope": scope, "source": cited})
        assert response.status_code == 200, response.text
        written[scope] = response.json()
    position = written["person:c3"]["position"]

    def lexical(client: httpx.Client, agent: str, serving: str, query: str) -> set[str]:
        found = client.post("/v1/search", json={"agent": agent, "serving": serving, "query": query, "k": 100,
                                                "min_position": position})
        assert found.status_code == 200, found.text
        return {item["fact_id"] or item["message_id"] for item in found.json()["items"]
                if item["scores"]["lexical"] > 0}

    assert lexical(org["scoped"], "agent:sales", "person:c1", SECRET) == set()
    assert lexical(org["scoped"], "agent:sales", "person:c1", "door code") == set()
    found_by_other = lexical(c, "agent:other", "person:c3", SECRET)
    assert written["person:c3"]["fact_id"] in found_by_other
    assert not found_by_other & {written["person:c1"]["fact_id"], written["org"]["fact_id"]}
    assert "om1" in found_by_other  # its own turn: a turn is visible exactly as its session is


# ---------------------------------------------------------------------------------------------------- MCP


@pytest.fixture(scope="module")
def mcp_org(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    """The same organization in a home of its own (the MCP server folds the log in its own process)."""
    settings = Settings(home=tmp_path_factory.mktemp("mcp") / "home", event_store="sqlite")
    noumena = bootstrap(settings)
    try:
        noumena.service.execute(CreateTenant(tenant=T))
        noumena.application.facts.ingest(T, org_events(T))
        noumena.application.facts.assert_fact(T, subject="person:c3", relation="owns", object="ticket:t1",
                                              scope="person:c3", reason="Cao's private ticket")
        noumena.application.facts.assert_fact(T, subject="person:c3", relation="told", object="memory:c3-door",
                                              scope="person:c3")
        others = noumena.application.reading.perspective(T, "agent:other", "person:c3").perspective_id
        key = ApiKeyStore(settings.api_keys_path()).create(T, "sales", ("agent:sales",)).key
    finally:
        noumena.close()
    return settings.home, key, others


def _tool_args(body: dict[str, Any]) -> dict[str, Any]:
    """A POST /v1/facts body as `remember`'s arguments (provenance flattened)."""
    args = {k: v for k, v in body.items() if k != "source"}
    return args | {k: v for k, v in (body.get("source") or {}).items()}


async def _scoped_tools(home: Path, key: str, others_perspective: str) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NOUMENA_")}
    env |= {"NOUMENA_HOME": str(home), "NOUMENA_EVENT_STORE": "sqlite", "NOUMENA_API_KEY": key}
    params = StdioServerParameters(command=sys.executable, args=["-m", "api", "mcp"], env=env, cwd=str(ROOT))
    seen: dict[str, Any] = {}
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        call = session.call_tool
        for case, change in ACCEPTED.items():
            seen[f"accepted {case}"] = await call("remember", _tool_args(fact(case, change)))
        for case, (change, _) in REFUSED.items():
            seen[f"refused {case}"] = await call("remember", _tool_args(fact(case, change)))
        seen["refused new entity"] = await call("remember", _tool_args(fact("new", {
            "subject": "agent:newcomer", "subject_label": "A new agent"})))
        asks = {"recall": {"agent": "agent:sales", "subject": "person:c1"},
                "search": {"agent": "agent:sales", "query": "ticket"}}
        for tool, args in asks.items():
            seen[f"{tool} own"] = await call(tool, args | {"serving": "person:c1", "session_id": "sales-c1"})
            for name, change in (("agent", {"agent": "agent:other"}), ("serving", {"serving": "person:c3"}),
                                 ("session_id", {"session_id": "other-c3"})):
                seen[f"{tool} {name}"] = await call(tool, args | change)
        seen["perspective own"] = await call("perspective", {"agent": "agent:sales", "serving": "person:c1"})
        seen["perspective agent"] = await call("perspective", {"agent": "agent:other"})
        seen["deepen own"] = await call("deepen", {"perspective_id": _data(seen["perspective own"])})
        seen["deepen agent"] = await call("deepen", {"perspective_id": others_perspective})
        seen["context own"] = await call("context", {"session_id": "sales-c1", "message": "hi"})
        seen["context agent"] = await call("context", {"session_id": "other-c3", "message": "hi"})
        seen["correct Authorization"] = await call("correct", {"subject": "person:c3", "relation": "owns",
                                                               "object": "ticket:t1", "scope": "person:c3",
                                                               "reason": "gone"})
        seen["forget Authorization"] = await call("forget", {"subject": "person:c3"})
        seen["relations"] = await call("list_relations", {})
    return seen


def _data(result: Any) -> str:
    """The perspective id a `perspective` tool call answered."""
    assert not result.isError, _text(result)
    answer = result.structuredContent or json.loads(result.content[0].text)
    return str(answer.get("result", answer)["perspective_id"])


def _text(result: Any) -> str:
    return " ".join(getattr(part, "text", "") for part in result.content)


def _names(result: Any, field: str) -> bool:
    """Whether a tool error names `field` first (`field: what is wrong`, perhaps after the SDK's own prefix)."""
    text = _text(result)
    return text.startswith(f"{field}: ") or f": {field}: " in text


def test_mcp_tools_with_a_scoped_key_write_and_ask_only_as_its_own(mcp_org: tuple[Path, str]) -> None:
    home, key, others = mcp_org
    seen = asyncio.run(_scoped_tools(home, key, others))
    for case in ACCEPTED:
        assert not seen[f"accepted {case}"].isError, _text(seen[f"accepted {case}"])
    for case, (_, field) in REFUSED.items():
        result = seen[f"refused {case}"]
        assert result.isError and _names(result, field), (case, _text(result))
    assert seen["refused new entity"].isError and _names(seen["refused new entity"], "subject")
    relations = seen["relations"].structuredContent or json.loads(seen["relations"].content[0].text)
    counted = {r["name"]: r["current_facts"] for r in relations.get("result", relations)["relations"]}
    assert counted.get("mentioned", 0) >= 1  # its own facts are counted; Cao's private ones ("owns", "told") not
    assert counted.get("owns", 0) == 0 and counted.get("told", 0) == 0, counted
    for name in ("recall own", "search own", "perspective own", "deepen own", "context own"):
        assert not seen[name].isError, (name, _text(seen[name]))
    for name, result in seen.items():
        tool, _, field = name.partition(" ")
        if tool in ("recall", "search", "perspective", "deepen", "context", "correct", "forget") and field != "own":
            assert result.isError and _names(result, field), (name, _text(result))
    settings = Settings(home=home, event_store="sqlite")
    noumena = bootstrap(settings)
    try:
        with noumena.service.reading(T) as state:
            reasons = {f.reason for f in state.facts.values()}
            assert "agent:newcomer" not in state.entities  # a refused remember registers nothing
    finally:
        noumena.close()
    assert not reasons & {f"INJECTED {case}" for case in REFUSED}
    assert {f"INJECTED {case}" for case in ACCEPTED} <= reasons
