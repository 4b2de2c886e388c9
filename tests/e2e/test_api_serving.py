"""`noumena serve` and its companions: the settings' safety rule, keys created from the CLI reaching a running
server, a read that waits for a position the projection does not reach, and the Kafka consumer in the same
process as the API (the real broker `make test` starts)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from domain.application.use_cases.errors import ProjectionBehind
from domain.commands import CreateTenant, RegisterEntity
from infra.bootstrap import application_reading, bootstrap
from infra.runtime.serving import ProjectionFollower
from infra.settings import Settings
from tests.api_support import ROOT, server_env, start_server, stop_server


def test_serve_refuses_to_start_in_production_without_an_admin_key(tmp_path: Path) -> None:
    env = server_env(tmp_path) | {"NOUMENA_ADMIN_KEY": ""}
    done = subprocess.run([sys.executable, "-m", "api", "serve", "--port", "0"], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "NOUMENA_ADMIN_KEY is not set" in done.stderr
    weak = subprocess.run([sys.executable, "-m", "api", "serve", "--port", "0"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, env=server_env(tmp_path) | {"NOUMENA_ADMIN_KEY": "changethis"})
    assert weak.returncode == 2 and "too weak" in weak.stderr


def test_a_key_created_with_the_cli_works_on_a_running_server(tmp_path: Path) -> None:
    server = start_server(tmp_path / "home")
    try:
        env = server_env(server.home)
        subprocess.run([sys.executable, "-m", "api", "tenant", "create", "cli-made"], env=env, cwd=ROOT,
                       check=True, capture_output=True, timeout=60)
        made = subprocess.run([sys.executable, "-m", "api", "keys", "create", "--tenant", "cli-made"], env=env,
                              cwd=ROOT, check=True, capture_output=True, text=True, timeout=60)
        key = made.stdout.strip().splitlines()[-1]
        assert key.startswith("nk_") and key not in (server.home / "api_keys.json").read_text()
        with server.client(key) as client:
            written = client.post("/v1/entities", json={"ref": "person:cli", "label": "From the CLI"}).json()
            assert client.get("/v1/entities/person:cli", params={"min_position": written["position"]}
                              ).json()["label"] == "From the CLI"
        listed = subprocess.run([sys.executable, "-m", "api", "keys", "revoke", key.split("_")[1]], env=env,
                                cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert listed.returncode == 0
        with server.client(key) as client:
            assert client.get("/v1/entities").status_code == 401
    finally:
        stop_server(server)


def test_a_read_waiting_for_a_position_the_projection_does_not_reach_gets_projection_behind(tmp_path: Path
                                                                                           ) -> None:
    settings = Settings(home=tmp_path, event_store="sqlite", api_read_wait_seconds=0.3)
    noumena = bootstrap(settings)
    follower = ProjectionFollower(noumena.log, settings)  # never started: it stays at position 0
    try:
        noumena.service.execute(CreateTenant(tenant="acme"))
        noumena.service.execute(RegisterEntity(tenant="acme", ref="person:li", label="Li"))
        memory = application_reading(noumena, follower)
        started = time.monotonic()
        with pytest.raises(ProjectionBehind, match="retry"):
            memory.entities.entity("acme", "person:li", min_position=noumena.log.max_position())
        assert 0.25 < time.monotonic() - started < 5
    finally:
        follower.stop()
        noumena.close()


@pytest.mark.kafka
def test_serve_runs_the_kafka_consumer_beside_the_api(tmp_path: Path) -> None:
    from kafka import KafkaProducer

    from tests.kafka_support import create_park_topic, create_topic, kafka_bootstrap, unique_topic

    broker = kafka_bootstrap()
    topic = create_topic(broker, unique_topic("api"))
    create_topic(broker, topic + ".dlq")  # the consumer never creates topics
    create_park_topic(broker, topic)
    server = start_server(tmp_path / "home", NOUMENA_KAFKA_BOOTSTRAP=broker, NOUMENA_KAFKA_TOPIC=topic,
                          NOUMENA_KAFKA_DLQ_TOPIC=topic + ".dlq", NOUMENA_KAFKA_GROUP=topic)
    try:
        tenant = server.tenant("streamed")
        producer = KafkaProducer(bootstrap_servers=broker.split(","))
        envelope = {"event_id": "k-1", "tenant": "streamed", "type": "entity.registered",
                    "payload": {"ref": "person:kafka", "label": "Came through Kafka"}}
        producer.send(topic, json.dumps(envelope).encode(), key=b"s1").get(timeout=30)
        producer.close()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            found = tenant.client.get("/v1/entities/person:kafka")
            if found.status_code == 200:
                break
            time.sleep(0.2)
        assert found.status_code == 200 and found.json()["label"] == "Came through Kafka"
        ready = httpx.get(server.url + "/readyz").json()
        assert ready["kafka"] == "running" and ready["status"] == "ready"
        assert "noumena_kafka" in httpx.get(server.url + "/metrics").text
    finally:
        stop_server(server)
