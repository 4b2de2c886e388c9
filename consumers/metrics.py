"""Kafka ingestion metrics, with `prometheus_client`, in its default registry (the one registry noumena exports:
see `api/metrics.py`). `noumena consume --metrics-port` serves it with prometheus_client's own server
(`serve_metrics`); an API process that runs the consumer serves it at `/metrics`."""

from __future__ import annotations

import threading
from collections import defaultdict
from wsgiref.simple_server import WSGIServer

from prometheus_client import Counter, Gauge, disable_created_metrics, start_http_server

disable_created_metrics()

Partition = tuple[str, int]

COUNTERS = {
    "consumed": "Messages read from the session-events topic and handled (stored, repeated, parked or dead-lettered).",
    "stored_messages": "Messages accepted into the event log (including repeats of an event id already stored).",
    "stored_events": "Domain events appended to the event log.",
    "repeats": "Messages whose event id was already stored (accepted, nothing appended).",
    "dead_lettered": "Messages written to the dead-letter topic.",
    "redelivered": "Messages skipped because their batch's position was already stored (redelivery).",
    "batches": "Batches written (one transaction each).",
    "retries": "Batches retried after a broker or event-store failure.",
    "parked": "Inputs parked to wait for what they name (tenant, session, entity, fact) instead of dead-lettered.",
    "reparked": "Parked inputs tried again and parked again (still waiting, or waiting behind one of their key).",
    "unparked": "Parked inputs stored once what they waited for was there.",
    "skipped": "Park records skipped: their subject was forgotten, or they are not noumena's (each is logged).",
    "dead_letters_truncated": "Dead letters stored truncated because the whole would exceed the DLQ topic's limit.",
}
_PARTITION = ["topic", "partition"]
_COUNTERS = {name: Counter(f"noumena_kafka_{name}", help_text, _PARTITION) for name, help_text in COUNTERS.items()}
_BATCH_SECONDS = Counter("noumena_kafka_batch_seconds", "Time spent writing batches.", _PARTITION)
_LAG = Gauge("noumena_kafka_lag", "Messages in the partition not yet stored (high watermark - next).", _PARTITION)
_CONSOLIDATION_SIGNALS = Counter("noumena_consolidation_signals", "session.compacted events handed to the hook.")


class KafkaMetrics:
    """One consumer's view of the Kafka metrics: it adds to the process's counters (by source partition) and
    sets the lag of the partitions it is assigned; `total` and `lag` answer for this consumer alone (the
    counters in the registry add up every consumer of the process)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._totals: dict[str, int] = defaultdict(int)
        self._lag: dict[Partition, int] = {}
        self._signals_seen = 0

    def add(self, name: str, partition: Partition, amount: int = 1) -> None:
        _COUNTERS[name].labels(partition[0], str(partition[1])).inc(amount)
        with self._lock:
            self._totals[name] += amount

    def observe_batch(self, partition: Partition, seconds: float) -> None:
        self.add("batches", partition)
        _BATCH_SECONDS.labels(partition[0], str(partition[1])).inc(seconds)

    def set_lag(self, partition: Partition, lag: int) -> None:
        lag = max(0, lag)
        _LAG.labels(partition[0], str(partition[1])).set(lag)
        with self._lock:
            self._lag[partition] = lag

    def forget_partition(self, partition: Partition) -> None:
        """A revoked partition's lag is another consumer's to report."""
        with self._lock:
            known = self._lag.pop(partition, None)
        if known is not None:
            try:
                _LAG.remove(partition[0], str(partition[1]))
            except KeyError:  # (already removed)
                pass

    def consolidation_signalled(self, count: int) -> None:
        """The hook's running count of signals: the counter moves on by what is new."""
        with self._lock:
            new, self._signals_seen = count - self._signals_seen, max(count, self._signals_seen)
        if new > 0:
            _CONSOLIDATION_SIGNALS.inc(new)

    def total(self, name: str) -> int:
        with self._lock:
            return self._totals[name]

    def lag(self) -> dict[Partition, int]:
        with self._lock:
            return dict(self._lag)


def serve_metrics(port: int, host: str = "127.0.0.1") -> WSGIServer:
    """Serve the registry at http://host:port/metrics with prometheus_client's server (a daemon thread); call
    `.shutdown()` to stop it. Port 0 picks a free port (`server.server_address[1]`)."""
    server, _thread = start_http_server(port, addr=host)
    return server
