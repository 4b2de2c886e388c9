"""Fault tests on the real broker: consumers SIGKILLed at random points and restarted, two consumers sharing a
PostgreSQL log with one killed, the broker restarted mid-run. Each ends with the log a clean run gives (by
count and content digest) and the same dead letters (one per input after folding repeats by coordinates)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from consumers.dead_letters.replay import read_dead_letters
from consumers.dead_letters.sealing import unseal
from consumers.kafka_config import connection_options
from infra.bootstrap import Noumena
from infra.settings import Settings
from tests.conftest import postgres_settings
from tests.kafka_support import (
    FAST_PARKING,
    caught_up,
    consume_all,
    create_tenants,
    create_topic,
    end_offsets,
    kafka_bootstrap,
    log_digest,
    parked_settled,
    produce,
    spawn_consumer,
    stored_positions,
    story,
    unique_topic,
    wait_until,
)

pytestmark = [pytest.mark.kafka, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def children() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Consumer processes started by a test; any still alive at the end are killed."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for child in started:
        if child.poll() is None:
            child.kill()
            child.wait()


def settings_for(base: Settings, bootstrap: str, topic: str, name: str, **update: Any) -> Settings:
    dlq = create_topic(bootstrap, f"{topic}.{name}.dlq", partitions=2)
    park = create_topic(bootstrap, f"{topic}.{name}.parked", partitions=2)
    return base.model_copy(update={
        "kafka_bootstrap": bootstrap, "kafka_topic": topic, "kafka_dlq_topic": dlq, "kafka_group": f"{topic}.{name}",
        "kafka_park_topic": park, "kafka_batch_size": 200, "kafka_session_timeout_ms": 6_000,
        "kafka_poll_timeout_ms": 200, **FAST_PARKING, **update})


def dead_letter_inputs(settings: Settings) -> tuple[int, dict[tuple[int, int], tuple[bytes | None, str | None]]]:
    """(records on the DLQ, {source (partition, offset): (value, field)}) - repeats folded by coordinates."""
    letters = read_dead_letters(connection_options(settings), settings.kafka_dlq_topic)
    keys = settings.key_store()  # dead letters are sealed with their subject's key: compare what they say
    try:
        folded = {(s.letter.source.partition, s.letter.source.offset): (unseal(keys, s.letter.value), s.letter.field)
                  for s in letters}
    finally:
        if keys is not None:
            keys.close()  # type: ignore[attr-defined]
    return len(letters), folded


def clean_run(noumena_for, base: Settings, bootstrap: str, topic: str, tenants: list[str]):  # type: ignore[no-untyped-def]
    settings = settings_for(base, bootstrap, topic, "clean", kafka_batch_size=500)
    noumena = noumena_for(settings)
    create_tenants(noumena, tenants)
    consume_all(noumena)
    return log_digest(noumena), dead_letter_inputs(settings)[1]


def stored_total(noumena: Noumena, topic: str, ends: dict[int, int]) -> int:
    return sum((-1 if p is None else p) + 1 for p in stored_positions(noumena, topic, ends).values())


def stop(child: subprocess.Popen[bytes]) -> None:
    child.send_signal(signal.SIGTERM)
    # on its way out a consumer process finishes queued consolidations (Noumena.close: up to 30 s, and 30 s for a
    # resume in progress), which on a loaded machine with two consumers racing for them takes a while
    assert child.wait(timeout=90) == 0


def test_a_consumer_killed_at_random_points_and_restarted_ends_with_the_clean_log(
        noumena_for, children, tmp_path):
    bootstrap = kafka_bootstrap()
    topic = create_topic(bootstrap, unique_topic("sigkill"), partitions=2)
    s = story(tenants=4, per_tenant=4_900, bad_every=60, duplicate_every=97, partitions=2)
    assert len(s.messages) >= 20_000
    produce(bootstrap, topic, s.messages)
    ends = end_offsets(bootstrap, topic)
    base = Settings(home=tmp_path / "killed", event_store="sqlite")
    settings = settings_for(base, bootstrap, topic, "killed", kafka_instance_id=f"killed-{os.getpid()}")
    observer = noumena_for(settings)
    create_tenants(observer, s.tenants)
    rng = random.Random(os.environ.get("NOUMENA_TEST_SEED", "5"))

    kills = 0
    while kills < 5 and not caught_up(observer, topic, ends):
        before = stored_total(observer, topic, ends)
        child = spawn_consumer(settings, tmp_path / "consumer.log")
        children.append(child)
        # kill after a random amount of progress (not a random time: a fast consumer could finish the whole
        # topic within a fixed delay), plus a random fraction of a batch's time, so kills land mid-batch too
        target = before + rng.randint(1, 3_000)
        wait_until(lambda t=target: stored_total(observer, topic, ends) >= t or caught_up(observer, topic, ends),
                   60, "the restarted consumer to make progress")
        time.sleep(rng.uniform(0.0, 0.05))
        child.send_signal(signal.SIGKILL)
        child.wait()
        if not caught_up(observer, topic, ends):
            kills += 1
    final = spawn_consumer(settings, tmp_path / "consumer.log")
    children.append(final)
    wait_until(lambda: caught_up(observer, topic, ends), 90, "the last consumer to finish")
    wait_until(lambda: parked_settled(observer, bootstrap, settings.park_topic()), 60, "nothing left parked")
    stop(final)

    clean_digest, clean_letters = clean_run(noumena_for, Settings(home=tmp_path / "clean"), bootstrap, topic,
                                            s.tenants)
    raw_letters, letters = dead_letter_inputs(settings)
    assert kills >= 3, "the consumer finished before it could be killed mid-run three times"
    assert log_digest(observer) == clean_digest
    assert letters == clean_letters
    assert len(letters) == sum(not m.good for m in s.messages)
    assert raw_letters >= len(letters)  # a kill between DLQ flush and store may repeat a dead letter


@pytest.mark.postgres
def test_two_consumers_share_a_postgres_log_and_one_is_killed_midway(noumena_for, children, tmp_path):
    bootstrap = kafka_bootstrap()
    topic = create_topic(bootstrap, unique_topic("pg-pair"), partitions=4)
    s = story(tenants=4, per_tenant=4_900, bad_every=60, duplicate_every=97, partitions=4)
    produce(bootstrap, topic, s.messages)
    ends = end_offsets(bootstrap, topic)
    settings = settings_for(postgres_settings(tmp_path / "pg"), bootstrap, topic, "pair")
    observer = noumena_for(settings)
    create_tenants(observer, s.tenants)

    first = spawn_consumer(settings, tmp_path / "first.log")
    second = spawn_consumer(settings, tmp_path / "second.log")
    children += [first, second]
    wait_until(lambda: "assigned" in (tmp_path / "first.log").read_text()
               and "assigned" in (tmp_path / "second.log").read_text(), 60, "both consumers to get partitions")
    total = sum(ends.values())
    wait_until(lambda: stored_total(observer, topic, ends) > total // 5, 60, "a fifth of the input to be stored")
    first.send_signal(signal.SIGKILL)
    first.wait()
    killed_at = stored_total(observer, topic, ends)
    survivor = [second]

    def finished_or_restarted() -> bool:  # the supervisor's part: a consumer whose poll stalled exits (status 1,
        if survivor[-1].poll() is not None:  # see `noumena consume`) and is started again; the log holds the
            assert survivor[-1].returncode == 1 and len(survivor) < 3, (tmp_path / "second.log").read_text()[-4000:]
            survivor.append(spawn_consumer(settings, tmp_path / "second.log"))  # position, so nothing repeats
            children.append(survivor[-1])
        return caught_up(observer, topic, ends)

    wait_until(finished_or_restarted, 300, "the surviving consumer to finish")
    wait_until(lambda: parked_settled(observer, bootstrap, settings.park_topic()), 60, "nothing left parked")
    stop(survivor[-1])

    clean_digest, clean_letters = clean_run(noumena_for, Settings(home=tmp_path / "clean"), bootstrap, topic,
                                            s.tenants)
    assert killed_at < total, "the first consumer was killed after everything was stored"
    assert log_digest(observer) == clean_digest
    assert dead_letter_inputs(settings)[1] == clean_letters


def test_the_consumer_reconnects_after_a_broker_restart_and_finishes(noumena_for, children, tmp_path):
    bootstrap = kafka_bootstrap()
    topic = create_topic(bootstrap, unique_topic("restart"), partitions=2)
    s = story(tenants=2, per_tenant=5_000, bad_every=60, partitions=2)
    half = len(s.messages) // 2
    produce(bootstrap, topic, s.messages[:half])
    settings = settings_for(Settings(home=tmp_path / "restart"), bootstrap, topic, "restart",
                            kafka_batch_size=50)
    observer = noumena_for(settings)
    create_tenants(observer, s.tenants)
    child = spawn_consumer(settings, tmp_path / "consumer.log")
    children.append(child)
    first_ends = end_offsets(bootstrap, topic)
    wait_until(lambda: stored_total(observer, topic, first_ends) > half // 4, 60, "a quarter of the first half")

    restart = subprocess.run([str(REPO / "infra" / "scripts" / "kafka.sh"), "restart"], capture_output=True, text=True,
                             timeout=180)
    assert restart.returncode == 0, restart.stderr
    assert child.poll() is None, "the consumer exited when the broker restarted"
    kafka_bootstrap()
    produce(bootstrap, topic, s.messages[half:])  # only a reconnected consumer can store these
    ends = end_offsets(bootstrap, topic)
    wait_until(lambda: caught_up(observer, topic, ends), 120, "the consumer to finish after the restart")
    wait_until(lambda: parked_settled(observer, bootstrap, settings.park_topic()), 60, "nothing left parked")
    stop(child)

    clean_digest, clean_letters = clean_run(noumena_for, Settings(home=tmp_path / "clean"), bootstrap, topic,
                                            s.tenants)
    assert log_digest(observer) == clean_digest
    assert dead_letter_inputs(settings)[1] == clean_letters
