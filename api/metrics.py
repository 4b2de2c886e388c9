"""Request metrics of the HTTP API, with `prometheus_client`.

Every metric noumena exports lives in prometheus_client's default registry (`REGISTRY`): these, the Kafka
consumer's (`consumers/metrics.py`) and the event log's (`infra/adapters/eventlog.py`). The API serves the whole
registry at `/metrics` (`render`); `noumena consume --metrics-port` serves it with prometheus_client's own server.
"""

from __future__ import annotations

import time

from prometheus_client import REGISTRY, Counter, Gauge, Histogram, disable_created_metrics
from prometheus_client.exposition import choose_encoder
from starlette.types import ASGIApp, Message, Receive, Scope, Send

disable_created_metrics()  # (no `_created` series beside every counter: our dashboards never used them)

BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
REQUESTS = Counter("noumena_http_requests", "HTTP requests by method, route template and status.",
                   ["method", "route", "status"])
LATENCY = Histogram("noumena_http_request_seconds", "HTTP request latency by route template.", ["route"],
                    buckets=BUCKETS)
LOG_POSITION = Gauge("noumena_log_position", "Last position in the event log.")
PROJECTION_POSITION = Gauge("noumena_projection_position", "Last log position applied to DuckDB.")
PROJECTION_LAG = Gauge("noumena_projection_lag", "Log positions not yet applied to DuckDB.")


def measure_requests(app: ASGIApp) -> ASGIApp:
    """Pure ASGI middleware (no request/response objects): each request counted by method, route template and
    status, and its latency observed by route template."""

    async def measured(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await app(scope, receive, sending)
        finally:
            route = getattr(scope.get("route"), "path", None)
            path = scope.get("path", "")
            if route is None:
                route = "unmatched"
            elif path.startswith("/v1/") and not route.startswith("/v1"):
                route = "/v1" + route  # routers nest: a route knows only its path inside /v1
            REQUESTS.labels(scope["method"], route, str(status)).inc()
            LATENCY.labels(route).observe(time.perf_counter() - started)

    return measured


def render(accept: str | None) -> tuple[bytes, str]:
    """Every metric in the registry, in the format the scraper's `Accept` header asks for (Prometheus text by
    default, or OpenMetrics), as prometheus_client's own server answers; and its content type."""
    encoder, content_type = choose_encoder(accept or "")
    return encoder(REGISTRY), content_type
