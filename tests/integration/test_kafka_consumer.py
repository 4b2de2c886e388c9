"""The consumer never stalls, against the real broker (`infra/scripts/kafka.sh start`; never mocked, never skipped): a
record just under the broker's limit is dead-lettered truncated and its partition goes on; inputs whose dependency
arrives later on another partition are parked and stored, not dead-lettered, across a restart; offsets in the group
equal the stored positions; a consumer restarted after SIGKILL gets its partitions back at once (static membership); a
missing topic is an error naming it; `dlq replay` works in original-timestamp order to a fixpoint and reports what
it cannot open; `dlq discard` keeps the letter visible with its reason."""

from __future__ import annotations

import hashlib
import json
import re
import signal
import subprocess
import sys
import threading
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from consumers.dead_letters.records import header
from consumers.dead_letters.replay import dead_letters, discard, read_dead_letters, replay
from consumers.dead_letters.sealing import unseal
from consumers.kafka_config import connection_options
from consumers.kafka_consumer import SessionEventConsumer
from consumers.record_size import record_size
from infra.settings import Settings
from tests.kafka_support import (
    FAST_PARKING,
    consumer_env,
    create_park_topic,
    create_tenants,
    create_topic,
    kafka_bootstrap,
    log_rows,
    run_until_idle,
    spawn_consumer,
    stored_event_ids,
    stored_positions,
    unique_topic,
    wait_until,
)

pytestmark = pytest.mark.kafka
REPO = Path(__file__).resolve().parents[2]
ASSIGNED = "INFO consumers.kafka_consumer: assigned"


@pytest.fixture
def bootstrap() -> str:
    return kafka_bootstrap()


def settings_for(bootstrap: str, home: Path, partitions: int = 3, dlq_configs: dict[str, str] | None = None,
                 **update: Any) -> Settings:
    topic = create_topic(bootstrap, unique_topic("consumer"), partitions=partitions)
    dlq = topic + ".dlq"
    if dlq_configs:
        from kafka.admin import KafkaAdminClient, NewTopic

        admin = KafkaAdminClient(bootstrap_servers=bootstrap.split(","))
        admin.create_topics([NewTopic(dlq, num_partitions=2, replication_factor=1, topic_configs=dlq_configs)])
        admin.close()
    else:
        create_topic(bootstrap, dlq, partitions=2)
    create_park_topic(bootstrap, topic)
    return Settings(**({"home": home, "kafka_bootstrap": bootstrap, "kafka_topic": topic, "kafka_dlq_topic": dlq,
                        "kafka_group": f"g-{topic}", "kafka_batch_size": 100, "kafka_session_timeout_ms": 6_000,
                        "kafka_poll_timeout_ms": 200} | FAST_PARKING | update))


def envelope(event_id: str, type_: str, payload: dict[str, Any], tenant: str = "acme") -> bytes:
    return json.dumps({"event_id": event_id, "tenant": tenant, "type": type_, "payload": payload}).encode()


def send(bootstrap: str, topic: str, records: list[tuple[int, bytes | None, bytes, Any]]) -> None:
    """(partition, key, value, headers or a timestamp in ms) each, in order, acknowledged."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap.split(","), acks="all", max_request_size=1_048_588)
    for partition, key, value, extra in records:
        headers = extra if isinstance(extra, list) else None
        timestamp = extra if isinstance(extra, int) else None
        producer.send(topic, value=value, key=key, partition=partition, headers=headers, timestamp_ms=timestamp)
    producer.flush(timeout=60)
    producer.close()


# ---------------------------------------------------------------------------------------------- nothing stops it


def test_a_record_just_under_the_brokers_limit_is_dead_lettered_truncated_and_its_partition_goes_on(
        bootstrap, noumena_for, tmp_path):
    settings = settings_for(bootstrap, tmp_path / "home", partitions=1)
    noumena = noumena_for(settings)
    create_tenants(noumena, ["acme"])
    trace = [("trace-id", b"t" * 1_500)]
    head = envelope("big", "message.appended", {"session_id": "s1", "message_id": "m1", "role": "robot",
                                                "content": ""})[:-3]
    filler = 1_048_400 - record_size(b"acme/s1", head + b'"}}', trace)  # just under the 1 MiB default limit
    big = head + b"x" * filler + b'"}}'
    after = envelope("after", "entity.registered", {"ref": "person:after", "label": "After"})
    send(bootstrap, settings.kafka_topic, [(0, b"acme/s1", big, trace), (0, b"acme", after, None)])

    consumer = SessionEventConsumer(noumena.consumer_ports())
    try:
        run_until_idle(consumer)
    finally:
        consumer.close()

    assert stored_event_ids(noumena) == ["after"]  # what came behind the big record was stored
    assert consumer.metrics.total("dead_letters_truncated") == 1 and consumer.metrics.total("consumed") == 2
    (raw,) = read_dead_letters(connection_options(settings), settings.kafka_dlq_topic)
    letter = raw.letter
    assert (letter.source.topic, letter.source.partition, letter.source.offset) == (settings.kafka_topic, 0, 0)
    assert header(letter, "truncated") == "true"
    assert header(letter, "original.size") == str(len(big))
    assert header(letter, "original.sha256") == hashlib.sha256(big).hexdigest()
    assert letter.field == "payload.role" and letter.key == b"acme/s1" and ("trace-id", b"t" * 1_500) in \
        letter.original_headers
    opened = unseal(noumena.log.keys, letter.value)
    assert letter.value is not None and b"xxxx" not in letter.value  # still sealed with the session's key
    assert opened is not None and big.startswith(opened) and len(opened) > 1_000_000
    from kafka import KafkaConsumer, TopicPartition

    reader = KafkaConsumer(bootstrap_servers=bootstrap.split(","), group_id=None)
    tp = TopicPartition(settings.kafka_dlq_topic, raw.dlq_partition)
    reader.assign([tp])
    reader.seek(tp, raw.dlq_offset)
    record = next(iter(reader.poll(timeout_ms=10_000)[tp]))
    reader.close()
    assert record_size(record.key, record.value, record.headers) <= 1_048_588  # fits the broker's limit

    # replay reads the original again at its source coordinates (checked by its SHA-256): it still fails
    report = replay(noumena.consumer_ports())
    assert (report.replayed, report.stored, report.still_failing, report.unopened) == (1, 0, 1, [])
    assert "payload.role" in report.reasons[0]
    (pending,) = dead_letters(noumena.consumer_ports())
    assert pending.letter.letter.attempt == 2 and header(pending.letter.letter, "original.size") == str(len(big))


def test_the_dead_letter_producer_takes_its_size_limit_from_the_topics_max_message_bytes(
        bootstrap, noumena_for, tmp_path):
    settings = settings_for(bootstrap, tmp_path / "home", partitions=1, dlq_configs={"max.message.bytes": "100000"})
    noumena = noumena_for(settings)
    create_tenants(noumena, ["acme"])
    big = envelope("b", "entity.registered", {"ref": "person:x", "label": "L" * 200_000})  # label too long
    send(bootstrap, settings.kafka_topic, [(0, b"acme", big, None)])

    consumer = SessionEventConsumer(noumena.consumer_ports())
    try:
        run_until_idle(consumer)
    finally:
        consumer.close()

    (raw,) = read_dead_letters(connection_options(settings), settings.kafka_dlq_topic)
    assert header(raw.letter, "original.size") == str(len(big)) and raw.letter.field == "payload.label"
    assert 90_000 < record_size(raw.letter.record_key(), raw.letter.value, raw.letter.headers()) <= 100_000


# ------------------------------------------------------------------------------------------ waiting, not failing


def test_sessions_whose_registrations_land_later_on_another_partition_wait_and_are_stored_without_dead_letters(
        bootstrap, noumena_for, tmp_path):
    settings = settings_for(bootstrap, tmp_path / "home", partitions=3, kafka_park_retry_seconds=0.2,
                            kafka_park_max_attempts=10_000, kafka_park_max_seconds=600)
    noumena = noumena_for(settings)
    create_tenants(noumena, ["acme"])
    sessions: list[tuple[int, bytes | None, bytes, Any]] = []
    expected_messages: dict[str, list[str]] = {}
    for n in range(1, 7):
        session, partition, key = f"s{n}", 0 if n % 2 else 2, f"acme/s{n}".encode()
        sessions.append((partition, key, envelope(f"{session}-start", "session.started", {
            "session_id": session, "agent": "agent:bot", "serving": f"person:p{n}"}), None))
        expected_messages[session] = [f"{session}-m{i}" for i in range(5)]
        for message_id in expected_messages[session]:
            sessions.append((partition, key, envelope(message_id, "message.appended", {
                "session_id": session, "message_id": message_id, "role": "user", "content": f"hello {message_id}"}),
                None))
        sessions.append((partition, key, envelope(f"{session}-fact", "fact.asserted", {
            "subject": f"person:p{n}", "relation": "works_with", "object": "person:boss",
            "source": {"session_id": session}}), None))
        sessions.append((partition, key, envelope(f"{session}-end", "session.ended", {"session_id": session}), None))
    registrations = [(1, b"acme", envelope(f"reg-{ref}", "entity.registered", {"ref": ref, "label": ref}), None)
                     for ref in ["agent:bot", "person:boss", *(f"person:p{n}" for n in range(1, 7))]]
    send(bootstrap, settings.kafka_topic, sessions)

    # first life: every session event waits for the agent; then the process goes away
    first = SessionEventConsumer(noumena.consumer_ports())
    stop = threading.Event()
    thread = threading.Thread(target=first.run, args=(stop,))
    thread.start()
    try:
        wait_until(lambda: first.metrics.total("parked") == len(sessions) and first.metrics.total("reparked") > 0,
                   60, "every session event to be parked and tried again")
    finally:
        stop.set()
        thread.join(30)
        first.close()
    assert first.metrics.total("stored_messages") == 0 and first.metrics.total("dead_lettered") == 0

    # the registrations land on another partition, after; a new process picks the parked inputs up
    send(bootstrap, settings.kafka_topic, registrations)
    second = SessionEventConsumer(noumena.consumer_ports())
    try:
        run_until_idle(second)
    finally:
        second.close()

    assert read_dead_letters(connection_options(settings), settings.kafka_dlq_topic) == []
    ids = list(dict.fromkeys(stored_event_ids(noumena)))  # (a session's start stores two events)
    assert set(ids) == {json.loads(v)["event_id"] for _, _, v, _ in sessions + registrations}
    assert second.metrics.total("unparked") == len(sessions) and second.metrics.total("consumed") == len(
        registrations)
    # each session's events were stored in the order they were sent
    by_session: dict[str, list[str]] = {}
    for _, _, _topic, state in log_rows(noumena):
        if "message_id" in state and "role" in state:  # message.appended
            by_session.setdefault(state["session_id"], []).append(state["message_id"])
    assert by_session == expected_messages
    order = [i for i in ids if i.startswith("s1-")]
    assert order == ["s1-start", *expected_messages["s1"], "s1-fact", "s1-end"]


def test_an_input_whose_dependency_never_comes_is_dead_lettered_once_its_tries_run_out(
        bootstrap, noumena_for, tmp_path):
    settings = settings_for(bootstrap, tmp_path / "home", partitions=1, kafka_park_retry_seconds=0.1,
                            kafka_park_max_attempts=4)
    noumena = noumena_for(settings)
    create_tenants(noumena, ["acme"])
    orphan = envelope("o1", "message.appended", {"session_id": "nowhere", "message_id": "m", "role": "user",
                                                 "content": "?"})
    send(bootstrap, settings.kafka_topic, [(0, b"acme/nowhere", orphan, None)])

    consumer = SessionEventConsumer(noumena.consumer_ports())
    try:
        run_until_idle(consumer)
    finally:
        consumer.close()

    (raw,) = read_dead_letters(connection_options(settings), settings.kafka_dlq_topic)
    assert raw.letter.source.topic == settings.kafka_topic and raw.letter.source.offset == 0
    assert raw.letter.field == "payload.session_id" and "tried 4 times" in raw.letter.reason
    assert unseal(noumena.log.keys, raw.letter.value) == orphan
    m = consumer.metrics
    assert (m.total("parked"), m.total("reparked"), m.total("dead_lettered"), m.total("unparked")) == (1, 2, 1, 0)


# ---------------------------------------------------------------------------------------------- the group


def committed_offsets(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap.split(","))
    try:
        found = admin.list_group_offsets({group: None})[group]
    finally:
        admin.close()
    return {tp.partition: meta.offset for tp, meta in found.items() if tp.topic == topic}


def test_offsets_in_the_group_equal_the_stored_positions_when_idle_and_after_close(bootstrap, noumena_for, tmp_path):
    from tests.kafka_support import caught_up, end_offsets, produce, story

    settings = settings_for(bootstrap, tmp_path / "home", partitions=3)
    s = story(tenants=3, per_tenant=150, partitions=3)
    produce(bootstrap, settings.kafka_topic, s.messages)
    ends = end_offsets(bootstrap, settings.kafka_topic)
    noumena = noumena_for(settings)
    create_tenants(noumena, s.tenants)
    consumer = SessionEventConsumer(noumena.consumer_ports())
    stop = threading.Event()
    thread = threading.Thread(target=consumer.run, args=(stop,))
    thread.start()
    try:
        wait_until(lambda: caught_up(noumena, settings.kafka_topic, ends), 60, "everything stored")
        stored = {p: o + 1 for p, o in stored_positions(noumena, settings.kafka_topic, ends).items()}
        # while the consumer runs, idle: Kafka has what the log has (for lag dashboards)
        wait_until(lambda: committed_offsets(bootstrap, settings.kafka_group, settings.kafka_topic) == stored, 10,
                   "the committed offsets to reach the stored positions")
    finally:
        stop.set()
        thread.join(30)
        consumer.close()
    assert committed_offsets(bootstrap, settings.kafka_group, settings.kafka_topic) == stored == ends


def test_a_consumer_restarted_after_sigkill_without_an_instance_id_gets_its_partitions_back_within_5_seconds(
        bootstrap, noumena_for, tmp_path):
    from tests.kafka_support import caught_up, end_offsets, produce, story

    # the default session timeout (45 s): a dynamic member would wait for it before the group moved on
    settings = settings_for(bootstrap, tmp_path / "home", partitions=2, kafka_session_timeout_ms=45_000)
    assert settings.kafka_instance_id == "" and settings.kafka_static_membership
    s = story(tenants=2, per_tenant=200, partitions=2)
    half = len(s.messages) // 2
    produce(bootstrap, settings.kafka_topic, s.messages[:half])
    observer = noumena_for(settings)
    create_tenants(observer, s.tenants)
    logs = [tmp_path / "first.log", tmp_path / "second.log"]
    first = spawn_consumer(settings, logs[0])
    try:
        wait_until(lambda: ASSIGNED in logs[0].read_text(), 60, "the first consumer's partitions")
        first.send_signal(signal.SIGKILL)
        first.wait()
        second = spawn_consumer(settings, logs[1])
        try:
            wait_until(lambda: ASSIGNED in logs[1].read_text(), 30, "the restarted consumer's partitions")
            produce(bootstrap, settings.kafka_topic, s.messages[half:])
            ends = end_offsets(bootstrap, settings.kafka_topic)
            wait_until(lambda: caught_up(observer, settings.kafka_topic, ends), 60, "the restarted consumer's work")
        finally:
            second.send_signal(signal.SIGTERM)
            assert second.wait(timeout=30) == 0
    finally:
        if first.poll() is None:
            first.kill()

    def moments(text: str) -> tuple[datetime, datetime, str]:
        ready = re.search(r"^(\S+ \S+) INFO consumers.kafka_consumer: consumer .* instance id (\S+),", text, re.M)
        assigned = re.search(r"^(\S+ \S+) INFO consumers.kafka_consumer: assigned", text, re.M)
        assert ready and assigned, text[-3000:]
        parse = lambda stamp: datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f")  # noqa: E731
        return parse(ready.group(1)), parse(assigned.group(1)), ready.group(2)

    _, _, first_id = moments(logs[0].read_text())
    joined, assigned, second_id = moments(logs[1].read_text())
    assert first_id == second_id and re.fullmatch(r"noumena-.+-\d+", first_id)  # host and slot, derived
    assert (assigned - joined).total_seconds() < 5


def test_a_missing_topic_is_an_error_naming_it_and_until_idle_exits_non_zero(bootstrap, tmp_path):
    settings = settings_for(bootstrap, tmp_path / "home", partitions=1)
    misspelled = settings.kafka_topic + "-typo"
    env = consumer_env(settings)
    finished = subprocess.run([sys.executable, "-m", "api", "consume", "--until-idle", "--topic", misspelled],
                              env=env, capture_output=True, text=True, timeout=120, cwd=REPO)

    assert finished.returncode == 2, finished.stderr
    said = " ".join(finished.stderr.split())
    assert f"topic '{misspelled}' does not exist (NOUMENA_KAFKA_TOPIC)" in said
    assert f"'{misspelled}.parked' does not exist (NOUMENA_KAFKA_PARK_TOPIC)" in said  # its default park topic
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap.split(","))
    try:
        assert misspelled not in admin.list_topics()  # nothing was created
    finally:
        admin.close()


# ---------------------------------------------------------------------------------------------- dead letters


def test_replay_goes_by_original_timestamp_across_partitions_to_a_fixpoint_and_reports_what_it_cannot_open(
        bootstrap, noumena_for, tmp_path):
    settings = settings_for(bootstrap, tmp_path / "home", partitions=3, kafka_park_max_attempts=0)  # no parking
    noumena = noumena_for(settings)  # the tenant does not exist yet: everything is dead-lettered
    start = envelope("start", "session.started", {"session_id": "s1", "agent": "agent:bot"})
    messages = [envelope(f"m{i}", "message.appended", {"session_id": "s1", "message_id": f"m{i}", "role": "user",
                                                       "content": f"hi {i}"}) for i in range(3)]
    registration = envelope("reg", "entity.registered", {"ref": "agent:bot", "label": "Bot"})
    send(bootstrap, settings.kafka_topic, [
        (0, b"acme/s1", start, 1_000),  # the session started (by its clock) before the agent was registered
        *[(0, b"acme/s1", m, 3_000 + i) for i, m in enumerate(messages)],
        (1, b"acme", registration, 2_000),
        (2, b"acme", b"\x00 not json", 4_000),
    ])
    consumer = SessionEventConsumer(noumena.consumer_ports())
    try:
        run_until_idle(consumer)
    finally:
        consumer.close()
    send(bootstrap, settings.kafka_dlq_topic, [(0, b"someone", b"not ours", None)])  # a record without our headers
    options = connection_options(settings)
    before = len(read_dead_letters(options, settings.kafka_dlq_topic))
    assert before == 6
    create_tenants(noumena, ["acme"])  # the fix

    report = replay(noumena.consumer_ports())

    # pass 1: the registration (t=2000) stores, the start (t=1000, before it) and its messages do not;
    # pass 2: the start and then its messages; pass 3 stores nothing more (the garbage)
    assert (report.replayed, report.stored, report.still_failing, report.passes) == (6, 5, 1, 3)
    assert report.unopened == [f"{settings.kafka_dlq_topic}/0@{_foreign_offset(options, settings)} (DLQ record): "
                               "not a noumena dead letter (no noumena.dlq headers); left as it is"]
    assert list(dict.fromkeys(stored_event_ids(noumena))) == ["reg", "start", "m0", "m1", "m2"]
    assert len(read_dead_letters(options, settings.kafka_dlq_topic)) == before + 1  # only the garbage, once
    (garbage,) = dead_letters(noumena.consumer_ports())
    assert garbage.letter.letter.attempt == 2 and garbage.letter.letter.field == "envelope"

    # the CLI prints what it could not open, and says why
    env = consumer_env(settings)
    again = subprocess.run([sys.executable, "-m", "api", "dlq", "replay"], env=env, capture_output=True, text=True,
                           cwd=REPO, timeout=120)
    assert again.returncode == 1
    assert "replayed 1: stored 0, still failing 1, not opened 1" in again.stdout
    said = " ".join(again.stderr.split())
    assert "not a noumena dead letter (no noumena.dlq headers)" in said and f"{garbage.id}: not JSON" in said

    # discarded: kept visible with its reason, never replayed again
    discarded = subprocess.run([sys.executable, "-m", "api", "dlq", "discard", garbage.id, "--reason",
                                "a test's garbage"], env=env, capture_output=True, text=True, cwd=REPO,
                               timeout=120)
    assert discarded.returncode == 0, discarded.stderr
    assert dead_letters(noumena.consumer_ports()) == []
    (kept,) = [v for v in dead_letters(noumena.consumer_ports(), include_replayed=True) if v.discarded]
    assert kept.id == garbage.id and kept.status == "discarded: a test's garbage"
    assert kept.letter.letter.value == b"\x00 not json"
    listed = subprocess.run([sys.executable, "-m", "api", "dlq", "list", "--all", "--json"], env=env,
                            capture_output=True, text=True, check=True, cwd=REPO, timeout=120)
    rows = {row["id"]: row for row in map(json.loads, listed.stdout.splitlines())}
    assert rows[garbage.id]["discarded"] == "a test's garbage" and not rows[garbage.id]["pending"]
    assert replay(noumena.consumer_ports()).replayed == 0
    with pytest.raises(ValueError, match="not dead letters: nowhere/0@1"):
        discard(noumena.consumer_ports(), ["nowhere/0@1"], "no such letter")


def _foreign_offset(options: dict[str, Any], settings: Settings) -> int:
    foreign: list[tuple[int, int]] = []
    read_dead_letters(options, settings.kafka_dlq_topic, foreign=foreign)
    ((_, offset),) = foreign
    return offset
