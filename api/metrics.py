"""Request metrics in the Prometheus text format, kept in process (no client library needed)."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response

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

    async def middleware(self, request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        started = time.perf_counter()
        response = await call_next(request)
        route = getattr(request.scope.get("route"), "path", None)
        if route is None:
            route = "unmatched"
        elif request.url.path.startswith("/v1/") and not route.startswith("/v1"):
            route = "/v1" + route  # routers nest: a route knows only its path inside /v1
        self.observe(request.method, route, response.status_code, time.perf_counter() - started)
        return response

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
