"""Every read sees the writes acknowledged before it, with no `min_position`: a session started and its context
asked at once, a fact written and then searched, seen in a perspective and read by the explorer's calls. Over
HTTP (one `noumena serve`, whose reads go to a read side that follows the log) and over MCP (its tools, and a
session started through the server beside it), ROUNDS times each, with no failure allowed."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from tests.api_support import ROOT, start_server, stop_server

ROUNDS = int(os.environ.get("NOUMENA_TEST_READ_YOUR_WRITES_ROUNDS", "1000"))
CLIENTS = 4
"""Clients asking at once, each its share of the rounds."""
MCP_CLIENTS = 2
"""MCP servers (each a process over stdio) asked at once."""
AGENT = "agent:companion"


def _start(tenant: str, session: str, person: str) -> dict[str, Any]:
    return {"event_id": f"start-{session}", "tenant": tenant, "type": "session.started",
            "payload": {"session_id": session, "agent": AGENT, "serving": person, "kind": "main"}}


def _registered(tenant: str, ref: str, label: str) -> dict[str, Any]:
    return {"event_id": f"register-{ref}", "tenant": tenant, "type": "entity.registered",
            "payload": {"ref": ref, "label": label}}


def _asserted(tenant: str, memory: str, session: str) -> dict[str, Any]:
    return {"event_id": f"fact-{memory}", "tenant": tenant, "type": "fact.asserted",
            "payload": {"subject": "person:li", "relation": "likes", "object": memory,
                        "reason": f"said so in {session}", "source": {"session_id": session}}}


def _failure(round_: int, what: str, response: Any) -> str:
    return f"round {round_}, {what}: {response.status_code} {response.text[:300]}"


def _http_rounds(c: httpx.Client, rounds: range) -> list[str]:
    """Each round writes a session, an entity and a fact about it in one batch, asks the session's context at once
    (with a message: the search inside it asks the indexes about the new session), then one more read in turn: a
    search, a perspective, the explorer's entity and entity-search calls."""
    failures: list[str] = []
    for i in rounds:
        session, memory, label = f"s{i}", f"memory:m{i}", f"likes topic{i}"
        wrote = c.post("/v1/events", json={"events": [_start("acme", session, "person:li"),
                                                      _registered("acme", memory, label),
                                                      _asserted("acme", memory, session)]})
        assert wrote.status_code == 200, _failure(i, "write", wrote)
        context = c.post(f"/v1/sessions/{session}/context", json={"message": f"what about topic{i}?"})
        if context.status_code != 200 or context.json()["session_id"] != session:
            failures.append(_failure(i, "context", context))
        kind = i % 4
        if kind == 0:
            read = c.post("/v1/search", json={"agent": AGENT, "serving": "person:li", "query": f"topic{i}",
                                              "session_id": session, "about": [memory], "k": 5})
            ok = read.status_code == 200 and [item["object"] for item in read.json()["items"]] == [memory]
        elif kind == 1:
            read = c.get("/v1/perspectives", params={"agent": AGENT, "serving": "person:li", "focus": memory})
            ok = read.status_code == 200 and label in read.text
        elif kind == 2:  # the explorer's calls
            read = c.get(f"/v1/entities/{memory}")
            ok = read.status_code == 200 and read.json()["label"] == label
        else:
            read = c.get("/v1/entities", params={"q": f"topic{i}", "limit": 5})
            ok = read.status_code == 200 and memory in [row["ref"] for row in read.json()["data"]]
        if not ok:
            failures.append(_failure(i, ("search", "perspective", "entity", "entities")[kind], read))
    return failures


def test_every_read_over_http_sees_the_writes_acknowledged_before_it(tmp_path):
    """ROUNDS rounds (`_http_rounds`) by CLIENTS clients at once, each reading right after its own write: the
    writes of the others go on meanwhile (the projector applies them together, which keeps the test short)."""
    server = start_server(tmp_path / "home")
    try:
        tenant = server.tenant("acme")
        setup = tenant.client.post("/v1/events", json={"events": [_registered("acme", AGENT, "Companion"),
                                                                  _registered("acme", "person:li", "Li")]})
        assert setup.status_code == 200, setup.text
        started = time.monotonic()
        clients = [server.client(tenant.key) for _ in range(CLIENTS)]
        with ThreadPoolExecutor(CLIENTS) as pool:
            failures = [f for done in pool.map(_http_rounds, clients,
                                               [range(k, ROUNDS, CLIENTS) for k in range(CLIENTS)]) for f in done]
        for client in clients:
            client.close()
        elapsed = time.monotonic() - started
        print(f"\n{ROUNDS} rounds over HTTP by {CLIENTS} clients in {elapsed:.1f} s ({elapsed / ROUNDS * 1000:.1f} ms"
              f" a round of 3 requests), load {os.getloadavg()[0]:.1f}: {len(failures)} failures")
        assert failures == [], f"{len(failures)} of {ROUNDS} rounds failed; the first: {failures[:5]}"
    finally:
        stop_server(server)


def _data(result: Any) -> dict[str, Any]:
    if result.isError:
        return {"error": result.content[0].text if result.content else "error"}
    if result.structuredContent is not None:
        return dict(result.structuredContent.get("result", result.structuredContent))
    return dict(json.loads(result.content[0].text))


async def _mcp_rounds(home: Path, key: str, start_session: Any, rounds: range) -> list[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NOUMENA_")}
    env |= {"NOUMENA_HOME": str(home), "NOUMENA_EVENT_STORE": "sqlite", "NOUMENA_API_KEY": key}
    params = StdioServerParameters(command=sys.executable, args=["-m", "api", "mcp"], env=env, cwd=str(ROOT))
    failures: list[str] = []
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        call = session.call_tool
        for i in rounds:
            session_id, memory = f"mcp-s{i}", f"memory:mcp-m{i}"
            await asyncio.to_thread(start_session, session_id)  # (through the served process beside this one)
            context = _data(await call("context", {"session_id": session_id, "message": f"and topic{i}?"}))
            if "error" in context:
                failures.append(f"round {i}, context: {context['error']}")
            written = _data(await call("remember", {"subject": "person:li", "relation": "likes", "object": memory,
                                                    "object_label": f"likes mcptopic{i}", "reason": "said so"}))
            assert "error" not in written, written
            if i % 2 == 0:
                found = _data(await call("search", {"agent": AGENT, "serving": "person:li", "query": f"mcptopic{i}",
                                                    "about": [memory], "k": 5}))
                if [item["fact_id"] for item in found.get("items", [])] != [written["fact_id"]]:
                    failures.append(f"round {i}, search: {found}")
            else:
                seen = _data(await call("perspective", {"agent": AGENT, "serving": "person:li", "focus": [memory]}))
                if f"likes mcptopic{i}" not in json.dumps(seen):
                    failures.append(f"round {i}, perspective: {seen}")
        return failures


def test_every_read_over_mcp_sees_the_writes_acknowledged_before_it(tmp_path):
    server = start_server(tmp_path / "home")
    try:
        tenant = server.tenant("acme")
        c = tenant.client
        setup = c.post("/v1/events", json={"events": [_registered("acme", AGENT, "Companion"),
                                                      _registered("acme", "person:li", "Li")]})
        assert setup.status_code == 200, setup.text

        def start_session(session_id: str) -> None:
            wrote = c.post("/v1/events", json={"events": [_start("acme", session_id, "person:li")]})
            assert wrote.status_code == 200, wrote.text

        async def all_rounds() -> list[str]:
            done = await asyncio.gather(*(_mcp_rounds(server.home, tenant.key, start_session,
                                                      range(k, ROUNDS, MCP_CLIENTS)) for k in range(MCP_CLIENTS)))
            return [failure for failures in done for failure in failures]

        started = time.monotonic()
        failures = asyncio.run(all_rounds())
        elapsed = time.monotonic() - started
        print(f"\n{ROUNDS} rounds over MCP by {MCP_CLIENTS} servers in {elapsed:.1f} s"
              f" ({elapsed / ROUNDS * 1000:.1f} ms a round), load {os.getloadavg()[0]:.1f}: {len(failures)} failures")
        assert failures == [], f"{len(failures)} of {ROUNDS} rounds failed; the first: {failures[:5]}"
    finally:
        stop_server(server)
