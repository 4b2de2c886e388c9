"""`noumena consume`: the session-events topic into the event log, in a consumer group, exactly once.

The event log, not Kafka, remembers how far each partition was consumed: every batch is written with
TrackingPosition(f"kafka:{topic}:{partition}", offset of its last message) in the same transaction. On each
assignment the consumer seeks to that position + 1. Offsets are committed to Kafka too, only so lag dashboards
are right (never read back): asynchronously after each stored batch, again when idle if one did not go through,
and synchronously on close. Batches are per partition, so order is kept per partition (and producers key by
session: see consumers/kafka_producer.py).

The consumer also reads the park topic (consumers/parking.py) in the same group: inputs waiting for a dependency
are tried again there once due (a park partition is paused until its next record's `retry_at`). It joins as a
static member by default (consumers/kafka_config.py: instance_identity) and never creates topics: a missing
topic is an error naming it.
"""

from __future__ import annotations

import faulthandler
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from tenacity import Retrying, before_sleep_log, retry_if_exception_type, wait_exponential

from consumers.dead_letters.records import DeadLetter, DeadLetterSink, from_record
from consumers.dead_letters.sealing import is_sealed, seal, unseal
from consumers.kafka_batch import BatchProcessor, Incoming, is_transient
from consumers.kafka_config import (
    connection_options,
    dlq_producer_options,
    instance_identity,
    missing_topics,
    tracking_name,
)
from consumers.metrics import KafkaMetrics
from consumers.parking import Parked, ParkPolicy, retry_at_of
from consumers.ports import ConsumerPorts
from consumers.record_size import topic_max_bytes
from domain.commands import Command
from domain.errors import InfrastructureError
from domain.ports import TrackingPosition

log = logging.getLogger(__name__)

MAX_BACKOFF_S = 5.0
CLOSE_COMMIT_TIMEOUT_MS = 3_000
"""How long close waits for its offset commit (in a rebalance the coordinator may not answer): a stop is never
held up by what only dashboards read."""


def _listener_base() -> type:
    from kafka import ConsumerRebalanceListener

    return ConsumerRebalanceListener  # type: ignore[no-any-return]


METADATA_MAX_AGE_MS = 5_000
"""kafka-python 3's network thread waits in select() without a timeout when it has no timer due, and a task handed
to it from another thread can miss its wake-up: a poll then waited until the next timer, the metadata refresh
(every 5 minutes by default), and `--until-idle` runs stalled for minutes (the clean-clone CI hang). Refreshing
the metadata every 5 s keeps a timer due, so such a poll goes on within 5 s; it costs one small request."""


class _BatchesFailed(Exception):
    """Some batches of a poll failed transiently; they are read again."""


class SessionEventConsumer:
    """Consumes one topic in a consumer group into the event log through the application's ingestor; dead-letters
    what it cannot store."""

    def __init__(
        self,
        ports: ConsumerPorts,
        *,
        metrics: KafkaMetrics | None = None,
        on_stored: Callable[[Command], None] | None = None,
        consumer_options: dict[str, Any] | None = None,
    ) -> None:
        from kafka import KafkaConsumer
        from kafka.errors import KafkaError

        settings = ports.settings
        _warn_without_fast_crc()
        self.topic = settings.kafka_topic
        self.park_topic = settings.park_topic()
        self.batch_size = settings.kafka_batch_size
        self.poll_timeout_ms = settings.kafka_poll_timeout_ms
        self.metrics = metrics or KafkaMetrics()
        self._tracked_position = ports.tracked_position
        self._signal = ports.on_stored if on_stored is None else None
        self._stored: dict[Any, int | None] = {}
        self._acked: dict[Any, int] = {}
        """Per partition: the offset Kafka last confirmed as committed (the next to read)."""
        self._paused: dict[Any, int] = {}
        """Park partitions waiting for their next record's retry_at (ms since the epoch)."""
        self._group = settings.kafka_group
        self._rebalanced: list[tuple[str, list[Any]]] = []
        """Partitions revoked and assigned, in order, noted by the rebalance listener for `_apply_rebalance`."""
        self._rebalanced_lock = threading.Lock()
        self.waiting_for = "the first poll"
        """With until_idle: what the consumer last found it still waits for before it is caught up."""
        self.instance_id, self._slot = instance_identity(settings)
        options = connection_options(settings) | {
            "group_id": settings.kafka_group,
            "group_instance_id": self.instance_id,
            "client_id": self.instance_id or "noumena-consumer",
            "enable_auto_commit": False,
            "allow_auto_create_topics": False,
            "auto_offset_reset": "earliest",
            "max_poll_records": settings.kafka_batch_size,
            "session_timeout_ms": settings.kafka_session_timeout_ms,
            "heartbeat_interval_ms": max(100, min(3_000, settings.kafka_session_timeout_ms // 3)),
            "fetch_max_wait_ms": min(500, settings.kafka_poll_timeout_ms),
            "max_partition_fetch_bytes": 8 * 1024 * 1024,
            "metadata_max_age_ms": METADATA_MAX_AGE_MS,
        } | (consumer_options or {})
        try:
            try:
                self._consumer = KafkaConsumer(**options)
            except KafkaError as error:
                raise InfrastructureError(f"cannot connect to Kafka at {settings.kafka_bootstrap}: {error}") \
                    from error
            # Fetching the topics' metadata before the first join also makes the group's first assignment final:
            # otherwise kafka-python 3 sees the metadata "change" right after joining and rebalances again at
            # once, and that second, immediate rebalance can stall its join (seen with 3.0.12).
            missing = missing_topics(self._consumer, {
                self.topic: "NOUMENA_KAFKA_TOPIC", settings.kafka_dlq_topic: "NOUMENA_KAFKA_DLQ_TOPIC",
                self.park_topic: "NOUMENA_KAFKA_PARK_TOPIC"})
            if missing:
                self._consumer.close(autocommit=False)
                raise MissingTopic("; ".join(missing) + ": the consumer never creates topics; create them "
                                   "(`noumena kafka create-topics`) or fix the setting")
            keys = ports.keys
            sealer = (lambda value, coordinates, subject_of=None: seal(keys, value, coordinates, subject_of)) \
                if keys is not None else None
            plain = connection_options(settings)
            dlq_limit = topic_max_bytes(plain, settings.kafka_dlq_topic, settings.kafka_max_message_bytes)
            park_limit = topic_max_bytes(plain, self.park_topic, settings.kafka_max_message_bytes)
            self._sink = DeadLetterSink.connect(dlq_producer_options(settings), settings.kafka_dlq_topic, sealer,
                                                max(dlq_limit, park_limit))
        except BaseException:
            if self._slot is not None:
                self._slot.close()
            raise
        self._sink.max_bytes = dlq_limit
        self._sink.on_truncated = self._on_truncated
        self._park = self._sink.sharing(self.park_topic)
        self._park.max_bytes = park_limit
        self._keys = keys
        self.policy = ParkPolicy.from_settings(settings)
        # Stored compactions start consolidation on the process's background worker (it owns and closes it).
        self._processor = BatchProcessor(ports.ingestor, self._sink, tracked_position=ports.tracked_position,
                                         on_stored=on_stored or self._signal, park=self._park,
                                         policy=self.policy)
        self._consumer.subscribe([self.topic, self.park_topic], listener=self._rebalance_listener())
        log.info("consumer %s: group %s, instance id %s, DLQ limit %d bytes, parking %s", self.topic,
                 settings.kafka_group, self.instance_id or "(dynamic member)", dlq_limit,
                 f"on {self.park_topic} (every {self.policy.retry_seconds:g} s, at most "
                 f"{self.policy.max_attempts} tries and {self.policy.max_seconds:g} s)" if self.policy.enabled
                 else "off")

    def _on_truncated(self, letter: DeadLetter, size: int) -> None:
        log.warning("dead letter of %s is %d bytes, more than %s accepts (%d bytes): stored truncated with its "
                    "size and SHA-256 (the original stays at its source coordinates)", letter.source, size,
                    self._sink.topic, self._sink.max_bytes)
        self.metrics.add("dead_letters_truncated", (letter.source.topic, letter.source.partition))

    # ------------------------------------------------------------------ assignment

    def _rebalance_listener(self) -> Any:
        """kafka-python 3 calls a rebalance listener on its network thread, while this consumer's thread may be
        inside a poll: the listener only notes what changed (and pauses what it was given, so nothing of it is
        fetched before it is sought); the consumer's own thread applies it before its next poll
        (`_apply_rebalance`). Reading the event log there, or changing this consumer's state under a running round,
        would block the network loop (heartbeats too) and race with the round."""
        consumer = self

        class Listener(_listener_base()):  # type: ignore[misc]
            def on_partitions_revoked(self, revoked: Any) -> None:
                with consumer._rebalanced_lock:
                    consumer._rebalanced.append(("revoked", list(revoked)))

            def on_partitions_assigned(self, assigned: Any) -> None:
                consumer._consumer.pause(*assigned)
                with consumer._rebalanced_lock:
                    consumer._rebalanced.append(("assigned", list(assigned)))

        return Listener()

    def _apply_rebalance(self) -> None:
        """What the listener noted, in order, on this consumer's thread: forget revoked partitions; resume assigned
        ones right after the offset stored in the event log (or at their beginning)."""
        with self._rebalanced_lock:
            changes, self._rebalanced = self._rebalanced, []
        for change, partitions in changes:
            if change == "revoked":
                for tp in partitions:
                    self._stored.pop(tp, None)
                    self._acked.pop(tp, None)
                    self._paused.pop(tp, None)
                    self.metrics.forget_partition((tp.topic, tp.partition))
                self._processor.forget_heads()
                continue
            assigned = self._consumer.assignment()
            mine = [tp for tp in partitions if tp in assigned]
            self._seek_to_stored(mine)
            self._consumer.resume(*mine)

    def _seek_to_stored(self, partitions: Any) -> None:
        """Resume each partition right after the last offset stored in the event log (or at its beginning)."""
        for tp in partitions:
            stored = self._tracked_position(tracking_name(tp.topic, tp.partition))
            self._stored[tp] = stored
            if stored is None:
                self._consumer.seek_to_beginning(tp)
            else:
                self._consumer.seek(tp, stored + 1)
            log.info("assigned %s/%s: resuming after stored offset %s", tp.topic, tp.partition, stored)

    # ------------------------------------------------------------------ the loop

    def run(self, stop: threading.Event | None = None, until_idle: bool = False,
            exit_if_poll_stalls_s: float | None = None) -> None:
        """Consume until `stop` is set (or, with until_idle, until every assigned partition is stored).

        `exit_if_poll_stalls_s` (for a process of its own, such as `noumena consume`): if one poll has not
        returned after that long, print every thread's stack and exit the process with status 1, so that
        its supervisor restarts it; restarting is always safe, the log holds the position."""
        from kafka.errors import KafkaError

        stop = stop or threading.Event()
        # A failed poll or batch is tried again after a pause that doubles up to MAX_BACKOFF_S, and is cut short
        # when `stop` is set; a round without failures starts the pauses over.
        retrying = Retrying(retry=retry_if_exception_type((KafkaError, _BatchesFailed)),
                            wait=wait_exponential(multiplier=0.1, min=0.1, max=MAX_BACKOFF_S), sleep=stop.wait,
                            stop=lambda _state: stop.is_set(), before_sleep=before_sleep_log(log, logging.WARNING),
                            reraise=True)
        while not stop.is_set():
            try:
                if retrying(self._round, until_idle, exit_if_poll_stalls_s):
                    return
            except (KafkaError, _BatchesFailed):
                return  # stopped while waiting to try again

    def _round(self, until_idle: bool, exit_if_poll_stalls_s: float | None) -> bool:
        """One poll and the batches it brought; True when, with until_idle, every assigned partition is stored.
        Raises `KafkaError` when the poll fails, `_BatchesFailed` when a batch failed and will be read again."""
        self._apply_rebalance()
        self._resume_due()
        if exit_if_poll_stalls_s:
            faulthandler.dump_traceback_later(exit_if_poll_stalls_s, exit=True)
        try:
            # Up to a full batch per assigned partition: a poll's records are spread over partitions,
            # and each partition's share is written in chunks of at most batch_size.
            polled = self._consumer.poll(timeout_ms=self._poll_timeout_ms(),
                                         max_records=self.batch_size * max(1, len(self._stored)))
        finally:
            if exit_if_poll_stalls_s:
                faulthandler.cancel_dump_traceback_later()
        if not polled:
            self._update_lag()
            self._commit_stored()  # idle: whatever an asynchronous commit missed
            return until_idle and self._caught_up()
        failed = False
        commits: dict[Any, Any] = {}
        for tp, records in polled.items():
            if tp.topic == self.park_topic:
                records = self._due(tp, records)
            for start in range(0, len(records), self.batch_size):
                chunk = records[start:start + self.batch_size]
                try:
                    last = self._handle(tp, chunk)
                except Exception as error:
                    if not is_transient(error):
                        raise
                    # Nothing of this batch was stored: read it again after a pause.
                    self.metrics.add("retries", (tp.topic, tp.partition))
                    self._consumer.seek(tp, chunk[0].offset)
                    log.warning("batch %s/%s@%s failed, will retry: %r", tp.topic, tp.partition,
                                chunk[0].offset, error)
                    failed = True
                    break
                if last is not None:
                    commits[tp] = last
        self._update_lag()
        self._commit(commits)
        if failed:
            raise _BatchesFailed("retrying failed batches")
        return False

    # ------------------------------------------------------------------ parked inputs

    def _due(self, tp: Any, records: list[Any]) -> list[Any]:
        """The park records whose time has come; at the first that is not yet due the partition is paused."""
        now = _now_ms()
        for index, record in enumerate(records):
            retry_at = retry_at_of(record)
            if retry_at is not None and retry_at > now:
                self._consumer.seek(tp, record.offset)
                self._consumer.pause(tp)
                self._paused[tp] = retry_at
                return records[:index]
        return records

    def _resume_due(self) -> None:
        if not self._paused:
            return
        now = _now_ms()
        for tp, retry_at in list(self._paused.items()):
            if retry_at <= now:
                del self._paused[tp]
                self._consumer.resume(tp)

    def _poll_timeout_ms(self) -> int:
        if not self._paused:
            return self.poll_timeout_ms
        return max(1, min(self.poll_timeout_ms, min(self._paused.values()) - _now_ms()))

    def _from_park(self, record: Any) -> Incoming | None:
        """A park record as the input it holds; None (printed, counted) if it cannot be read."""
        stored = from_record(record)
        parked = Parked.from_headers(dict(record.headers or []))
        partition = (record.topic, record.partition)
        if stored is None or parked is None:
            log.warning("skipping %s/%s@%s: not a parked input (no noumena.park headers)", record.topic,
                        record.partition, record.offset)
            self.metrics.add("skipped", partition)
            return None
        letter = stored.letter
        value = letter.value
        if is_sealed(value):
            value = unseal(self._keys, value)
            if value is None:
                log.warning("skipping parked input %s (%s/%s@%s): its subject was forgotten", letter.source,
                            record.topic, record.partition, record.offset)
                self.metrics.add("skipped", partition)
                return None
        return Incoming(value=value, source=letter.source, position=record.offset, key=letter.key,
                        timestamp_ms=letter.source_timestamp_ms, headers=letter.original_headers,
                        attempt=letter.attempt, parked=parked)

    # ------------------------------------------------------------------ one batch

    def _handle(self, tp: Any, records: list[Any]) -> int | None:
        partition = (tp.topic, tp.partition)
        stored = self._stored.get(tp)
        fresh = [r for r in records if stored is None or r.offset > stored]
        if len(fresh) < len(records):
            log.info("skipped %d redelivered record(s) of %s/%s: already stored (up to offset %s)",
                     len(records) - len(fresh), tp.topic, tp.partition, stored)
            self.metrics.add("redelivered", partition, len(records) - len(fresh))
        if not fresh:
            return None
        parked_side = tp.topic == self.park_topic
        if parked_side:
            items = [item for item in map(self._from_park, fresh) if item is not None]
        else:
            items = [Incoming.from_record(r) for r in fresh]
        started = time.perf_counter()
        tracking = TrackingPosition(tracking_name(tp.topic, tp.partition), fresh[-1].offset)
        report = self._processor.process(tracking, items)
        self.metrics.observe_batch(partition, time.perf_counter() - started)
        if report.already_tracked:
            log.info("skipped %d record(s) of %s/%s: another consumer stored them first", len(fresh), tp.topic,
                     tp.partition)
            self.metrics.add("redelivered", partition, len(fresh))
            self._stored[tp] = self._tracked_position(tracking.name)
            return None
        self._stored[tp] = fresh[-1].offset
        if parked_side:
            self.metrics.add("unparked", partition, report.unparked)
            self.metrics.add("reparked", partition, len(report.parked))
        else:
            self.metrics.add("consumed", partition, len(fresh))
            self.metrics.add("parked", partition, len(report.parked))
        if report.parked:
            log.info("%s %d input(s) of %s/%s waiting for what they name (first: %s: %s)",
                     "parked again" if parked_side else "parked", len(report.parked), tp.topic, tp.partition,
                     report.parked[0].source, report.parked[0].reason)
        self.metrics.add("stored_messages", partition, report.accepted)
        self.metrics.add("stored_events", partition, report.stored_events)
        self.metrics.add("repeats", partition, report.repeats)
        self.metrics.add("dead_lettered", partition, len(report.dead_lettered))
        signalled = getattr(self._signal, "signalled", None)  # (a CompactionSignal counts what it was handed)
        if signalled is not None:
            self.metrics.consolidation_signalled(signalled)
        return fresh[-1].offset

    # ------------------------------------------------------------------ offsets for dashboards

    def _commit(self, last_offsets: dict[Any, int]) -> None:
        """Tell Kafka how far the log is, asynchronously, after each stored batch (for lag tools only: the event
        log's position is what counts)."""
        if not last_offsets:
            return
        from kafka.errors import KafkaError
        from kafka.structs import OffsetAndMetadata

        assigned = self._consumer.assignment()
        offsets = {tp: OffsetAndMetadata(offset + 1, "", -1) for tp, offset in last_offsets.items()
                   if tp in assigned}
        if not offsets:
            return
        try:
            self._consumer.commit_async(offsets, callback=self._committed)
        except KafkaError as error:
            log.debug("offset commit skipped: %r", error)

    def _committed(self, offsets: Any, response: Any) -> None:
        if isinstance(response, Exception):
            log.debug("offset commit for dashboards failed (retried when idle): %r", response)
            return
        for tp, meta in offsets.items():
            self._acked[tp] = meta.offset

    def _unacknowledged(self) -> dict[Any, int]:
        assigned = self._consumer.assignment()
        return {tp: stored for tp, stored in self._stored.items()
                if stored is not None and tp in assigned and self._acked.get(tp) != stored + 1}

    def _commit_stored(self) -> None:
        self._commit(self._unacknowledged())

    def _update_lag(self) -> None:
        from kafka.errors import KafkaError

        try:
            for tp in self._consumer.assignment():
                highwater = self._consumer.highwater(tp)
                if highwater is None:
                    continue
                stored = self._stored.get(tp)
                position = self._consumer.position(tp, timeout_ms=0) if stored is None else stored + 1
                if position is not None:
                    self.metrics.set_lag((tp.topic, tp.partition), highwater - position)
        except KafkaError as error:
            log.debug("lag not updated: %r", error)  # only a gauge; the next poll tries again

    def _caught_up(self) -> bool:
        """Every assigned partition has been read and stored up to its current end. When not, `waiting_for`
        says why (for a caller that gives up waiting: its message names what never came)."""
        from kafka.errors import KafkaError

        assignment = self._consumer.assignment()
        if not assignment:
            self.waiting_for = f"the group {self._group!r} to assign partitions of {self.topic!r} (none yet)"
            return False
        try:
            ends = self._consumer.end_offsets(list(assignment), timeout_ms=5_000)
        except KafkaError as error:
            self.waiting_for = f"the end offsets of {_names(assignment)} ({error!r})"
            return False
        behind = []
        for tp in sorted(assignment):
            stored = self._stored.get(tp, None)
            if tp not in self._stored:
                behind.append(f"{tp.topic}/{tp.partition}: assigned, not yet sought")
                continue
            next_offset = (stored + 1) if stored is not None else self._consumer.position(tp, timeout_ms=5_000)
            if next_offset is None or next_offset < ends.get(tp, 0):
                behind.append(f"{tp.topic}/{tp.partition}: next offset {next_offset}, end {ends.get(tp, 0)}")
        self.waiting_for = "; ".join(behind) if behind else "nothing (caught up)"
        return not behind

    def close(self) -> None:
        """Commit the stored positions (synchronously), then close. A static member does not leave the group:
        a process with the same instance id gets its partitions back at once; another waits for the session to
        time out."""
        from kafka.errors import KafkaError
        from kafka.structs import OffsetAndMetadata

        try:
            try:
                pending = self._unacknowledged()
                if pending:
                    self._consumer.commit({tp: OffsetAndMetadata(o + 1, "", -1) for tp, o in pending.items()},
                                          timeout_ms=CLOSE_COMMIT_TIMEOUT_MS)
                    self._acked.update({tp: o + 1 for tp, o in pending.items()})
            except KafkaError as error:
                log.warning("offsets not committed on close (lag tools may show lag that is not there): %r", error)
            self._consumer.close(autocommit=False, timeout_ms=5_000)
        finally:
            try:
                self._sink.close()
            finally:
                if self._slot is not None:
                    self._slot.close()


def _names(partitions: Any) -> str:
    return ", ".join(f"{tp.topic}/{tp.partition}" for tp in sorted(partitions))


class MissingTopic(InfrastructureError):
    """A topic the consumer needs does not exist (it never creates one)."""


def _now_ms() -> int:
    return int(time.time() * 1000)


def _warn_without_fast_crc() -> None:
    """kafka-python checks every fetched batch's CRC-32C; in pure Python that costs more than storing it."""
    from kafka.record import util

    if getattr(util, "crc32c_c", None) is None:
        log.warning("the `crc32c` package is not installed: fetches run several times slower "
                    "(pip install crc32c)")
