"""RFC 9457 problem documents: every error the API returns is one, with the offending field named.

Only this module (and the routes) know HTTP status codes. Domain errors are mapped here, by class.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from domain.application.entity_finder import AmbiguousName
from domain.application.use_cases.errors import BatchRejected, ProjectionBehind, TenantMismatch
from domain.errors import (
    ConcurrencyError,
    DomainError,
    EventCorrupted,
    FactNotCurrent,
    ForgetRunning,
    InfrastructureError,
    NotPermitted,
    NoumenaError,
    SessionAlreadyEnded,
    SessionConflict,
    SubjectWasForgotten,
    TenantAlreadyExists,
    UnknownApiKey,
    UnknownFact,
    UnknownPerspective,
)

log = logging.getLogger(__name__)
PROBLEM_TYPE = "https://noumena.dev/problems/"
MEDIA_TYPE = "application/problem+json"


class FieldError(BaseModel):
    field: str = Field(description="Where the input is wrong, as a dotted path (`body.confidence`).")
    detail: str
    index: int | None = Field(default=None, description="For a batch: which item.")


class Candidate(BaseModel):
    ref: str
    label: str
    match: str = Field(description="How the name matched it (see `GET /v1/entities`).")


class Problem(BaseModel):
    """An RFC 9457 problem document."""

    type: str = Field(examples=[PROBLEM_TYPE + "invalid-input"])
    title: str = Field(examples=["Invalid input"])
    status: int = Field(examples=[422])
    detail: str = Field(examples=["body.confidence: Input should be less than or equal to 1"])
    instance: str | None = Field(default=None, examples=["/v1/facts"])
    field: str | None = Field(default=None, description="The first offending field, as a dotted path.")
    errors: list[FieldError] = Field(default_factory=list)
    candidates: list[Candidate] | None = Field(default=None, description="For `ambiguous-name`: the entities the"
                                               " name may mean; pass one's ref instead.")


class ApiProblem(Exception):
    """Raised by routes to answer with a problem document."""

    def __init__(self, status: int, slug: str, title: str, detail: str, *, field: str | None = None,
                 errors: list[FieldError] | None = None, headers: dict[str, str] | None = None,
                 candidates: list[Candidate] | None = None) -> None:
        super().__init__(detail)
        self.status, self.slug, self.title, self.detail = status, slug, title, detail
        self.field, self.errors, self.headers = field, errors or [], headers or {}
        self.candidates = candidates


def problem_response(request: Request, problem: ApiProblem) -> JSONResponse:
    body = Problem(type=PROBLEM_TYPE + problem.slug, title=problem.title, status=problem.status,
                   detail=problem.detail, instance=request.url.path, field=problem.field, errors=problem.errors,
                   candidates=problem.candidates)
    return JSONResponse(body.model_dump(mode="json", exclude_none=True), status_code=problem.status,
                        media_type=MEDIA_TYPE, headers=problem.headers)


def not_found(what: str, field: str) -> ApiProblem:
    return ApiProblem(404, "not-found", "Not found", what, field=field)


def _domain_problem(error: DomainError) -> ApiProblem:
    if isinstance(error, BatchRejected):
        errors = [FieldError(field=r.field, detail=r.detail, index=r.index) for r in error.rejections]
        return ApiProblem(422, "batch-rejected", "Batch rejected; nothing was written", str(error),
                          field=errors[0].field if errors else None, errors=errors)
    if isinstance(error, TenantMismatch):
        return ApiProblem(403, "tenant-mismatch", "Not your tenant", str(error), field=error.field,
                          errors=[FieldError(field=error.field or "tenant", detail=str(error), index=error.index)])
    if isinstance(error, AmbiguousName):
        return ApiProblem(422, "ambiguous-name", "The name does not say which entity", error.message,
                          field=error.field, errors=[FieldError(field=error.field or "name", detail=error.message)],
                          candidates=[Candidate(ref=c.ref, label=c.label, match=c.match) for c in error.candidates])
    if isinstance(error, NotPermitted):
        return ApiProblem(403, "forbidden", "Not permitted for this key", error.message, field=error.field)
    if isinstance(error, UnknownFact):
        return ApiProblem(404, "not-found", "Not found", error.message, field=error.field)
    if isinstance(error, FactNotCurrent | SessionConflict | SessionAlreadyEnded | TenantAlreadyExists
                  | SubjectWasForgotten | ForgetRunning):
        return ApiProblem(409, "conflict", "Conflict with the current state", error.message, field=error.field)
    field = error.field
    return ApiProblem(422, "invalid-input", "Invalid input", error.message, field=field,
                      errors=[FieldError(field=field, detail=error.message)] if field else [])


def _location(loc: tuple[Any, ...] | list[Any]) -> str:
    return ".".join(str(part) for part in loc) or "request"


def install_problem_handlers(app: FastAPI) -> None:
    """Every error becomes a problem document: validation, domain, HTTP, infrastructure and the unexpected."""

    @app.exception_handler(ApiProblem)
    async def _api_problem(request: Request, error: ApiProblem) -> JSONResponse:
        return problem_response(request, error)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, error: RequestValidationError) -> JSONResponse:
        if any(e.get("type") == "json_invalid" for e in error.errors()):
            return problem_response(request, ApiProblem(400, "malformed-json", "The body is not JSON",
                                                        "the body could not be decoded as JSON", field="body"))
        errors = [FieldError(field=_location(e.get("loc", ())), detail=str(e.get("msg", "invalid")))
                  for e in error.errors()]
        first = errors[0] if errors else FieldError(field="request", detail="invalid request")
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        return problem_response(request, ApiProblem(422, "invalid-input", "Invalid input",
                                                    f"{first.field}: {first.detail}{more}", field=first.field,
                                                    errors=errors))

    @app.exception_handler(DomainError)
    async def _domain(request: Request, error: DomainError) -> JSONResponse:
        return problem_response(request, _domain_problem(error))

    @app.exception_handler(UnknownApiKey)
    async def _unknown_key(request: Request, error: UnknownApiKey) -> JSONResponse:
        return problem_response(request, not_found(str(error), "key_id"))

    @app.exception_handler(UnknownPerspective)
    async def _unknown_perspective(request: Request, error: UnknownPerspective) -> JSONResponse:
        return problem_response(request, not_found(str(error), "path.perspective_id"))

    @app.exception_handler(ProjectionBehind)
    async def _behind(request: Request, error: ProjectionBehind) -> JSONResponse:
        return problem_response(request, ApiProblem(503, "projection-behind", "The read model is behind",
                                                    str(error), field="min_position",
                                                    headers={"Retry-After": "1"}))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, error: StarletteHTTPException) -> JSONResponse:
        titles = {400: "Bad request", 401: "Unauthorized", 403: "Forbidden", 404: "Not found",
                  405: "Method not allowed",
                  406: "Not acceptable", 413: "Payload too large", 415: "Unsupported media type"}
        slug = titles.get(error.status_code, "error").lower().replace(" ", "-")
        problem = ApiProblem(error.status_code, slug, titles.get(error.status_code, "Error"), str(error.detail),
                             headers=dict(error.headers or {}))
        return problem_response(request, problem)

    @app.exception_handler(ConcurrencyError)
    async def _contended(request: Request, error: ConcurrencyError) -> JSONResponse:
        log.warning("write refused on %s: %s", request.url.path, error)
        return problem_response(request, ApiProblem(503, "write-contended", "Other writers hold the tenant",
                                                    str(error), headers={"Retry-After": "1"}))

    @app.exception_handler(InfrastructureError)
    async def _infrastructure(request: Request, error: InfrastructureError) -> JSONResponse:
        log.error("infrastructure error on %s: %r", request.url.path, error)
        return problem_response(request, ApiProblem(503, "unavailable", "A component is unavailable", str(error),
                                                    headers={"Retry-After": "1"}))

    @app.exception_handler(EventCorrupted)
    async def _corrupted(request: Request, error: EventCorrupted) -> JSONResponse:
        return problem_response(request, ApiProblem(500, "corrupted-event", "A stored event is corrupted",
                                                    str(error)))

    @app.exception_handler(NoumenaError)
    async def _noumena(request: Request, error: NoumenaError) -> JSONResponse:
        return problem_response(request, ApiProblem(422, "invalid-input", "Invalid input", str(error)))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, error: Exception) -> JSONResponse:
        log.exception("unexpected error on %s", request.url.path)
        return problem_response(request, ApiProblem(500, "internal", "Internal error",
                                                    "an unexpected error; it was logged"))
