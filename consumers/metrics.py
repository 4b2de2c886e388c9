"""Kafka ingestion metrics as Prometheus text (exposition format 0.0.4), served with the standard library."""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

Partition = tuple[str, int]

COUNTERS = {
    "consumed": "Messages read from Kafka and handled (stored, repeated or dead-lettered).",
    "stored_messages": "Messages accepted into the event log (including repeats of an event id already stored).",
    "stored_events": "Domain events appended to the event log.",
    "repeats": "Messages whose event id was already stored (accepted, nothing appended).",
    "dead_lettered": "Messages written to the dead-letter topic.",
    "redelivered": "Messages skipped because their batch's position was already stored (redelivery).",
    "batches": "Batches written (one transaction each).",
    "retries": "Batches retried after a broker or event-store failure.",
}


class KafkaMetrics:
    """Counters per source partition and lag per partition; safe to read from another thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counters: dict[str, dict[Partition, int]] = {name: defaultdict(int) for name in COUNTERS}
        self._lag: dict[Partition, int] = {}
        self._batch_seconds: dict[Partition, float] = defaultdict(float)
        self.consolidation_signals = 0

    def add(self, name: str, partition: Partition, amount: int = 1) -> None:
        with self._lock:
            self._counters[name][partition] += amount

    def observe_batch(self, partition: Partition, seconds: float) -> None:
        with self._lock:
            self._counters["batches"][partition] += 1
            self._batch_seconds[partition] += seconds

    def set_lag(self, partition: Partition, lag: int) -> None:
        with self._lock:
            self._lag[partition] = max(0, lag)

    def forget_partition(self, partition: Partition) -> None:
        """A revoked partition's lag is another consumer's to report."""
        with self._lock:
            self._lag.pop(partition, None)

    def total(self, name: str) -> int:
        with self._lock:
            return sum(self._counters[name].values())

    def lag(self) -> dict[Partition, int]:
        with self._lock:
            return dict(self._lag)

    def render(self) -> str:
        """The Prometheus text exposition of every metric."""
        lines: list[str] = []
        with self._lock:
            for name, help_text in COUNTERS.items():
                metric = f"noumena_kafka_{name}_total"
                lines += [f"# HELP {metric} {help_text}", f"# TYPE {metric} counter"]
                lines += [f"{metric}{_labels(p)} {v}" for p, v in sorted(self._counters[name].items())]
            lines += ["# HELP noumena_kafka_batch_seconds_total Time spent writing batches.",
                      "# TYPE noumena_kafka_batch_seconds_total counter"]
            lines += [f"noumena_kafka_batch_seconds_total{_labels(p)} {v:.6f}"
                      for p, v in sorted(self._batch_seconds.items())]
            lines += ["# HELP noumena_kafka_lag Messages in the partition not yet stored (high watermark - next).",
                      "# TYPE noumena_kafka_lag gauge"]
            lines += [f"noumena_kafka_lag{_labels(p)} {v}" for p, v in sorted(self._lag.items())]
            lines += ["# HELP noumena_consolidation_signals_total session.compacted events handed to the hook.",
                      "# TYPE noumena_consolidation_signals_total counter",
                      f"noumena_consolidation_signals_total {self.consolidation_signals}"]
        return "\n".join(lines) + "\n"


def _labels(partition: Partition) -> str:
    topic = partition[0].replace("\\", "\\\\").replace('"', '\\"')
    return f'{{topic="{topic}",partition="{partition[1]}"}}'


CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def serve_metrics(render: Callable[[], str], port: int, host: str = "127.0.0.1") -> ThreadingHTTPServer:
    """Serve `render()` at http://host:port/metrics from a daemon thread; call `.shutdown()` to stop."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
            if self.path.split("?")[0] not in ("/metrics", "/"):
                self.send_error(404)
                return
            body = render().encode()
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass  # scrapes every few seconds would drown the consumer's own log

    server = ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=server.serve_forever, name="noumena-metrics", daemon=True).start()
    return server
