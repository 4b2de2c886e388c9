"""Request metrics in the Prometheus text format, kept in process (no client library needed)."""

from __future__ import annotations

import threading
import time
from collections import defaultdict

from starlette.types import ASGIApp, Message, Receive, Scope, Send

BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class RequestMetrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: dict[tuple[str, str, int], int] = defaultdict(int)
        self.buckets: dict[str, list[int]] = defaultdict(lambda: [0] * (len(BUCKETS) + 1))
        self.sums: dict[str, float] = defaultdict(float)

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        with self._lock:
            self.requests[(method, route, status)] += 1
            counts = self.buckets[route]
            for i, bound in enumerate(BUCKETS):
                if seconds <= bound:
                    counts[i] += 1
            counts[-1] += 1
            self.sums[route] += seconds

    def asgi(self, app: ASGIApp) -> ASGIApp:
        """Pure ASGI middleware (no request/response objects): it costs microseconds on the hot path."""

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
                self.observe(scope["method"], route, status, time.perf_counter() - started)

        return measured

    def render(self) -> str:
        lines = ["# HELP noumena_http_requests_total HTTP requests by method, route template and status.",
                 "# TYPE noumena_http_requests_total counter"]
        with self._lock:
            for (method, route, status), count in sorted(self.requests.items()):
                lines.append(f'noumena_http_requests_total{{method="{method}",route="{route}",status="{status}"}}'
                             f" {count}")
            lines += ["# HELP noumena_http_request_seconds HTTP request latency by route template.",
                      "# TYPE noumena_http_request_seconds histogram"]
            for route, counts in sorted(self.buckets.items()):
                for bound, count in zip(BUCKETS, counts, strict=False):
                    lines.append(f'noumena_http_request_seconds_bucket{{route="{route}",le="{bound}"}} {count}')
                lines.append(f'noumena_http_request_seconds_bucket{{route="{route}",le="+Inf"}} {counts[-1]}')
                lines.append(f'noumena_http_request_seconds_sum{{route="{route}"}} {self.sums[route]:.6f}')
                lines.append(f'noumena_http_request_seconds_count{{route="{route}"}} {counts[-1]}')
        return "\n".join(lines) + "\n"


def gauge(name: str, help_text: str, value: float) -> str:
    return f"# HELP {name} {help_text}\n# TYPE {name} gauge\n{name} {value}\n"
