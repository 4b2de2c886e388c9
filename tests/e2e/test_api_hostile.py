"""The HTTP API under a hostile client, on a real `noumena serve` process: lone surrogates, trailing
newlines, timestamps out of range and loose coercion refused with a 422 naming the field (never a 500); malformed
JSON a 400; any wrong key a 401; bodies bounded, and an unauthenticated body never read; data stored out of range
before the rule still reads."""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api_support import ADMIN_KEY, Server, Tenant, api_server, start_server, stop_server  # noqa: F401

PROBLEM = "application/problem+json"
SURROGATE = "\\ud800"  # as a JSON escape: json.dumps would refuse to produce it from a Python string


@pytest.fixture(scope="module")
def acme(api_server: Server) -> Tenant:  # noqa: F811
    tenant = api_server.tenant("acme")
    for ref, label in (("agent:a", "Agent"), ("person:li", "Li"), ("person:wang", "Wang")):
        assert tenant.client.post("/v1/entities", json={"ref": ref, "label": label}).status_code == 200
    written = tenant.client.post("/v1/facts", json={"subject": "agent:a", "relation": "serves",
                                                    "object": "person:li"})
    assert written.status_code == 200, written.text
    return tenant


def _raw(tenant: Tenant, method: str, path: str, body: str) -> httpx.Response:
    return tenant.client.request(method, path, content=body.encode(), headers={"content-type": "application/json"})


def _problem(response: httpx.Response, status: int, field: str | None = None) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM)
    body = response.json()
    if field is not None:
        assert body["field"] == field, body
    return dict(body)


@pytest.mark.parametrize(("path", "body", "field"), [
    ("/v1/entities", f'{{"ref": "person:{SURROGATE}", "label": "x"}}', "body.ref"),
    ("/v1/entities", f'{{"ref": "person:x", "label": "x{SURROGATE}"}}', "body.label"),
    ("/v1/facts", f'{{"subject": "person:li", "relation": "knows", "object": "person:wang", "reason": "{SURROGATE}"}}',
     "body.reason"),
    ("/v1/memory/used", f'{{"agent": "agent:a", "fact_ids": ["f1"], "perspective_id": "p{SURROGATE}"}}',
     "body.perspective_id"),
    ("/v1/events", '{"events": [{"event_id": "e1", "tenant": "acme", "type": "message.appended", "payload": '
     f'{{"session_id": "s", "message_id": "m{SURROGATE}", "role": "user", "content": "hi"}}}}]}}',
     "body.events.0.payload.message_id"),
    ("/v1/sessions/main/context", f'{{"message": "hello {SURROGATE}"}}', "body.message"),
    ("/v1/search", f'{{"agent": "agent:a", "query": "li {SURROGATE}"}}', "body.query"),
])
def test_a_lone_surrogate_anywhere_in_a_body_is_a_422_naming_where(acme: Tenant, path: str, body: str,
                                                                    field: str) -> None:
    _problem(_raw(acme, "POST", path, body), 422, field)


@pytest.mark.parametrize(("path", "body", "field"), [
    ("/v1/entities", {"ref": "person:li\n", "label": "Li"}, "body.ref"),
    ("/v1/facts", {"subject": "person:li", "relation": "knows\n", "object": "person:wang"}, "body.relation"),
    ("/v1/entities", {"ref": "person:zhao", "label": "Zhao", "hub": 0}, "body.hub"),
    ("/v1/facts", {"subject": "person:li", "relation": "knows", "object": "person:wang", "confidence": True},
     "body.confidence"),
    ("/v1/facts", {"subject": "person:li", "relation": "knows", "object": "person:wang", "valid_from": "-1"},
     "body.valid_from"),
    ("/v1/facts", {"subject": "person:li", "relation": "knows", "object": "person:wang", "valid_from": 1700000000},
     "body.valid_from"),
    ("/v1/facts", {"subject": "person:li", "relation": "knows", "object": "person:wang",
                   "valid_to": "9999-12-31T23:59:59-14:00"}, "body.valid_to"),
    ("/v1/facts", {"subject": "person:li", "relation": "knows", "object": "person:wang",
                   "valid_from": "0001-01-01T00:00:00+14:00"}, "body.valid_from"),
    ("/v1/search", {"agent": "agent:a", "query": "li", "as_of": "9999-12-31T23:59:59-14:00"}, "body.as_of"),
    ("/v1/memory/recall", {"agent": "agent:a", "subject": "person:li", "relation": "knows\n"}, "body.relation"),
])
def test_newlines_coercion_and_out_of_range_timestamps_are_a_422_naming_the_field(
        acme: Tenant, path: str, body: dict[str, Any], field: str) -> None:
    _problem(acme.client.post(path, json=body), 422, field)


@pytest.mark.parametrize(("path", "params", "field"), [
    ("/v1/perspectives", {"agent": "agent:a", "as_of": "9999-12-31T23:59:59-14:00"}, "query.as_of"),
    ("/v1/perspectives", {"agent": "agent:a", "as_of": "-1"}, "query.as_of"),
    ("/v1/graph", {"recorded_at": "0001-01-01T00:00:00+14:00"}, "query.recorded_at"),
    ("/v1/graph", {"valid_at": "1700000000"}, "query.valid_at"),
])
def test_an_out_of_range_or_numeric_moment_in_a_query_is_a_422_not_a_500(acme: Tenant, path: str,
                                                                        params: dict[str, str], field: str) -> None:
    _problem(acme.client.get(path, params=params), 422, field)


@pytest.mark.parametrize("body", ['{"ref": "person:x", "label": ', "not json at all", '{"ref": "person:x"} trailing',
                                  "\xff\xfe"])
def test_malformed_json_is_a_400_problem(acme: Tenant, body: str) -> None:
    response = acme.client.post("/v1/entities", content=body.encode("latin-1"),
                                headers={"content-type": "application/json"})
    assert _problem(response, 400, "body")["type"].endswith("/malformed-json")


def test_a_wrong_admin_key_or_a_tenant_key_on_an_admin_route_is_a_401(api_server: Server,  # noqa: F811
                                                                      acme: Tenant) -> None:
    with api_server.client("not-the-admin-key-0123456789") as wrong:
        _problem(wrong.get("/v1/admin/keys", params={"tenant": "acme"}), 401, "Authorization")
        _problem(wrong.post("/v1/admin/tenants", json={"tenant": "evil"}), 401, "Authorization")
    _problem(acme.client.get("/v1/admin/keys", params={"tenant": "acme"}), 401, "Authorization")


def test_a_body_over_the_limit_is_a_413_and_a_body_under_it_is_served(acme: Tenant) -> None:
    big = json.dumps({"ref": "person:big", "label": "x" * 100, "aliases": ["y" * 400] * 21_000})
    assert len(big) > 8 * 1024 * 1024
    _problem(_raw(acme, "POST", "/v1/entities", big), 413, "body")

    def chunks() -> Any:  # no Content-Length: counted as it streams
        for start in range(0, len(big), 65536):
            yield big[start:start + 65536].encode()

    streamed = acme.client.post("/v1/entities", content=chunks(), headers={"content-type": "application/json"})
    _problem(streamed, 413, "body")
    fits = {"ref": "person:fits", "label": "Fits", "aliases": ["z" * 400] * 100}
    assert acme.client.post("/v1/entities", json=fits).status_code == 200


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def _send_unauthenticated(url: str, size: int, outcome: dict[str, Any]) -> None:
    """A raw client that declares `size` bytes and pushes them until the server answers or closes."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(f"POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {size}\r\n\r\n".encode())
        chunk, sent = b" " * 65536, 0
        try:
            while sent < size:
                sock.sendall(chunk)
                sent += len(chunk)
        except OSError:
            pass
        outcome["sent"] = sent
        try:
            outcome["answer"] = sock.recv(4096).decode("latin-1")
        except OSError as error:
            outcome["answer"] = f"error {error}"


def test_a_100_mb_unauthenticated_body_is_refused_from_its_headers_with_bounded_memory(
        api_server: Server, acme: Tenant) -> None:  # noqa: F811
    pid = api_server.process.pid
    before = _rss_kib(pid)
    outcome: dict[str, Any] = {}
    sender = threading.Thread(target=_send_unauthenticated, args=(api_server.url, 100 * 1024 * 1024, outcome))
    sender.start()
    health: list[float] = []
    with httpx.Client(base_url=api_server.url, timeout=10) as probe:
        while sender.is_alive() and len(health) < 200:
            started = time.perf_counter()
            assert probe.get("/healthz").status_code == 200
            health.append(time.perf_counter() - started)
            time.sleep(0.01)
    sender.join(timeout=60)
    with httpx.Client(base_url=api_server.url, timeout=10) as probe:  # and it still answers once refused
        started = time.perf_counter()
        assert probe.get("/healthz").status_code == 200
        health.append(time.perf_counter() - started)
    grown_mib = (_rss_kib(pid) - before) / 1024
    assert "401" in outcome["answer"].split("\r\n", 1)[0], outcome
    assert grown_mib < 50, f"the server grew {grown_mib:.1f} MiB"  # it grew by the body before (+712 MB)
    # /healthz latency is printed, not asserted. (How many probes fall while the body is pushed depends on how
    # soon the refusal ends the push: none when it is refused at once, so their number is not asserted either.)
    print(f"\n100 MB unauthenticated: client pushed {outcome['sent'] / 2**20:.1f} MiB before the answer;"
          f" RSS +{grown_mib:.1f} MiB; /healthz max {max(health) * 1000:.1f} ms over {len(health)} probes")


def test_a_fact_stored_out_of_range_before_the_rule_still_reads(tmp_path: Path) -> None:
    from domain.commands import AssertFact, CreateTenant, RegisterEntity
    from infra.adapters.api_keys import ApiKeyStore
    from infra.bootstrap import bootstrap
    from infra.settings import Settings

    home = tmp_path / "home"
    settings = Settings(home=home, event_store="sqlite")
    noumena = bootstrap(settings)
    try:
        noumena.service.execute(CreateTenant(tenant="old"))
        for ref in ("person:li", "person:wang"):
            noumena.service.execute(RegisterEntity(tenant="old", ref=ref, label=ref))
        from datetime import datetime, timedelta, timezone

        # What an older version accepted: built without validation, as it was stored then.
        legacy = AssertFact.model_construct(
            tenant="old", subject="person:li", relation="knows", object="person:wang", reason="legacy",
            confidence=None, valid_from=None, scope="org", source=None, event_id=None, occurred_at=None,
            valid_to=datetime(9999, 12, 31, 23, 59, 59, tzinfo=timezone(timedelta(hours=-14))))
        fact_id = noumena.service.execute(legacy).events[0].fact_id  # type: ignore[attr-defined]
        key = ApiKeyStore(settings.api_keys_path()).create("old", "legacy").key
    finally:
        noumena.close()
    server = start_server(home)
    try:
        with server.client(key) as client:
            graph = client.get("/v1/graph", params={"min_position": 4})
            assert graph.status_code == 200, graph.text
            [row] = [f for f in graph.json()["data"] if f["fact_id"] == fact_id]
            assert row["valid_to"].startswith("9999-12-30T23:59:59")
            fact = client.get(f"/v1/facts/{fact_id}")
            assert fact.status_code == 200, fact.text
            assert fact.json()["current"]["valid_to"].startswith("9999-12-30T23:59:59")
    finally:
        stop_server(server)


# ------------------------------------------------------------------------ nesting, unknown fields, slow bodies

def _json_routes(api_server: Server) -> set[tuple[str, str]]:  # noqa: F811
    """Every (method, path template) of the API that takes a JSON body, from its own OpenAPI document."""
    document = httpx.get(api_server.url + "/v1/openapi.json", timeout=30).json()
    return {(method.upper(), path) for path, operations in document["paths"].items()
            for method, operation in operations.items() if "requestBody" in operation}


BODIES: dict[tuple[str, str], dict[str, Any]] = {
    ("POST", "/v1/events"): {"events": [{"event_id": "h1", "tenant": "acme", "type": "entity.registered",
                                         "payload": {"ref": "person:h1", "label": "H"}}]},
    ("POST", "/v1/entities"): {"ref": "person:h2", "label": "H"},
    ("POST", "/v1/facts"): {"subject": "person:li", "relation": "knows", "object": "person:wang"},
    ("POST", "/v1/facts/{fact_id}/invalidate"): {"reason": "no longer"},
    ("POST", "/v1/memory/used"): {"agent": "agent:a", "fact_ids": ["f1"]},
    ("POST", "/v1/memory/recall"): {"agent": "agent:a", "subject": "person:li"},
    ("POST", "/v1/search"): {"agent": "agent:a", "query": "li"},
    ("POST", "/v1/sessions/{session_id}/context"): {"message": "hello"},
    ("POST", "/v1/forget"): {"subject": "person:wang"},
    ("POST", "/v1/admin/tenants"): {"tenant": "hostile"},
    ("POST", "/v1/admin/keys"): {"tenant": "acme"},
}
"""A body each JSON route accepts (some answer 404 or 422 for what they name; the shape is what counts here)."""
DEPTHS = [10, 63, 64, 65, 100, 1_000, 3_000, 10_000, 100_000]


def _concrete(path: str) -> str:
    return path.replace("{fact_id}", "f-none").replace("{session_id}", "main")


def _nested(depth: int, inner: str = "1") -> str:
    """`depth` levels of arrays and objects, alternating, around `inner`."""
    opens = "".join("[" if level % 2 else '{"a":' for level in range(depth))
    closes = "".join("]" if level % 2 else "}" for level in reversed(range(depth)))
    return opens + inner + closes


def _send(api_server: Server, acme: Tenant, method: str, path: str, body: str) -> httpx.Response:  # noqa: F811
    key = ADMIN_KEY if path.startswith("/v1/admin/") else acme.key
    with api_server.client(key) as client:
        return client.request(method, _concrete(path), content=body.encode(),
                              headers={"content-type": "application/json"})


def test_every_json_route_is_listed_with_a_body_it_accepts(api_server: Server) -> None:  # noqa: F811
    assert _json_routes(api_server) == set(BODIES)


@pytest.mark.parametrize("depth", DEPTHS)
def test_nesting_at_any_depth_on_every_json_route_is_answered_without_a_5xx(api_server: Server, acme: Tenant,  # noqa: F811
                                                                           depth: int) -> None:
    """Deeper than 64 levels is a 400 found before any parser recursion; up to it, the route's own answer (a
    422 for a shape it does not take). Whole bodies and a field's value, every route: never a 5xx or a reset."""
    for (method, path), valid in BODIES.items():
        first = next(iter(valid))
        for body, levels in ((_nested(depth), depth),
                             (json.dumps(valid)[:-1] + f', "deep": {_nested(depth)}}}', depth + 1),
                             (json.dumps({first: None})[:-5] + _nested(depth) + "}", depth + 1)):
            response = _send(api_server, acme, method, path, body)  # a reset raises here
            assert response.status_code < 500, (path, levels, response.text)
            if levels > 64:
                assert _problem(response, 400, "body")["type"].endswith("/too-deeply-nested"), (path, levels)
            else:
                assert response.status_code in (401, 404, 422), (path, levels, response.text)


def test_an_unknown_field_is_refused_on_every_json_route_naming_it(api_server: Server, acme: Tenant  # noqa: F811
                                                                   ) -> None:
    for (method, path), valid in BODIES.items():
        response = _send(api_server, acme, method, path, json.dumps(valid | {"bogus": 1}))
        assert _problem(response, 422)["field"] == "body.bogus", (path, response.text)


def _hold(url: str, key: str, declared: int, trickle: float | None) -> tuple[str, float]:
    """A keyed POST declaring `declared` bytes that sends none (or a byte every `trickle` seconds): the first line
    of the answer and how long it took."""
    host, port = url.removeprefix("http://").split(":")
    started = time.perf_counter()
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(f"POST /v1/search HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n"
                     f"Content-Type: application/json\r\nContent-Length: {declared}\r\n\r\n".encode())
        sock.settimeout(trickle or 30)
        answer = b""
        for _ in range(declared):
            try:
                answer = sock.recv(4096)
                break
            except TimeoutError:
                sock.sendall(b" ")
        rest = b""
        try:
            while chunk := sock.recv(4096):  # the server closes the connection after a 408
                rest += chunk
        except OSError:
            pass
        return (answer + rest).decode("latin-1"), time.perf_counter() - started


def test_a_body_that_is_idle_or_trickles_past_the_timeout_is_a_408_and_the_connection_closes(tmp_path: Path
                                                                                             ) -> None:
    server = start_server(tmp_path / "home", NOUMENA_API_BODY_TIMEOUT_SECONDS="1")
    try:
        acme = server.tenant("acme")
        for trickle in (None, 0.2):
            answer, took = _hold(server.url, acme.key, 100, trickle)
            status_line, _, rest = answer.partition("\r\n")
            assert " 408 " in status_line, answer
            assert "request-timeout" in rest and "NOUMENA_API_BODY_TIMEOUT_SECONDS" in rest
            assert took < 15, took  # held for the timeout, not the client's patience
        assert acme.client.post("/v1/search", json={"agent": "agent:nobody", "query": "x"}).status_code == 422
    finally:
        stop_server(server)
