"""Kafka ingestion against the real broker (`infra/scripts/kafka.sh start`; never mocked, never skipped): every input
is stored exactly once or dead-lettered with its reason; dead letters can be listed and replayed; the
consolidation hook never blocks ingestion; metrics are Prometheus text; the producer helper keys by session."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import urllib.request
from collections import Counter
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from consumers.dead_letters.records import PREFIX, SourceCoordinates
from consumers.dead_letters.replay import dead_letters, read_dead_letters
from consumers.dead_letters.sealing import unseal
from consumers.kafka_batch import BatchProcessor, Incoming
from consumers.kafka_config import connection_options, tracking_name
from consumers.kafka_consumer import SessionEventConsumer
from consumers.kafka_producer import SessionEventProducer
from consumers.metrics import serve_metrics
from domain.application.compaction_signal import CompactionSignal
from domain.application.ingestion import Ingestor
from domain.application.wire import WireError
from domain.commands import CompactSession, StartSession
from domain.ports import TrackingPosition
from infra.settings import Settings
from tests.conftest import TickingClock
from tests.kafka_support import (
    FAST_PARKING,
    Message,
    Story,
    consume_all,
    consumer_env,
    create_park_topic,
    create_tenants,
    create_topic,
    kafka_bootstrap,
    log_digest,
    produce,
    run_until_idle,
    stored_event_ids,
    story,
    unique_topic,
)

pytestmark = pytest.mark.kafka


@pytest.fixture
def bootstrap() -> str:
    return kafka_bootstrap()


@pytest.fixture
def kafka_settings(bootstrap: str, tmp_path: Path) -> Settings:
    topic = create_topic(bootstrap, unique_topic("ingest"), partitions=3)
    dlq = create_topic(bootstrap, topic + ".dlq", partitions=2)
    create_park_topic(bootstrap, topic)
    return Settings(home=tmp_path / "home", kafka_bootstrap=bootstrap, kafka_topic=topic, kafka_dlq_topic=dlq,
                    kafka_group=f"g-{topic}", kafka_batch_size=100, kafka_session_timeout_ms=6_000, **FAST_PARKING)


def offsets_of(messages: list[Message], partitions: int) -> list[SourceCoordinates | None]:
    """Where each pinned message lands: partition offsets count up in production order."""
    next_offset = Counter[int]()
    coordinates = []
    for m in messages:
        assert m.partition is not None
        coordinates.append((m.partition, next_offset[m.partition]))
        next_offset[m.partition] += 1
    return coordinates  # type: ignore[return-value]


def reference_digest(make_noumena, tmp_path: Path, s: Story) -> tuple[int, str]:  # type: ignore[no-untyped-def]
    """The log the same inputs give without Kafka: each tenant's messages through the Ingestor, in order."""
    reference = make_noumena("sqlite", home=tmp_path / "reference")
    create_tenants(reference, s.tenants)
    ingestor = Ingestor(reference.service)
    for message in s.messages:
        ingestor.ingest([message.value])
    return log_digest(reference)


def test_every_input_is_stored_once_or_dead_lettered_with_its_reason(
        kafka_settings, noumena_for, make_noumena, tmp_path):
    s = story(tenants=3, per_tenant=400, bad_every=15, duplicate_every=10, partitions=3)
    produce(kafka_settings.kafka_bootstrap, kafka_settings.kafka_topic, s.messages)
    noumena = noumena_for(kafka_settings)
    create_tenants(noumena, s.tenants)

    consumer = consume_all(noumena)

    bad = [(m, c) for m, c in zip(s.messages, offsets_of(s.messages, 3), strict=True) if not m.good]
    ids = stored_event_ids(noumena)
    letters = read_dead_letters(connection_options(kafka_settings), kafka_settings.kafka_dlq_topic)
    by_source = {(d.letter.source.partition, d.letter.source.offset): d.letter for d in letters}
    # stored + dead-lettered = distinct inputs, with no duplicates
    assert set(ids) == s.good_event_ids
    assert set(by_source) == {c for _, c in bad}
    assert len(letters) == len(by_source) == len(bad)
    # the original bytes, once opened with the subject's key (dead letters are sealed:
    # consumers/dead_letters/sealing.py)
    assert {unseal(noumena.log.keys, d.value) for d in by_source.values()} == s.bad_values
    assert log_digest(noumena) == reference_digest(make_noumena, tmp_path, s)
    m = consumer.metrics
    assert m.total("consumed") == len(s.messages)
    assert m.total("stored_messages") + m.total("dead_lettered") == len(s.messages)
    assert m.total("dead_lettered") == len(bad)
    assert m.total("repeats") == len(s.messages) - len(bad) - len(s.good_event_ids)
    # each dead letter says where it came from and why, and names the field when there is one
    fields = {letter.field for letter in by_source.values()}
    assert fields == {"envelope", "type", "payload.object", "tenant", "payload.session_id"}
    assert all(letter.reason for letter in by_source.values())
    sample = next(iter(by_source.values()))
    headers = dict(sample.headers())
    assert headers[PREFIX + "source.topic"].decode() == kafka_settings.kafka_topic
    assert {PREFIX + "reason", PREFIX + "field", PREFIX + "dead_lettered_at", PREFIX + "source.offset"} <= set(
        headers)


def test_a_restart_resumes_after_the_position_stored_in_the_log_not_kafkas(kafka_settings, noumena_for):
    s = story(tenants=1, per_tenant=150, bad_every=20, partitions=3)
    produce(kafka_settings.kafka_bootstrap, kafka_settings.kafka_topic, s.messages)
    noumena = noumena_for(kafka_settings)
    create_tenants(noumena, s.tenants)
    consume_all(noumena)
    before = log_digest(noumena)

    # A new group has no committed offsets in Kafka: only the log knows how far we got.
    other_group = noumena_for(kafka_settings.model_copy(update={"kafka_group": kafka_settings.kafka_group + "-2"}))
    again = consume_all(other_group)

    assert again.metrics.total("consumed") == 0
    assert log_digest(noumena) == before
    assert len(read_dead_letters(connection_options(kafka_settings), kafka_settings.kafka_dlq_topic)) == \
        sum(not m.good for m in s.messages)


def test_a_redelivered_batch_is_a_no_op_and_dead_letters_nothing(kafka_settings, noumena_for):
    from consumers.dead_letters.records import DeadLetterSink
    from consumers.kafka_config import dlq_producer_options

    noumena = noumena_for(kafka_settings)
    create_tenants(noumena, ["acme"])
    sink = DeadLetterSink.connect(dlq_producer_options(kafka_settings), kafka_settings.kafka_dlq_topic)
    processor = BatchProcessor(noumena.application.ingestor, sink, tracked_position=noumena.log.tracked_position)
    good = json.dumps({"event_id": "e1", "tenant": "acme", "type": "entity.registered",
                       "payload": {"ref": "person:li", "label": "Li"}}).encode()
    items = [Incoming(v, SourceCoordinates("t", 0, i), position=i) for i, v in enumerate([good, b"junk"])]
    tracking = TrackingPosition(tracking_name("t", 0), 1)

    first = processor.process(tracking, items)
    second = processor.process(tracking, items)
    sink.close()

    assert (first.accepted, len(first.dead_lettered), first.already_tracked) == (1, 1, False)
    assert (second.accepted, second.dead_lettered, second.already_tracked) == (0, [], True)
    assert noumena.log.tracked_position(tracking.name) == 1
    assert stored_event_ids(noumena) == ["e1"]


def test_dead_letters_are_listed_and_replayed_after_the_fix(kafka_settings, noumena_for):
    noumena = noumena_for(kafka_settings)
    create_tenants(noumena, ["acme"])
    message = {"event_id": "m1", "tenant": "acme", "type": "message.appended",
               "payload": {"session_id": "s9", "message_id": "m1", "role": "user", "content": "hi"}}
    agent = {"event_id": "r1", "tenant": "acme", "type": "entity.registered",
             "payload": {"ref": "agent:sales", "label": "Sales"}}
    produce(kafka_settings.kafka_bootstrap, kafka_settings.kafka_topic, [
        Message(json.dumps(message).encode(), b"acme/s9", False, partition=0),
        Message(b"\x00 still garbage", b"acme", False, partition=0),
        Message(json.dumps(agent).encode(), b"acme", True, partition=0),
    ])
    consume_all(noumena)
    env = consumer_env(kafka_settings)

    listed = subprocess.run([sys.executable, "-m", "api", "dlq", "list", "--json"], env=env, capture_output=True,
                            text=True, check=True, timeout=120)
    rows = [json.loads(line) for line in listed.stdout.splitlines()]
    assert [(r["source_offset"], r["field"], r["pending"]) for r in rows] == [
        (0, "payload.session_id", True), (1, "envelope", True)]
    table = subprocess.run([sys.executable, "-m", "api", "dlq", "list"], env=env, capture_output=True, text=True,
                           check=True, timeout=120)
    assert "not known" in table.stdout and "pending" in table.stdout

    noumena.service.execute(StartSession(tenant="acme", session_id="s9", agent="agent:sales"))  # the fix
    replayed = subprocess.run([sys.executable, "-m", "api", "dlq", "replay"], env=env, capture_output=True,
                              text=True, timeout=120)

    assert replayed.returncode == 1, replayed.stderr
    assert "replayed 2: stored 1, still failing 1" in replayed.stdout
    assert "m1" in stored_event_ids(noumena)
    pending = dead_letters(noumena.consumer_ports())
    assert [(v.letter.letter.source.offset, v.letter.letter.attempt) for v in pending] == [(1, 2)]
    assert len(dead_letters(noumena.consumer_ports(), include_replayed=True)) == 2
    again = subprocess.run([sys.executable, "-m", "api", "dlq", "replay"], env=env, capture_output=True, text=True,
                           timeout=120)
    assert "replayed 1: stored 0, still failing 1" in again.stdout
    assert stored_event_ids(noumena).count("m1") == 1


def test_session_compacted_starts_consolidation_without_ingestion_waiting(kafka_settings, noumena_for):
    release = threading.Event()
    handled: list[str] = []

    def slow_consolidation(command: CompactSession) -> None:
        release.wait(30)
        handled.append(command.session_id)

    s = story(tenants=1, per_tenant=300, partitions=3)
    compactions = sum(b'"session.compacted"' in m.value for m in s.messages)
    produce(kafka_settings.kafka_bootstrap, kafka_settings.kafka_topic, s.messages)
    noumena = noumena_for(kafka_settings)
    create_tenants(noumena, s.tenants)
    signal = CompactionSignal(slow_consolidation)

    consume_all(noumena, on_stored=signal)  # returns while the first consolidation is still blocked

    assert compactions > 0 and signal.signalled == compactions and handled == []
    assert set(stored_event_ids(noumena)) == s.good_event_ids
    release.set()
    signal.drain()
    assert len(handled) == compactions


def test_metrics_are_prometheus_text_over_http(kafka_settings, noumena_for):
    s = story(tenants=1, per_tenant=120, bad_every=30, partitions=3)
    produce(kafka_settings.kafka_bootstrap, kafka_settings.kafka_topic, s.messages)
    noumena = noumena_for(kafka_settings)
    create_tenants(noumena, s.tenants)
    consumer = SessionEventConsumer(noumena.consumer_ports())
    server = serve_metrics(0)  # prometheus_client's server of the process's one registry
    try:
        run_until_idle(consumer)
        url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            content_type, text = response.headers["Content-Type"], response.read().decode()
    finally:
        consumer.close()
        server.shutdown()

    topic = kafka_settings.kafka_topic
    partition = str(s.messages[0].partition)
    assert content_type.startswith("text/plain; version=0.0.4")
    families = {family.name: family for family in text_string_to_metric_families(text)}
    values = {(sample.name, sample.labels.get("topic"), sample.labels.get("partition")): sample.value
              for family in families.values() for sample in family.samples}
    assert values[("noumena_kafka_consumed_total", topic, partition)] == len(s.messages)
    # 4 bad inputs: those naming an unknown tenant or session were parked first, then dead-lettered from the
    # park topic once their tries ran out; the rest were dead-lettered at once
    parked = consumer.metrics.total("parked")
    assert values[("noumena_kafka_dead_lettered_total", topic, partition)] == 4 - parked
    assert values[("noumena_kafka_parked_total", topic, partition)] == parked
    assert parked > 0 and consumer.metrics.total("dead_lettered") == 4 and consumer.metrics.total("unparked") == 0
    assert values[("noumena_kafka_lag", topic, partition)] == 0
    assert families["noumena_kafka_lag"].type == "gauge"
    assert families["noumena_kafka_stored_events"].type == "counter"
    assert consumer.metrics.total("consumed") == len(s.messages)


def test_the_producer_helper_validates_and_keys_by_main_session(kafka_settings):
    from kafka import KafkaConsumer, TopicPartition

    topic = kafka_settings.kafka_topic
    envelopes = [
        {"event_id": "1", "tenant": "acme", "type": "entity.registered",
         "payload": {"ref": "person:li", "label": "Li"}},
        {"event_id": "2", "tenant": "acme", "type": "session.started",
         "payload": {"session_id": "main-1", "agent": "agent:sales"}},
        {"event_id": "3", "tenant": "acme", "type": "worker.dispatched",
         "payload": {"session_id": "main-1", "worker_session_id": "w-1", "task": "quote"}},
        {"event_id": "4", "tenant": "acme", "type": "worker.reported",
         "payload": {"session_id": "w-1", "status": "done", "summary": "sent"}},
        {"event_id": "5", "tenant": "acme", "type": "fact.asserted",
         "payload": {"subject": "person:li", "relation": "knows", "object": "person:wang",
                     "source": {"session_id": "main-1"}}},
    ]
    with SessionEventProducer(kafka_settings.kafka_bootstrap, topic) as producer:
        for envelope in envelopes:
            producer.send(envelope)
        with pytest.raises(WireError, match="payload.confidence"):
            producer.send({**envelopes[4], "payload": {**envelopes[4]["payload"], "confidence": 3}})

    reader = KafkaConsumer(bootstrap_servers=kafka_settings.kafka_bootstrap, group_id=None,
                           auto_offset_reset="earliest", consumer_timeout_ms=3_000)
    reader.assign([TopicPartition(topic, p) for p in range(3)])
    keys = {json.loads(r.value)["event_id"]: r.key for r in reader}
    reader.close()
    assert keys == {"1": b"acme", "2": b"acme/main-1", "3": b"acme/main-1", "4": b"acme/main-1",
                    "5": b"acme/main-1"}


def test_the_schema_command_documents_the_envelope_for_other_languages():
    printed = subprocess.run([sys.executable, "-m", "api", "schema"], capture_output=True, text=True, check=True,
                             timeout=120)
    schema = json.loads(printed.stdout)
    assert schema["$schema"].endswith("2020-12/schema") and "session.compacted" in printed.stdout


def test_a_crash_after_dead_lettering_and_before_the_write_repeats_dead_letters_that_fold_away(
        kafka_settings, noumena_for):
    from consumers.dead_letters.records import DeadLetter, DeadLetterSink, latest_per_input
    from consumers.kafka_config import dlq_producer_options
    from domain.errors import InfrastructureError

    class SinkThatCrashesAfterTheLastFlush(DeadLetterSink):
        """The real sink; after the batch's second flush (undecodable inputs first, then those the rules
        reject) the 'process' dies just before the write that would store the batch and its position."""

        flushes = 0

        def send_all(self, letters: list[DeadLetter]) -> None:  # type: ignore[override]
            super().send_all(letters)
            self.flushes += bool(letters)
            if letters and self.flushes == 2:
                raise InfrastructureError("simulated crash between the DLQ flush and the write")

    noumena = noumena_for(kafka_settings)
    create_tenants(noumena, ["acme"])
    s = story(tenants=1, per_tenant=60, bad_every=10, duplicate_every=7, partitions=1)
    s.messages = [Message(m.value.replace(b'"t00', b'"acme').replace(b"t00-", b"acme-"), m.key, m.good,
                          m.event_id and m.event_id.replace("t00", "acme"), 0) for m in s.messages]
    sink = SinkThatCrashesAfterTheLastFlush.connect(dlq_producer_options(kafka_settings),
                                                    kafka_settings.kafka_dlq_topic)
    processor = BatchProcessor(noumena.application.ingestor, sink, tracked_position=noumena.log.tracked_position)
    items = [Incoming(m.value, SourceCoordinates(kafka_settings.kafka_topic, 0, i), position=i)
             for i, m in enumerate(s.messages)]
    tracking = TrackingPosition(tracking_name(kafka_settings.kafka_topic, 0), len(items) - 1)

    with pytest.raises(InfrastructureError, match="simulated crash"):
        processor.process(tracking, items)
    assert noumena.log.tracked_position(tracking.name) is None and stored_event_ids(noumena) == []
    report = processor.process(tracking, items)  # the restarted consumer reads the same batch again
    sink.close()

    bad = {i for i, m in enumerate(s.messages) if not m.good}
    letters = read_dead_letters(connection_options(kafka_settings), kafka_settings.kafka_dlq_topic)
    assert len(letters) == 2 * len(bad)  # every dead letter written twice ...
    assert {d.letter.source.offset for d in latest_per_input(letters)} == bad  # ... folds to one per input
    assert len(report.dead_lettered) == len(bad)
    assert set(stored_event_ids(noumena)) == {m.event_id for m in s.messages if m.good}
    assert report.accepted + len(bad) == len(items)


def test_an_input_that_makes_noumena_itself_fail_is_dead_lettered_alone(kafka_settings, noumena_for):
    from consumers.dead_letters.records import DeadLetterSink
    from consumers.kafka_config import dlq_producer_options
    from domain.application.ontology_service import OntologyService

    class ServiceWithABugForEventIdPoison(OntologyService):
        """The real service, plus a bug: any batch holding the event id `poison` raises a non-domain error."""

        def execute_batch(self, commands, **kwargs):  # type: ignore[no-untyped-def]
            if any(command.event_id == "poison" for command in commands):
                raise RuntimeError("a bug in noumena")
            return super().execute_batch(commands, **kwargs)

    noumena = noumena_for(kafka_settings)
    create_tenants(noumena, ["acme"])
    service = ServiceWithABugForEventIdPoison(noumena.log, TickingClock())
    sink = DeadLetterSink.connect(dlq_producer_options(kafka_settings), kafka_settings.kafka_dlq_topic)
    processor = BatchProcessor(Ingestor(service), sink, tracked_position=noumena.log.tracked_position)
    values = [json.dumps({"event_id": event_id, "tenant": "acme", "type": "entity.registered",
                          "payload": {"ref": f"person:{event_id}", "label": event_id}}).encode()
              for event_id in ("a", "b", "poison", "c")]
    items = [Incoming(v, SourceCoordinates("t", 0, i), position=i) for i, v in enumerate(values)]
    tracking = TrackingPosition(tracking_name("t", 0), 3)

    report = processor.process(tracking, items)
    sink.close()

    assert [(d.source.offset, d.reason) for d in report.dead_lettered] == [
        (2, "internal error: RuntimeError('a bug in noumena')")]
    assert (report.accepted, noumena.log.tracked_position(tracking.name)) == (3, 3)
    assert stored_event_ids(noumena) == ["a", "b", "c"]


def test_a_dead_lettered_copy_is_sealed_with_its_subjects_key_and_forgotten_with_it(kafka_settings, noumena_for):
    from domain.commands import RegisterEntity

    noumena = noumena_for(kafka_settings)
    create_tenants(noumena, ["acme"])
    noumena.service.execute(RegisterEntity(tenant="acme", ref="person:zhao", label="Zhao"))
    noumena.service.execute(RegisterEntity(tenant="acme", ref="agent:a", label="assistant"))
    noumena.service.execute(StartSession(tenant="acme", session_id="s1", agent="agent:a", serving="person:zhao"))
    bad = {"event_id": "b1", "tenant": "acme", "type": "message.appended",  # role fails the schema
           "payload": {"session_id": "s1", "message_id": "m1", "role": "robot", "content": "MARKER-DLQ-ZHAO"}}
    produce(kafka_settings.kafka_bootstrap, kafka_settings.kafka_topic,
            [Message(json.dumps(bad).encode(), b"acme/s1", False, partition=0)])
    consume_all(noumena)

    (raw,) = read_dead_letters(connection_options(kafka_settings), kafka_settings.kafka_dlq_topic)
    assert raw.letter.value is not None and b"MARKER-DLQ-ZHAO" not in raw.letter.value  # sealed on the topic
    (opened,) = dead_letters(noumena.consumer_ports())
    assert opened.letter.letter.value == json.dumps(bad).encode() and not opened.forgotten

    noumena.application.forgetting.forget("acme", "person:zhao")
    (after,) = dead_letters(noumena.consumer_ports())
    assert after.forgotten and after.letter.letter.value is None
