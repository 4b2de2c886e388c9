"""Operations: liveness, readiness (with projection lag) and Prometheus metrics. No authentication."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from api.auth import MemoryDep
from api.edge import EdgeRoute
from api.metrics import LOG_POSITION, PROJECTION_LAG, PROJECTION_POSITION, render

router = APIRouter(tags=["operations"], route_class=EdgeRoute)
READY_LAG = 10_000
"""Positions behind the log beyond which this replica says it is not ready (reads would wait too long)."""


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """The process is alive. Answered on the event loop itself (no worker thread), so a pool of threads busy
    with slow requests never delays it."""
    return {"status": "ok"}


@router.get("/readyz", responses={503: {"description": "Not ready: still starting (`start` says how far), or the"
                                                   " projector stopped or lags too far; `Retry-After` says when to"
                                                   " ask again."}})
def readyz(memory: MemoryDep, request: Request) -> JSONResponse:
    """Ready to serve: caught up with the log as it was at start and every index loaded (`start`: the phase, the
    positions applied and to apply), then while the projector runs and its lag (log positions not yet projected)
    is small. `purging` lists the tenants whose read model is still being rebuilt after a forget (their reads
    are served meanwhile, without the forgotten content)."""
    served = request.app.state.served
    follower = served.follower
    body: dict[str, Any] = {"log_position": memory.views.log_position()}
    ready = True
    if served.warmup is not None:
        body["start"] = served.warmup.progress()
        ready = served.warmup.ready
    if follower is None:
        body |= {"projector": "absent"}
    else:
        lag = follower.lag()
        body |= {"projector": "running" if follower.running else "stopped", "projection_position": follower.position,
                 "projection_lag": lag, "projector_error": follower.last_error,
                 "purging": sorted(follower.purging())}
        ready = ready and follower.running and lag <= READY_LAG and follower.last_error is None
    kafka = request.app.state.served.kafka
    if kafka is not None:
        body["kafka"] = "running" if kafka.running else f"stopped: {kafka.last_error}"
        ready = ready and kafka.running
    body["status"] = "ready" if ready else "not ready"
    return JSONResponse(body, status_code=200 if ready else 503, headers=None if ready else {"Retry-After": "1"})


@router.get("/metrics", response_class=Response, responses={200: {"content": {"text/plain": {}}}})
def metrics(memory: MemoryDep, request: Request) -> Response:
    """Prometheus text: requests and latency per route, log position, projection position and lag, the Kafka
    consumer's counters when it runs in this process, and every other metric in the registry."""
    LOG_POSITION.set(memory.views.log_position())
    progress = memory.views.read_model_progress()
    if progress is not None:
        PROJECTION_POSITION.set(progress[0])
        PROJECTION_LAG.set(progress[1])
    body, content_type = render(request.headers.get("accept"))
    return Response(body, media_type=content_type)
