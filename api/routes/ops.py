"""Operations: liveness, readiness (with projection lag) and Prometheus metrics. No authentication."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, PlainTextResponse

from api.auth import MemoryDep
from api.metrics import gauge

router = APIRouter(tags=["operations"])
READY_LAG = 10_000
"""Positions behind the log beyond which this replica says it is not ready (reads would wait too long)."""


@router.get("/healthz")
def healthz() -> dict[str, str]:
    """The process is alive."""
    return {"status": "ok"}


@router.get("/readyz", responses={503: {"description": "Not ready: the projector stopped or lags too far."}})
def readyz(memory: MemoryDep, request: Request) -> JSONResponse:
    """Ready to serve: the projector runs and its lag (log positions not yet projected) is small."""
    follower = memory.follower
    body: dict[str, Any] = {"log_position": memory.noumena.log.max_position()}
    ready = True
    if follower is None:
        body |= {"projector": "absent"}
    else:
        lag = follower.lag()
        body |= {"projector": "running" if follower.running else "stopped", "projection_position": follower.position,
                 "projection_lag": lag, "projector_error": follower.last_error}
        ready = follower.running and lag <= READY_LAG and follower.last_error is None
    kafka = getattr(request.app.state, "kafka", None)
    if kafka is not None:
        body["kafka"] = "running" if kafka.running else f"stopped: {kafka.last_error}"
        ready = ready and kafka.running
    body["status"] = "ready" if ready else "not ready"
    return JSONResponse(body, status_code=200 if ready else 503)


@router.get("/metrics", response_class=PlainTextResponse)
def metrics(memory: MemoryDep, request: Request) -> PlainTextResponse:
    """Prometheus text: requests and latency per route, log position, projection position and lag."""
    parts = [request.app.state.metrics.render(),
             gauge("noumena_log_position", "Last position in the event log.", memory.noumena.log.max_position())]
    if memory.follower is not None:
        parts += [gauge("noumena_projection_position", "Last log position applied to DuckDB.",
                        memory.follower.position),
                  gauge("noumena_projection_lag", "Log positions not yet applied to DuckDB.", memory.follower.lag())]
    kafka = getattr(request.app.state, "kafka", None)
    if kafka is not None:
        parts.append(kafka.metrics_text())
    return PlainTextResponse("".join(parts), media_type="text/plain; version=0.0.4")
