"""The FastAPI application factory. Nothing starts at import: `create_app` builds, the lifespan starts the
projector (and the Kafka consumer when configured) and stops them on shutdown."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from api.edge import RequestEdge
from api.explorer import mount_explorer
from api.metrics import measure_requests
from api.operation_ids import operation_id
from api.problems import ApiProblem, FieldError, Problem, install_problem_handlers, problem_response
from api.routes import (
    admin,
    contexts,
    entities,
    events,
    facts,
    forget,
    graph,
    memory,
    ops,
    perspectives,
    search,
    sessions,
)
from domain.application.wire import envelope_schema
from domain.ports import PerspectiveEngine
from infra.bootstrap import Noumena, api_keys, serve

log = logging.getLogger(__name__)

DESCRIPTION = """noumena's HTTP API: one event-sourced ontology per organization, one perspective per agent.

**Authentication.** `Authorization: Bearer nk_...`: an API key names exactly one tenant, and every route works in
that tenant only (the tenant never comes from a body, a path or a query). `/v1/admin/*` takes the admin key.

**Read-your-writes.** A read never answers from a state older than the writes this replica acknowledged (it waits,
bounded, for its read side to apply them). Every write returns `position`; pass it as `min_position` to a read
through another replica and the read waits (bounded) until that replica has it.

**Errors** are RFC 9457 problem documents (`application/problem+json`) naming the offending field.

**Limits.** A body carries at most `NOUMENA_API_MAX_BODY_BYTES` (default 8 MiB; 413 beyond), and is read only
after the key was checked (401 first); it must arrive whole within `NOUMENA_API_BODY_TIMEOUT_SECONDS` (default
30 s; 408 beyond), nest arrays and objects at most 64 deep (400 beyond) and name no field a route does not take
(422). Timestamps are ISO 8601 strings with an offset, between 0001-01-02 and
9999-12-30 in UTC; booleans and numbers are JSON booleans and numbers (no coercion from strings or 0/1); text is
valid Unicode (no lone surrogates); refs, relations and ids match the patterns in this document, to the true end.
"""

ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": Problem, "description": text, "content": {"application/problem+json": {}}}
    for status, text in {400: "The body is not JSON, or nests arrays and objects deeper than 64 levels.",
                         401: "No, unknown or revoked API key (any route).",
                         403: "Not allowed for this key (another tenant's envelope, an agent-scoped key asking or"
                              " writing beyond its agents); the problem names the field.",
                         404: "Not found in your tenant.", 409: "Conflicts with the current state.",
                         408: "The body did not arrive whole in time (NOUMENA_API_BODY_TIMEOUT_SECONDS).",
                         413: "The body is over the size limit (NOUMENA_API_MAX_BODY_BYTES).",
                         422: "Invalid input; the problem names the field.",
                         503: "The read side did not reach this replica's writes or `min_position` in time, or"
                              " a write waited too long for its turn: retry after `Retry-After`."}.items()
}


class _Measured:
    """Request metrics around the whole app (see api/metrics.py)."""

    def __init__(self, app: Any) -> None:
        self._app = measure_requests(app)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self._app(scope, receive, send)


def _describe_envelopes(app: FastAPI) -> None:
    """`POST /v1/events` takes envelopes as plain objects (each is parsed by the wire rules, so that an error
    names the envelope's index); the OpenAPI document describes them with the envelope union itself, its
    definitions added to the components as `Wire...`, so a client generating requests from the document makes
    envelopes of a known `type` with their payload's fields."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        schema = build()
        envelope = envelope_schema("#/components/schemas/Wire{model}")
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        components.update({f"Wire{name}": definition for name, definition in envelope.pop("$defs", {}).items()})
        events = components.get("EventsCreate", {}).get("properties", {}).get("events")
        if events is not None:
            events["items"] = envelope
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


def create_app(noumena: Noumena, *, start_projector: bool = True, start_kafka: bool = True,
               perspective_engine: PerspectiveEngine | None = None) -> FastAPI:
    """The API over one Noumena. The projector runs in this process (it owns the DuckDB file).
    `perspective_engine` replaces the perspective engine built from the log (benchmarks)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.served = serve(noumena, projector=start_projector, kafka=start_kafka,
                                 perspectives=perspective_engine)
        app.state.memory = app.state.served.application
        try:
            yield
        finally:
            app.state.served.stop()

    app = FastAPI(title="noumena", version="1.0.0", description=DESCRIPTION, lifespan=lifespan,
                  openapi_url="/v1/openapi.json", docs_url="/v1/docs", redoc_url=None,
                  generate_unique_id_function=operation_id)
    app.state.settings = noumena.settings
    app.state.keys = api_keys(noumena.settings)
    app.add_middleware(RequestEdge, limit=noumena.settings.api_max_body_bytes,
                       body_timeout=noumena.settings.api_body_timeout_seconds)
    app.add_middleware(_Measured)
    install_problem_handlers(app)

    @app.exception_handler(ValidationError)
    async def _model_validation(request: Request, error: ValidationError) -> JSONResponse:
        first = error.errors()[0]
        field = ".".join(str(p) for p in first.get("loc", ())) or "body"
        return problem_response(request, ApiProblem(422, "invalid-input", "Invalid input", f"{field}: {first['msg']}",
                                                    field=field, errors=[FieldError(field=field,
                                                                                    detail=first["msg"])]))

    _describe_envelopes(app)
    v1 = APIRouter(prefix="/v1", responses=ERROR_RESPONSES)
    for module in (events, entities, facts, graph, perspectives, search, memory, sessions, contexts, forget, admin):
        v1.include_router(module.router)
    app.include_router(v1)
    app.include_router(ops.router)
    mount_explorer(app)
    return app
