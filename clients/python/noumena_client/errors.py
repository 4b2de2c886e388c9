"""RFC 9457 problem documents raised as exceptions, one class per kind of answer."""

from __future__ import annotations

from typing import Any


class NoumenaError(Exception):
    """Base of every error this client raises."""


class ProblemError(NoumenaError):
    """noumena answered with a problem document: `status`, `type`, `title`, `detail`, the offending `field`,
    every field's `errors`, and for an ambiguous name its `candidates`."""

    def __init__(self, status: int, problem: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        self.status = status
        self.problem = problem
        self.type: str = str(problem.get("type", ""))
        self.title: str = str(problem.get("title", ""))
        self.detail: str = str(problem.get("detail", ""))
        self.field: str | None = problem.get("field")
        self.errors: list[dict[str, Any]] = list(problem.get("errors") or [])
        self.candidates: list[dict[str, Any]] = list(problem.get("candidates") or [])
        self.headers = headers or {}
        super().__init__(f"{status} {self.title}: {self.detail}")

    @property
    def slug(self) -> str:
        """The problem's kind: the last part of its `type` (`invalid-input`, `ambiguous-name`, ...)."""
        return self.type.rstrip("/").rsplit("/", 1)[-1]


class BadRequest(ProblemError):
    """400: the body is not JSON."""


class Unauthorized(ProblemError):
    """401: no, unknown or revoked API key."""


class Forbidden(ProblemError):
    """403: not allowed for this key (another tenant, an agent the key does not act as)."""


class NotFound(ProblemError):
    """404: not found in your tenant."""


class Conflict(ProblemError):
    """409: conflicts with the current state (a fact already ended, a forget running)."""


class PayloadTooLarge(ProblemError):
    """413: the body is over the server's limit."""


class InvalidInput(ProblemError):
    """422: invalid input; `field` names it."""


class AmbiguousName(InvalidInput):
    """422 `ambiguous-name`: a name given for a ref names several entities or none; `candidates` lists them."""


class RateLimited(ProblemError):
    """429: too many requests (retried after Retry-After before this is raised)."""


class Unavailable(ProblemError):
    """503: the read model is behind `min_position`, writers contend, or a component is down (retried after
    Retry-After before this is raised)."""


class ServerError(ProblemError):
    """500 or another unexpected status."""


_BY_STATUS: dict[int, type[ProblemError]] = {400: BadRequest, 401: Unauthorized, 403: Forbidden, 404: NotFound,
                                             409: Conflict, 413: PayloadTooLarge, 422: InvalidInput,
                                             429: RateLimited, 503: Unavailable}


def problem_for(status: int, body: Any, headers: dict[str, str] | None = None) -> ProblemError:
    """The exception for an error answer (a problem document, or whatever body came with the status)."""
    problem = body if isinstance(body, dict) else {"title": "Error", "detail": str(body)[:500]}
    kind = _BY_STATUS.get(status, ServerError)
    if status == 422 and str(problem.get("type", "")).endswith("/ambiguous-name"):
        kind = AmbiguousName
    return kind(status, problem, headers)
