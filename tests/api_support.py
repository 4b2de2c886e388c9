"""A real `noumena serve` process for the API tests: SQLite store in a temporary home, a free port, an admin
key, production mode (so the settings' safety rules are the ones that run), Kafka off."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

ADMIN_KEY = "test-admin-key-0123456789abcdef"
ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def server_env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NOUMENA_")}
    env |= {"NOUMENA_HOME": str(home), "NOUMENA_EVENT_STORE": "sqlite", "NOUMENA_ADMIN_KEY": ADMIN_KEY,
            "NOUMENA_ENVIRONMENT": "production", "NOUMENA_KAFKA_BOOTSTRAP": "", "NOUMENA_SNAPSHOT_INTERVAL": "0",
            "NOUMENA_PROJECTION_POLL_INTERVAL": "0.05"}
    return env | extra


@dataclass
class Tenant:
    name: str
    key: str
    client: httpx.Client
    refs: dict[str, str] = field(default_factory=dict)


@dataclass
class Server:
    url: str
    process: subprocess.Popen[bytes]
    home: Path
    log: Path

    def client(self, key: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)

    def admin(self) -> httpx.Client:
        return self.client(ADMIN_KEY)

    def tenant(self, name: str) -> Tenant:
        """Create a tenant through the admin routes and return a client holding its new API key."""
        with self.admin() as admin:
            created = admin.post("/v1/admin/tenants", json={"tenant": name})
            assert created.status_code == 200, created.text
            issued = admin.post("/v1/admin/keys", json={"tenant": name, "label": "tests"})
            assert issued.status_code == 200, issued.text
        key = issued.json()["key"]
        return Tenant(name, key, self.client(key))


def start_server(home: Path, **env: str) -> Server:
    port = free_port()
    home.mkdir(parents=True, exist_ok=True)
    log = home / "server.log"
    process = subprocess.Popen(
        [sys.executable, "-m", "api", "serve", "--host", "127.0.0.1", "--port", str(port)],
        env=server_env(home, **env), cwd=ROOT, stdout=log.open("wb"), stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180  # a loaded machine (2 cores, many agents) can take a minute to import
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}:\n{log.read_text()}")
        try:
            if httpx.get(url + "/readyz", timeout=1).status_code == 200:
                return Server(url, process, home, log)
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    process.kill()
    raise RuntimeError(f"server did not become ready:\n{log.read_text()}")


def stop_server(server: Server) -> None:
    server.process.terminate()
    try:
        server.process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        server.process.kill()
        server.process.wait()


@pytest.fixture(scope="module")
def api_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One server process per test module."""
    server = start_server(tmp_path_factory.mktemp("api") / "home")
    yield server
    stop_server(server)


def register_story(tenant: Tenant, secret: str) -> dict[str, Any]:
    """A small organization: an agent serving a person, a customer, a private memory, a session with a worker.
    `secret` is put in every label and reason, so a leak to another tenant is visible in any response."""
    c = tenant.client
    entities = [("agent:assistant", f"assistant {secret}"), ("person:boss", f"boss {secret}"),
                ("person:customer", f"customer {secret}"), ("memory:pref", f"prefers monthly settlement {secret}"),
                ("file:contract-v3", f"contract v3 {secret}")]
    events = [{"event_id": f"{tenant.name}-e{i}", "tenant": tenant.name, "type": "entity.registered",
               "payload": {"ref": ref, "label": label}} for i, (ref, label) in enumerate(entities)]
    events += [
        {"event_id": f"{tenant.name}-s1", "tenant": tenant.name, "type": "session.started",
         "payload": {"session_id": "main", "agent": "agent:assistant", "serving": "person:boss"}},
        {"event_id": f"{tenant.name}-w1", "tenant": tenant.name, "type": "worker.dispatched",
         "payload": {"session_id": "main", "worker_session_id": "worker-1",
                     "task": f"draft quote {secret}", "about": ["person:customer"]}},
    ]
    written = c.post("/v1/events", json={"events": events})
    assert written.status_code == 200, written.text
    facts = {}
    for name, body in {
        "serves": {"subject": "agent:assistant", "relation": "serves", "object": "person:boss"},
        "knows": {"subject": "person:boss", "relation": "knows", "object": "person:customer",
                  "reason": f"met at the fair {secret}"},
        "prefers": {"subject": "person:customer", "relation": "prefers", "object": "memory:pref",
                    "reason": f"said so on the third call {secret}", "confidence": 0.9,
                    "source": {"session_id": "main", "message_ids": ["m7"], "actor": "agent:assistant"}},
        "contract": {"subject": "person:customer", "relation": "waiting_on", "object": "file:contract-v3",
                     "reason": f"legal review {secret}", "scope": "person:boss"},
    }.items():
        response = c.post("/v1/facts", json=body)
        assert response.status_code == 200, response.text
        facts[name] = response.json()
    return {"facts": facts, "position": max(f["position"] for f in facts.values()), "session": "main"}
