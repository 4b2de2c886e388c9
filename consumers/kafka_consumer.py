"""`noumena consume`: the session-events topic into the event log, in a consumer group, exactly once.

The event log, not Kafka, remembers how far each partition was consumed: every batch is written with
TrackingPosition(f"kafka:{topic}:{partition}", offset of its last message) in the same transaction. On each
assignment the consumer seeks to that position + 1. Offsets are committed to Kafka afterwards only so lag
dashboards work; they are never read back. Batches are per partition, so order is kept per partition (and
producers key by session: see consumers/kafka_producer.py).
"""

from __future__ import annotations

import faulthandler
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from tenacity import Retrying, before_sleep_log, retry_if_exception_type, wait_exponential

from consumers.dead_letters import DeadLetterSink
from consumers.dlq_sealing import seal
from consumers.kafka_batch import BatchProcessor, Incoming, is_transient
from consumers.kafka_config import connection_options, dlq_producer_options, tracking_name
from consumers.metrics import KafkaMetrics
from domain.commands import Command
from domain.errors import InfrastructureError
from domain.ports import TrackingPosition
from infra.bootstrap import Noumena

log = logging.getLogger(__name__)

MAX_BACKOFF_S = 5.0
COMMIT_INTERVAL_S = 1.0


def _listener_base() -> type:
    from kafka import ConsumerRebalanceListener

    return ConsumerRebalanceListener  # type: ignore[no-any-return]


class _BatchesFailed(Exception):
    """Some batches of a poll failed transiently; they are read again."""


class SessionEventConsumer:
    """Consumes one topic in a consumer group into one Noumena's event log; dead-letters what it cannot store."""

    def __init__(
        self,
        noumena: Noumena,
        *,
        metrics: KafkaMetrics | None = None,
        on_stored: Callable[[Command], None] | None = None,
        consumer_options: dict[str, Any] | None = None,
    ) -> None:
        from kafka import KafkaConsumer
        from kafka.errors import KafkaError

        settings = noumena.settings
        _warn_without_fast_crc()
        self.topic = settings.kafka_topic
        self.batch_size = settings.kafka_batch_size
        self.poll_timeout_ms = settings.kafka_poll_timeout_ms
        self.metrics = metrics or KafkaMetrics()
        self._noumena = noumena
        # Stored compactions start consolidation on the Noumena's background worker (it owns and closes it).
        self._signal = noumena.on_stored if on_stored is None else None
        keys = noumena.log.keys
        sealer = (lambda value, coordinates: seal(keys, value, coordinates)) if keys is not None else None
        self._sink = DeadLetterSink.connect(dlq_producer_options(settings), settings.kafka_dlq_topic, sealer)
        self._processor = BatchProcessor(noumena.service, self._sink, tracked_position=noumena.log.tracked_position,
                                         on_stored=on_stored or self._signal)
        self._stored: dict[Any, int | None] = {}
        self._uncommitted: dict[Any, int] = {}
        self._committed_at = 0.0
        options = connection_options(settings) | {
            "group_id": settings.kafka_group,
            "group_instance_id": settings.kafka_instance_id or None,
            "client_id": settings.kafka_instance_id or "noumena-consumer",
            "enable_auto_commit": False,
            "auto_offset_reset": "earliest",
            "max_poll_records": settings.kafka_batch_size,
            "session_timeout_ms": settings.kafka_session_timeout_ms,
            "heartbeat_interval_ms": max(100, min(3_000, settings.kafka_session_timeout_ms // 3)),
            "fetch_max_wait_ms": min(500, settings.kafka_poll_timeout_ms),
            "max_partition_fetch_bytes": 8 * 1024 * 1024,
        } | (consumer_options or {})
        try:
            self._consumer = KafkaConsumer(**options)
        except KafkaError as error:
            self._sink.close()
            raise InfrastructureError(f"cannot connect to Kafka at {settings.kafka_bootstrap}: {error}") from error
        self._consumer.subscribe([self.topic], listener=self._rebalance_listener())
        # Fetching the topic's metadata after subscribing and before the first join makes the group's first
        # assignment final: otherwise kafka-python 3 sees the metadata "change" right after joining and
        # rebalances again at once, and that second, immediate rebalance can stall its join (seen with 3.0.12).
        if not self._consumer.partitions_for_topic(self.topic):
            log.warning("topic %s has no partitions yet (missing, or being created)", self.topic)

    # ------------------------------------------------------------------ assignment

    def _rebalance_listener(self) -> Any:
        consumer = self

        class Listener(_listener_base()):  # type: ignore[misc]
            def on_partitions_revoked(self, revoked: Any) -> None:
                for tp in revoked:
                    consumer._stored.pop(tp, None)
                    consumer.metrics.forget_partition((tp.topic, tp.partition))

            def on_partitions_assigned(self, assigned: Any) -> None:
                consumer._seek_to_stored(assigned)

        return Listener()

    def _seek_to_stored(self, partitions: Any) -> None:
        """Resume each partition right after the last offset stored in the event log (or at its beginning)."""
        for tp in partitions:
            stored = self._noumena.log.tracked_position(tracking_name(tp.topic, tp.partition))
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
        if exit_if_poll_stalls_s:
            faulthandler.dump_traceback_later(exit_if_poll_stalls_s, exit=True)
        try:
            # Up to a full batch per assigned partition: a poll's records are spread over partitions,
            # and each partition's share is written in chunks of at most batch_size.
            polled = self._consumer.poll(timeout_ms=self.poll_timeout_ms,
                                         max_records=self.batch_size * max(1, len(self._stored)))
        finally:
            if exit_if_poll_stalls_s:
                faulthandler.cancel_dump_traceback_later()
        if not polled:
            self._update_lag()
            return until_idle and self._caught_up()
        failed = False
        commits: dict[Any, Any] = {}
        for tp, records in polled.items():
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
        self._commit_for_dashboards(commits)
        if failed:
            raise _BatchesFailed("retrying failed batches")
        return False

    def _handle(self, tp: Any, records: list[Any]) -> int | None:
        partition = (tp.topic, tp.partition)
        stored = self._stored.get(tp)
        fresh = [r for r in records if stored is None or r.offset > stored]
        self.metrics.add("redelivered", partition, len(records) - len(fresh))
        if not fresh:
            return None
        started = time.perf_counter()
        tracking = TrackingPosition(tracking_name(tp.topic, tp.partition), fresh[-1].offset)
        report = self._processor.process(tracking, [Incoming.from_record(r) for r in fresh])
        self.metrics.observe_batch(partition, time.perf_counter() - started)
        if report.already_tracked:
            self.metrics.add("redelivered", partition, len(fresh))
            self._stored[tp] = self._noumena.log.tracked_position(tracking.name)
            return None
        self._stored[tp] = fresh[-1].offset
        self.metrics.add("consumed", partition, len(fresh))
        self.metrics.add("stored_messages", partition, report.accepted)
        self.metrics.add("stored_events", partition, report.stored_events)
        self.metrics.add("repeats", partition, report.repeats)
        self.metrics.add("dead_lettered", partition, len(report.dead_lettered))
        if self._signal is not None:
            self.metrics.consolidation_signalled(self._signal.signalled)
        return fresh[-1].offset

    def _commit_for_dashboards(self, last_offsets: dict[Any, int]) -> None:
        """Tell Kafka how far we are, at most once a second: for lag tools only, the event log's position is
        what counts (a round trip per small batch would cost more than the batch)."""
        self._uncommitted.update(last_offsets)
        now = time.monotonic()
        if not self._uncommitted or now - self._committed_at < COMMIT_INTERVAL_S:
            return
        from kafka.errors import KafkaError
        from kafka.structs import OffsetAndMetadata

        assigned = self._consumer.assignment()
        offsets = {tp: OffsetAndMetadata(offset + 1, "", -1) for tp, offset in self._uncommitted.items()
                   if tp in assigned}
        self._uncommitted, self._committed_at = {}, now
        if not offsets:
            return
        try:
            self._consumer.commit_async(offsets, callback=_log_commit_failure)
        except KafkaError as error:
            log.debug("offset commit skipped: %r", error)

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
        """Every assigned partition has been read and stored up to its current end."""
        from kafka.errors import KafkaError

        assignment = self._consumer.assignment()
        if not assignment:
            return False
        try:
            ends = self._consumer.end_offsets(list(assignment), timeout_ms=5_000)
        except KafkaError:
            return False
        for tp in assignment:
            stored = self._stored.get(tp, None)
            if tp not in self._stored:
                return False  # assigned, not yet sought
            next_offset = (stored + 1) if stored is not None else self._consumer.position(tp, timeout_ms=5_000)
            if next_offset is None or next_offset < ends.get(tp, 0):
                return False
        return True

    def close(self) -> None:
        """Leave the group (a static member keeps its partitions until its session times out)."""
        try:
            self._consumer.close(autocommit=False, timeout_ms=5_000)
        finally:
            self._sink.close()


def _log_commit_failure(offsets: Any, response: Any) -> None:
    if isinstance(response, Exception):
        log.debug("offset commit for dashboards failed: %r", response)


def _warn_without_fast_crc() -> None:
    """kafka-python checks every fetched batch's CRC-32C; in pure Python that costs more than storing it."""
    from kafka.record import util

    if getattr(util, "crc32c_c", None) is None:
        log.warning("the `crc32c` package is not installed: fetches run several times slower "
                    "(pip install crc32c)")
