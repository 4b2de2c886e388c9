"""What the sync and async clients share: how a call is described, how an answer becomes a model or an
exception, and how long to wait before retrying a 503 or 429."""

from __future__ import annotations

import email.utils
import time
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import httpx
from pydantic import BaseModel

from noumena_client.errors import problem_for

RETRIED = (429, 503)
T = TypeVar("T")


@dataclass
class Call(Generic[T]):
    """One HTTP call answering a `T`: `read` calls carry `min_position` (read-your-writes), `write` calls update
    it."""

    method: str
    path: str
    params: dict[str, Any] = field(default_factory=dict)
    json: Any = None
    model: type[BaseModel] | None = None
    read: bool = False
    write: bool = False
    body_position: bool = False
    """A read whose `min_position` goes in the JSON body (POST reads) instead of the query."""
    raw: bool = False
    """Answer the body as text (Prometheus metrics, a markdown perspective)."""
    accept_503: bool = False
    """A 503 is an answer, not an error (readiness)."""

    @property
    def request(self) -> dict[str, Any]:
        """The arguments of httpx's `request` that send it."""
        return {"method": self.method, "url": self.path, "params": self.params or None, "json": self.json}


def clean(values: dict[str, Any]) -> dict[str, Any]:
    """The values that were given (None means: leave it to the server's default)."""
    return {k: v for k, v in values.items() if v is not None}


def with_position(call: Call[T], position: int | None) -> Call[T]:
    """The call carrying `min_position` (the caller's own, else the last write's)."""
    if not call.read or position is None:
        return call
    if call.body_position:
        if call.json.get("min_position") is None:
            call.json["min_position"] = position
    elif call.params.get("min_position") is None:
        call.params["min_position"] = position
    return call


def retry_delay(response: httpx.Response, attempt: int, longest: float) -> float:
    """Seconds to wait before retrying: the answer's Retry-After (seconds or an HTTP date), else 0.5, 1, 2 ..."""
    header = response.headers.get("retry-after")
    delay = 0.5 * 2 ** attempt
    if header:
        try:
            delay = float(header)
        except ValueError:
            when = email.utils.parsedate_to_datetime(header)
            delay = when.timestamp() - time.time() if when is not None else delay
    return max(0.0, min(delay, longest))


def answer(call: Call[Any], response: httpx.Response) -> Any:
    """The answer as its model (or text, or JSON); a problem as its exception."""
    if response.status_code >= 400 and not (call.accept_503 and response.status_code == 503):
        try:
            body: Any = response.json()
        except ValueError:
            body = response.text
        raise problem_for(response.status_code, body, dict(response.headers))
    if call.raw:
        return response.text
    data = response.json()
    return call.model.model_validate(data) if call.model is not None else data


def written_position(result: Any) -> int | None:
    position = getattr(result, "position", None)
    return position if isinstance(position, int) else None
