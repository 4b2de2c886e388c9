"""Two `noumena serve` replicas on one PostgreSQL log, as real processes with homes of their own, one
shared key-encryption key file and one shared API keys file: a write acknowledged by either is read through the
other with `min_position`, and an agent-scoped key is held to its agents and the persons they serve on both."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.api_support import Server, start_server, stop_server
from tests.conftest import postgres_settings

pytestmark = pytest.mark.postgres  # both replicas share one PostgreSQL log


@pytest.fixture(scope="module")
def replicas(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Server]]:
    root = tmp_path_factory.mktemp("replicas")
    settings = postgres_settings(root / "unused")
    shared = {"NOUMENA_EVENT_STORE": "postgres", "NOUMENA_PG_HOST": settings.pg_host,
              "NOUMENA_PG_PORT": str(settings.pg_port), "NOUMENA_PG_USER": settings.pg_user,
              "NOUMENA_PG_PASSWORD": settings.pg_password.get_secret_value(), "NOUMENA_PG_DBNAME": settings.pg_dbname,
              "NOUMENA_PG_SCHEMA": settings.pg_schema, "NOUMENA_KEK_FILE": str(root / "keys.kek"),
              "NOUMENA_API_KEYS_FILE": str(root / "api_keys.json")}
    a = start_server(root / "replica-a", **shared)
    try:
        b = start_server(root / "replica-b", **shared)
    except BaseException:
        stop_server(a)
        raise
    yield a, b
    stop_server(b)
    stop_server(a)


@pytest.fixture(scope="module")
def org(replicas: tuple[Server, Server]) -> dict[str, object]:
    """Through replica A: tenant `rep`; agent a serves Li (a `serves` fact), agent b serves Wang (a main session),
    each person with a private memory; a tenant-wide key and a key scoped to agent a."""
    a, _ = replicas
    tenant = a.tenant("rep")
    c = tenant.client
    events = [{"event_id": f"e{i}", "tenant": "rep", "type": "entity.registered",
               "payload": {"ref": ref, "label": ref.split(":")[1]}}
              for i, ref in enumerate(["agent:a", "agent:b", "person:li", "person:wang", "memory:li-private",
                                       "memory:wang-private"])]
    events.append({"event_id": "s1", "tenant": "rep", "type": "session.started",
                   "payload": {"session_id": "b-main", "agent": "agent:b", "serving": "person:wang"}})
    assert c.post("/v1/events", json={"events": events}).status_code == 200
    for body in ({"subject": "agent:a", "relation": "serves", "object": "person:li"},
                 {"subject": "person:li", "relation": "prefers", "object": "memory:li-private",
                  "reason": "li's secret", "scope": "person:li"},
                 {"subject": "person:wang", "relation": "prefers", "object": "memory:wang-private",
                  "reason": "wang's secret", "scope": "person:wang"}):
        written = c.post("/v1/facts", json=body)
        assert written.status_code == 200, written.text
    with a.admin() as admin:
        scoped = admin.post("/v1/admin/keys", json={"tenant": "rep", "label": "agent a", "agents": ["agent:a"]})
        assert scoped.status_code == 200, scoped.text
    return {"key": tenant.key, "scoped": scoped.json()["key"], "position": written.json()["position"]}


@pytest.mark.parametrize("writer", [0, 1], ids=["written on A, read on B", "written on B, read on A"])
def test_a_write_acknowledged_by_one_replica_is_read_on_the_other_with_min_position(replicas, org, writer):
    first, other = replicas[writer], replicas[1 - writer]
    with first.client(org["key"]) as c:
        written = c.post("/v1/facts", json={"subject": "person:li", "relation": f"met_via_{'ab'[writer]}",
                                            "object": "person:wang", "reason": f"met through replica {writer}"})
        assert written.status_code == 200, written.text
    fact = written.json()
    with other.client(org["key"]) as c:
        read = c.get(f"/v1/facts/{fact['fact_id']}", params={"min_position": fact["position"]})
        assert read.status_code == 200, read.text
        assert read.json()["current"]["reason"] == f"met through replica {writer}"
        seen = c.get("/v1/perspectives", params={"agent": "agent:a", "serving": "person:li",
                                                 "min_position": fact["position"]})
        assert seen.status_code == 200 and f"met through replica {writer}" in seen.text, seen.text


@pytest.mark.parametrize("replica", [0, 1], ids=["replica A", "replica B"])
def test_an_agent_scoped_key_reads_only_its_agents_view_of_the_persons_they_serve_on_either_replica(
        replicas, org, replica):
    server = replicas[replica]
    with server.client(org["scoped"]) as scoped:  # (made on A; B reads the shared keys file when it changes)
        own = scoped.get("/v1/perspectives", params={"agent": "agent:a", "serving": "person:li",
                                                    "min_position": org["position"]})
        assert own.status_code == 200, own.text
        assert "li's secret" in own.text and "wang's secret" not in own.text
        for params, field in (({"agent": "agent:b", "serving": "person:wang"}, "agent"),
                              ({"agent": "agent:b"}, "agent"),
                              ({"agent": "agent:a", "serving": "person:wang"}, "serving")):
            refused: httpx.Response = scoped.get("/v1/perspectives", params=params)
            assert refused.status_code == 403, refused.text
            assert refused.json()["field"] == field
        refused = scoped.post("/v1/memory/recall", json={"agent": "agent:a", "serving": "person:wang",
                                                         "subject": "person:wang"})
        assert refused.status_code == 403 and refused.json()["field"] == "serving", refused.text
        assert scoped.get("/v1/graph").status_code == 403
    with server.client(org["key"]) as wide:  # the tenant-wide key still serves agent b on the same replica
        other = wide.get("/v1/perspectives", params={"agent": "agent:b", "serving": "person:wang",
                                                    "min_position": org["position"]})
        assert other.status_code == 200 and "wang's secret" in other.text, other.text


def test_the_replicas_keep_homes_of_their_own(replicas):
    a, b = replicas
    assert Path(a.home) != Path(b.home)
    assert not (Path(a.home) / "keys.kek").exists() and not (Path(b.home) / "keys.kek").exists()
