"""The Python client (clients/python, `noumena_client`) against a served noumena: every route, sync and async,
problems raised as typed exceptions, read-your-writes (the last write's position sent by the next read, across
two replicas behind one address), and retries of 503 and 429 after their Retry-After against a stand-in."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from noumena_client import (
    AmbiguousName,
    AsyncNoumena,
    Conflict,
    Forbidden,
    InvalidInput,
    NotFound,
    Noumena,
    RateLimited,
    Unauthorized,
    Unavailable,
)

from tests.api_support import ADMIN_KEY, Server, api_server, start_server, stop_server  # noqa: F401
from tests.conftest import postgres_settings


@pytest.fixture(scope="module")
def keys(api_server: Server) -> dict[str, str]:  # noqa: F811
    with Noumena(api_server.url, ADMIN_KEY) as operator:
        created = operator.admin.create_tenant("pyclient", display_name="Python client")
        assert created.tenant == "pyclient" and created.position is not None
        issued = operator.admin.create_key("pyclient", label="service")
        scoped = operator.admin.create_key("pyclient", label="assistant", agents=["agent:py-assistant"])
        listed = operator.admin.list_keys(tenant="pyclient")
        assert {k.key_id for k in listed.data} == {issued.key_id, scoped.key_id} and listed.count == 2
    return {"tenant": issued.key, "scoped": scoped.key, "scoped_id": scoped.key_id}


def test_every_route_through_the_sync_client(api_server: Server, keys: dict[str, str]) -> None:  # noqa: F811
    with Noumena(api_server.url, keys["tenant"]) as client:
        wang = client.entities.register("person:py-wang", "Wang Wei", aliases=["王总"])
        assert client.last_position == wang.position and wang.ref == "person:py-wang"
        client.entities.register("agent:py-assistant", "Wang's assistant")
        client.entities.register("person:py-li", "Li Na", aliases=["李总"])
        events = client.events.ingest([
            {"event_id": "py-s1", "tenant": "pyclient", "type": "session.started",
             "payload": {"session_id": "py-main", "agent": "agent:py-assistant", "kind": "main",
                         "serving": "person:py-wang"}},
            {"event_id": "py-m1", "tenant": "pyclient", "type": "message.appended",
             "payload": {"session_id": "py-main", "message_id": "m1", "role": "user",
                         "content": "Li prefers monthly settlement"}}])
        assert events.accepted == 2 and client.last_position == events.position
        fact = client.facts.assert_("person:py-li", "knows", "person:py-wang", reason="old classmates",
                                  source={"session_id": "py-main", "message_ids": ["m1"]})
        assert fact.change == "asserted" and client.last_position == fact.position
        served = client.facts.assert_("agent:py-assistant", "serves", "person:py-wang")
        # each read below carries the last write's position (read-your-writes), with no min_position given
        assert client.entities.find("王总").data[0].ref == "person:py-wang"
        assert client.entities.find(limit=2).count >= 3
        assert client.entities.get("person:py-li").aliases == ["李总"]
        history = client.facts.get(fact.fact_id or "")
        assert history.current.status == "current" and history.changes[0].message_ids == ["m1"]
        assert any(f.fact_id == served.fact_id for f in client.graph.get(limit=100).data)
        view = client.perspectives.get("Wang's assistant", serving="王总")
        assert view.agent == "agent:py-assistant" and any(i.fact_id == fact.fact_id for i in view.items)
        assert "Li Na" in client.perspectives.markdown("agent:py-assistant", serving="person:py-wang")
        deeper = client.perspectives.deepen(view.perspective_id)
        assert deeper.deeper and client.perspectives.explain(view.perspective_id).perspective_id == \
            view.perspective_id
        assert client.memory.mark_used("agent:py-assistant", [fact.fact_id or ""]).events == 1  # one facts.recalled
        recalled = client.memory.recall("agent:py-assistant", "person:py-li", serving="person:py-wang")
        assert [f.fact_id for f in recalled.data] == [fact.fact_id]
        found = client.search.run("agent:py-assistant", "classmates", serving="person:py-wang")
        assert any(i.fact_id == fact.fact_id for i in found.items)  # (beside the turns that match)
        assert client.search.explain(found.search_id)["search_id"] == found.search_id
        assert client.sessions.workers("py-main").session.agent == "agent:py-assistant"
        context = client.contexts.assemble("py-main", message="how does Li want to pay?")
        assert context.session_id == "py-main" and context.tokens > 0
        assert client.contexts.explain(context.context_id)["context_id"] == context.context_id
        ended = client.facts.invalidate(fact.fact_id or "", "they never met")
        assert ended.change == "invalidated"
        receipt = client.memory.forget("person:py-li")
        assert receipt.keys_deleted >= 1 and receipt.receipt_id.startswith("fgt-")
        assert client.entities.get("person:py-li").label == "[forgotten]"
        assert client.operations.healthz() == {"status": "ok"}
        assert client.operations.readyz()["log_position"] >= receipt.position
        assert "noumena_" in client.operations.metrics()
    with Noumena(api_server.url, ADMIN_KEY) as operator:
        assert operator.admin.revoke_key(keys["scoped_id"]).key_id == keys["scoped_id"]
    with Noumena(api_server.url, keys["scoped"]) as revoked, pytest.raises(Unauthorized):
        revoked.entities.find("wang")


def test_problems_are_raised_as_typed_exceptions(api_server: Server, keys: dict[str, str]) -> None:  # noqa: F811
    with Noumena(api_server.url, keys["tenant"]) as client:
        client.entities.register("person:py-boss-a", "Boss A", aliases=["Boss"])
        client.entities.register("person:py-boss-b", "Boss B", aliases=["Boss"])
        with pytest.raises(NotFound) as missing:
            client.entities.get("person:nobody-here")
        assert missing.value.status == 404 and missing.value.field == "path.ref"
        with pytest.raises(InvalidInput) as invalid:
            client.facts.assert_("person:py-boss-a", "knows", "person:py-boss-b", confidence=2)
        assert invalid.value.field == "body.confidence" and invalid.value.slug == "invalid-input"
        with pytest.raises(AmbiguousName) as ambiguous:
            client.perspectives.get("agent:py-assistant", serving="Boss")
        assert {c["ref"] for c in ambiguous.value.candidates} == {"person:py-boss-a", "person:py-boss-b"}
        fact = client.facts.assert_("person:py-boss-a", "knows", "person:py-boss-b")
        client.facts.invalidate(fact.fact_id or "", "no")
        with pytest.raises(Conflict):
            client.facts.invalidate(fact.fact_id or "", "no")
    with Noumena(api_server.url, "nk_000000000000_wrong") as stranger, pytest.raises(Unauthorized):
        stranger.entities.find("wang")
    with Noumena(api_server.url, ADMIN_KEY) as operator:
        scoped = operator.admin.create_key("pyclient", agents=["agent:py-assistant"]).key
    with Noumena(api_server.url, scoped) as assistant, pytest.raises(Forbidden) as forbidden:
        assistant.entities.find()  # (listing every entity needs a tenant-wide key)
    assert forbidden.value.field == "Authorization"


def test_the_async_client_does_the_same(api_server: Server, keys: dict[str, str]) -> None:  # noqa: F811
    async def story() -> dict[str, Any]:
        async with AsyncNoumena(api_server.url, keys["tenant"]) as client:
            await client.entities.register("person:py-zhao", "Zhao Min", aliases=["赵总"])
            fact = await client.facts.assert_("person:py-zhao", "knows", "person:py-wang")
            position = client.last_position
            found = await client.entities.find("赵总")
            history = await client.facts.get(fact.fact_id or "")
            try:
                await client.entities.get("person:py-nobody")
            except NotFound as error:
                missing = error
            return {"position": position, "fact": fact, "found": found, "history": history, "missing": missing}

    seen = asyncio.run(story())
    assert seen["position"] == seen["fact"].position
    assert seen["found"].data[0].ref == "person:py-zhao" and seen["history"].current.subject == "person:py-zhao"
    assert seen["missing"].status == 404


def test_both_clients_have_the_same_groups_and_operations_one_definition_each() -> None:
    sync, asynchronous = Noumena("http://127.0.0.1:9"), AsyncNoumena("http://127.0.0.1:9")
    groups = {name: type(group) for name, group in vars(sync).items() if not name.startswith("_")
              and hasattr(group, "_send")}
    assert set(groups) == {"events", "entities", "facts", "graph", "perspectives", "memory", "search", "contexts",
                           "sessions", "admin", "operations"}
    for name, group in groups.items():
        assert type(getattr(asynchronous, name)) is group  # the same class: each operation is defined once
        public = [n for n in vars(group) if not n.startswith("_")]
        assert public and len(public) <= 15
        for operation in public:
            sent = getattr(getattr(asynchronous, name), operation)
            assert sent.__doc__ and sent.__doc__ == getattr(getattr(sync, name), operation).__doc__
    answered = asynchronous.operations.healthz()  # (nothing listens on port 9: the coroutine is not awaited)
    assert asyncio.iscoroutine(answered)
    answered.close()
    sync.close()


class _StandIn(BaseHTTPRequestHandler):
    """Answers each request with the next (status, headers) of `script`, then 200 with a found entity."""

    script: list[tuple[int, dict[str, str]]] = []
    seen: list[tuple[float, str]] = []

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        type(self).seen.append((time.monotonic(), self.path))
        status, headers = type(self).script.pop(0) if type(self).script else (200, {})
        body = (json.dumps({"data": [{"ref": "person:li", "label": "Li", "kind": "person"}], "count": 1})
                if status == 200 else json.dumps({"type": "https://noumena.dev/problems/busy", "title": "Busy",
                                                  "status": status, "detail": "try later"}))
        self.send_response(status)
        for name, value in {"Content-Type": "application/json", **headers}.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture
def stand_in() -> Iterator[tuple[str, type[_StandIn]]]:
    handler = type("Handler", (_StandIn,), {"script": [], "seen": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", handler
    server.shutdown()
    server.server_close()


def test_503_then_200_is_retried_after_retry_after(stand_in: tuple[str, type[_StandIn]]) -> None:
    url, handler = stand_in
    handler.script = [(503, {"Retry-After": "1"})]
    with Noumena(url, "nk_x") as client:
        found = client.entities.find("li")
    assert found.data[0].ref == "person:li" and len(handler.seen) == 2
    assert handler.seen[1][0] - handler.seen[0][0] >= 0.95  # waited as told


def test_429_is_retried_too_and_a_lasting_503_is_raised_once_retries_are_spent(
        stand_in: tuple[str, type[_StandIn]]) -> None:
    url, handler = stand_in
    handler.script = [(429, {"Retry-After": "0"}), (429, {"Retry-After": "0"})]
    with Noumena(url, "nk_x") as client:
        assert client.entities.find("li").count == 1 and len(handler.seen) == 3
    handler.seen.clear()
    handler.script = [(503, {"Retry-After": "0"})] * 3
    with Noumena(url, "nk_x", retries=2) as client, pytest.raises(Unavailable) as unavailable:
        client.entities.find("li")
    assert len(handler.seen) == 3 and unavailable.value.detail == "try later"
    handler.script = [(429, {})]
    with Noumena(url, "nk_x", retries=0) as client, pytest.raises(RateLimited):
        client.entities.find("li")


class _RoundRobin(httpx.BaseTransport):
    """A balancer in front of replicas: each request goes to the next one."""

    def __init__(self, urls: list[str]) -> None:
        self.urls = [httpx.URL(u) for u in urls]
        self.sent = 0
        self.transport = httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        target = self.urls[self.sent % len(self.urls)]
        self.sent += 1
        request.url = request.url.copy_with(host=target.host, port=target.port)
        return self.transport.handle_request(request)


@pytest.mark.postgres
def test_read_your_writes_across_two_replicas(tmp_path: Path) -> None:
    settings = postgres_settings(tmp_path / "unused")
    shared = {"NOUMENA_EVENT_STORE": "postgres", "NOUMENA_PG_HOST": settings.pg_host,
              "NOUMENA_PG_PORT": str(settings.pg_port), "NOUMENA_PG_USER": settings.pg_user,
              "NOUMENA_PG_PASSWORD": settings.pg_password.get_secret_value(), "NOUMENA_PG_DBNAME": settings.pg_dbname,
              "NOUMENA_PG_SCHEMA": settings.pg_schema, "NOUMENA_KEK_FILE": str(tmp_path / "keys.kek"),
              "NOUMENA_API_KEYS_FILE": str(tmp_path / "api_keys.json"),
              "NOUMENA_PROJECTION_POLL_INTERVAL": "1.5"}  # (a replica that lags behind the other's writes)
    a = start_server(tmp_path / "a", **shared)
    try:
        b = start_server(tmp_path / "b", **shared)
        try:
            with Noumena(a.url, ADMIN_KEY) as operator:
                operator.admin.create_tenant("rywc")
                key = operator.admin.create_key("rywc").key
            balancer = _RoundRobin([a.url, b.url])
            http = httpx.Client(base_url=a.url, headers={"Authorization": f"Bearer {key}"}, transport=balancer)
            with Noumena(a.url, http=http) as client:
                for i in range(6):  # each write to one replica, each read from the other
                    written = client.entities.register(f"person:ryw-{i}", f"Replica Person {i}")
                    assert client.entities.get(f"person:ryw-{i}").label == f"Replica Person {i}"
                    assert written.position == client.last_position
            assert balancer.sent == 12
        finally:
            stop_server(b)
    finally:
        stop_server(a)
