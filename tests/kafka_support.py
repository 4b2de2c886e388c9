"""Helpers for the Kafka tests and the Kafka benchmark: the real broker, unique topics, a story of session
events with bad inputs mixed in, and a content digest of an event log that ignores transaction time."""

from __future__ import annotations

import faulthandler
import hashlib
import json
import os
import random
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from consumers.kafka_admin import ensure_topic
from infra.bootstrap import Noumena

DEFAULT_BOOTSTRAP = "127.0.0.1:59092"


def kafka_bootstrap() -> str:
    """The broker `infra/scripts/kafka.sh start` runs; raises (never skips) if it is not reachable."""
    bootstrap = os.environ.get("NOUMENA_KAFKA_BOOTSTRAP", DEFAULT_BOOTSTRAP)
    host, _, port = bootstrap.split(",")[0].rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as error:
        raise RuntimeError(f"no Kafka broker at {bootstrap} ({error}): run `infra/scripts/kafka.sh start`") from error
    return bootstrap


def unique_topic(prefix: str = "t") -> str:
    return f"noumena-test.{prefix}.{uuid.uuid4().hex[:10]}"


def create_topic(bootstrap: str, topic: str, partitions: int = 1) -> str:
    ensure_topic({"bootstrap_servers": bootstrap.split(",")}, topic, partitions)
    return topic


FAST_PARKING = {"kafka_park_retry_seconds": 0.1, "kafka_park_max_attempts": 3}
"""Parking bounds for tests whose parked inputs never find what they wait for: dead-lettered after ~0.2 s."""


def create_park_topic(bootstrap: str, topic: str, partitions: int = 2) -> str:
    """The park topic the consumer reads beside `topic` (`<topic>.parked`, its default)."""
    return create_topic(bootstrap, f"{topic}.parked", partitions)


@dataclass
class Message:
    value: bytes
    key: bytes | None
    good: bool
    event_id: str | None = None
    partition: int | None = None


@dataclass
class Story:
    tenants: list[str]
    messages: list[Message] = field(default_factory=list)

    @property
    def good_event_ids(self) -> set[str]:
        return {m.event_id for m in self.messages if m.good and m.event_id}

    @property
    def bad_values(self) -> set[bytes]:
        return {m.value for m in self.messages if not m.good}


def _envelope(tenant: str, event_id: str, type_: str, payload: dict[str, Any], minute: int) -> dict[str, Any]:
    # occurred_at is always given: rules that default a time from the clock would make the digest differ.
    return {"event_id": event_id, "tenant": tenant, "type": type_, "payload": payload,
            "occurred_at": f"2026-10-{1 + minute // 1440 % 28:02d}T{minute // 60 % 24:02d}:{minute % 60:02d}:00Z"}


def story(tenants: int, per_tenant: int, bad_every: int = 0, duplicate_every: int = 0, seed: int = 7,
          partitions: int | None = None) -> Story:
    """Session events for `tenants` tenants (about `per_tenant` good messages each), with bad inputs of every
    kind after every `bad_every` good ones and repeats after every `duplicate_every`. With `partitions`, each
    tenant is pinned to partition `index % partitions`, so its order (and so its stream versions) is fixed."""
    rng = random.Random(seed)
    names = [f"t{i:02d}" for i in range(tenants)]
    result = Story(names)
    for index, tenant in enumerate(names):
        pinned = index % partitions if partitions else None
        good: list[Message] = []

        def add(type_: str, payload: dict[str, Any], session: str | None = None,
                tenant: str = tenant, good: list[Message] = good, pinned: int | None = pinned) -> None:
            event_id = f"{tenant}-{len(good)}"
            body = _envelope(tenant, event_id, type_, payload, len(good))
            key = f"{tenant}/{session}" if session else tenant
            good.append(Message(json.dumps(body).encode(), key.encode(), True, event_id, pinned))

        add("entity.registered", {"ref": f"agent:{tenant}-assistant", "label": "assistant"})
        people = [f"person:{tenant}-p{i}" for i in range(8)]
        for person in people:
            add("entity.registered", {"ref": person, "label": person.split(":")[1]})
        session, n_session = None, 0
        while len(good) < per_tenant:
            if session is None or rng.random() < 0.02:
                n_session += 1
                session = f"{tenant}-s{n_session}"
                add("session.started", {"session_id": session, "agent": f"agent:{tenant}-assistant",
                                        "serving": rng.choice(people)}, session)
            roll = rng.random()
            if roll < 0.6:
                add("message.appended", {"session_id": session, "message_id": f"m{len(good)}",
                                         "role": rng.choice(["user", "assistant"]),
                                         "content": f"message {len(good)} about {rng.choice(people)}"}, session)
            elif roll < 0.95:
                a, b = rng.sample(people, 2)
                add("fact.asserted", {"subject": a, "relation": rng.choice(["knows", "works_with", "reports_to"]),
                                      "object": b, "reason": f"said in {session}", "confidence": 0.7,
                                      "source": {"session_id": session, "message_ids": [f"m{len(good) - 1}"]}},
                    session)
            else:
                add("session.compacted", {"session_id": session, "through_message_id": f"m{len(good) - 1}",
                                          "summary": "talked", "mentions": [{"ref": people[0], "label": "p0"}]},
                    session)
        messages: list[Message] = []
        for i, message in enumerate(good):
            messages.append(message)
            if duplicate_every and i % duplicate_every == duplicate_every - 1:
                messages.append(good[rng.randrange(i + 1)])
            if bad_every and i % bad_every == bad_every - 1:
                bad = _bad(tenant, i, rng, pinned)
                messages.append(bad)
                if duplicate_every and rng.random() < 0.3:
                    messages.append(bad)
        result.messages += messages
    return result


def _bad(tenant: str, i: int, rng: random.Random, pinned: int | None) -> Message:
    kind = i // 7 % 6
    key = tenant.encode()
    if kind == 0:
        value = b"\xff\xfe not utf-8 " + str(i).encode()
    elif kind == 1:
        value = b'{"event_id": "broken' + str(i).encode()
    elif kind == 2:
        value = json.dumps(_envelope(tenant, f"{tenant}-bad{i}", "fact.asserted",
                                     {"subject": "person:x", "relation": "knows", "confidence": 2}, i)).encode()
    elif kind == 3:
        value = json.dumps(_envelope(tenant, f"{tenant}-bad{i}", "fact.exploded", {}, i)).encode()
    elif kind == 4:
        value = json.dumps(_envelope("ghost", f"ghost-bad{i}", "session.ended", {"session_id": "s"}, i)).encode()
    else:
        value = json.dumps(_envelope(tenant, f"{tenant}-bad{i}", "message.appended",
                                     {"session_id": f"nowhere-{i}", "message_id": "m", "role": "user",
                                      "content": "?"}, i)).encode()
    return Message(value, key, False, None, pinned)


def produce(bootstrap: str, topic: str, messages: Iterable[Message]) -> int:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap.split(","), acks="all", linger_ms=20,
                             batch_size=256 * 1024, max_in_flight_requests_per_connection=5)
    count = 0
    for message in messages:
        producer.send(topic, key=message.key, value=message.value, partition=message.partition)
        count += 1
    producer.flush(timeout=60)
    producer.close()
    return count


def create_tenants(noumena: Noumena, tenants: Iterable[str]) -> None:
    from domain.commands import CreateTenant

    for tenant in tenants:
        noumena.service.execute(CreateTenant(tenant=tenant))


def log_rows(noumena: Noumena) -> list[tuple[str, int, str, dict[str, Any]]]:
    """(stream, stream version, topic, state without transaction time) for every event in the log."""
    rows: list[tuple[str, int, str, dict[str, Any]]] = []
    after = 0
    recorder = noumena.log.recorder
    # Content fields may be sealed with random nonces: compare what they say, not their ciphertext.
    unsealed = getattr(noumena.log.mapper, "unsealed_state", lambda topic, state: state)
    while batch := recorder.select_notifications(start=after, limit=5_000, inclusive_of_start=False):
        for n in batch:
            state = json.loads(unsealed(n.topic, n.state))
            recorded_at = state.pop("recorded_at", None)
            if recorded_at is not None:
                state = {k: v for k, v in state.items() if v != recorded_at}
            rows.append((str(n.originator_id), n.originator_version, n.topic, state))
        after = batch[-1].id
    return rows


def log_digest(noumena: Noumena) -> tuple[int, str]:
    """Count and SHA-256 over the log's content without transaction time, comparable across runs.

    Ingested events (they carry the envelope's event id) count with (tenant stream, place among the stream's
    ingested events, topic, payload): each tenant's order must be the same as in a clean run. Consolidation
    runs in the background, so its own events (no event id) land between ingested ones at moments that differ
    from run to run: they count by content only, sorted. The log is compared once consolidation has settled:
    what this process queued is drained, and what a killed process left pending is consolidated here, as the
    next noumena process would."""
    noumena.on_stored.drain(60)
    noumena.consolidation.resume()
    ordered: list[tuple[str, int, str, str]] = []
    unordered: list[tuple[str, str, str]] = []
    place: dict[str, int] = {}
    for stream, _version, topic, state in sorted(log_rows(noumena), key=lambda r: (r[0], r[1])):
        payload = json.dumps(state, sort_keys=True)
        if state.get("event_id"):
            place[stream] = place.get(stream, 0) + 1
            ordered.append((stream, place[stream], topic, payload))
        else:
            unordered.append((stream, topic, payload))
    digest = hashlib.sha256()
    for row in [*ordered, *sorted(unordered)]:
        digest.update(json.dumps(row).encode() + b"\n")
    return len(ordered) + len(unordered), digest.hexdigest()


def stored_event_ids(noumena: Noumena) -> list[str]:
    """The envelope event ids of the stored events (several events may share one: a superseding fact)."""
    return [state["event_id"] for _, _, _, state in log_rows(noumena) if state.get("event_id")]


def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    """partition -> the offset the next message will get (so the last stored offset should be this - 1)."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap.split(","), group_id=None)
    try:
        tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        return {tp.partition: offset for tp, offset in consumer.end_offsets(tps).items()}
    finally:
        consumer.close()


def stored_positions(noumena: Noumena, topic: str, partitions: Iterable[int]) -> dict[int, int | None]:
    from consumers.kafka_config import tracking_name

    return {p: noumena.log.tracked_position(tracking_name(topic, p)) for p in partitions}


def caught_up(noumena: Noumena, topic: str, ends: dict[int, int]) -> bool:
    positions = stored_positions(noumena, topic, ends)
    return all(end == 0 or positions[p] == end - 1 for p, end in ends.items())


def parked_settled(noumena: Noumena, bootstrap: str, park_topic: str) -> bool:
    """Every record on the park topic now has been handled (stored, parked again and handled, or dead-lettered):
    nothing waits any more."""
    return caught_up(noumena, park_topic, end_offsets(bootstrap, park_topic))


def consumer_env(settings: Any) -> dict[str, str]:
    """The environment that makes `python -m api consume` use exactly these settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NOUMENA_")}
    for name, value in settings.model_dump().items():
        if value is None or value == "":
            continue
        if hasattr(value, "get_secret_value"):
            value = value.get_secret_value()
        env[f"NOUMENA_{name.upper()}"] = str(value)
    return env


def spawn_consumer(settings: Any, log_path: Any, *args: str) -> Any:
    import subprocess
    import sys

    handle = open(log_path, "ab")  # noqa: SIM115 (lives as long as the child)
    return subprocess.Popen([sys.executable, "-m", "api", "consume", "-v", *args], env=consumer_env(settings),
                            stdout=handle, stderr=subprocess.STDOUT, cwd=os.path.dirname(os.path.dirname(
                                os.path.abspath(__file__))))


CONSUME_TIMEOUT_S = 180.0
"""How long a test lets a consumer take to drain its topic (seconds on a quiet machine; minutes under load)."""


def run_until_idle(consumer: Any, timeout: float = CONSUME_TIMEOUT_S) -> None:
    """consumer.run(until_idle=True) on a thread of its own, failing (never hanging) if it has not returned within
    `timeout`: the failure names what the consumer was still waiting for, and every thread's stack is printed
    (captured with the test's output) so a stall explains itself."""
    stop = threading.Event()
    failure: list[BaseException] = []

    def target() -> None:
        try:
            consumer.run(stop, until_idle=True)
        except BaseException as error:  # noqa: BLE001 (re-raised below)
            failure.append(error)

    thread = threading.Thread(target=target, name="test-consumer", daemon=True)
    thread.start()
    thread.join(timeout)
    stalled = thread.is_alive()
    if stalled:
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
    stop.set()
    thread.join(30)
    assert not stalled, (f"the consumer was not caught up within {timeout:.0f} s; it was waiting for "
                         f"{consumer.waiting_for}" + (" (and did not stop within 30 s more)" if thread.is_alive()
                                                      else ""))
    if failure:
        raise failure[0]


def consume_all(noumena: Noumena, timeout: float = CONSUME_TIMEOUT_S, **kwargs: Any) -> Any:
    """A SessionEventConsumer for `noumena` run until every assigned partition is stored (bounded: see
    `run_until_idle`), then closed; returns it (for its metrics)."""
    from consumers.kafka_consumer import SessionEventConsumer

    consumer = SessionEventConsumer(noumena.consumer_ports(), **kwargs)
    try:
        run_until_idle(consumer, timeout)
    finally:
        consumer.close()
    return consumer


def wait_until(condition: Callable[[], bool], timeout: float, what: str, step: float = 0.05) -> None:
    """Poll `condition` until it holds; an AssertionError naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(step)
