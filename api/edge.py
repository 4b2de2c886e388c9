"""The HTTP edge: what happens to a request body before any route sees it (docs/hardening.md).

In order, for a request that carries a body:
1. a `/v1` request without a valid key is answered 401 at once, from its headers: its body is never read;
2. a declared `Content-Length` over the limit (NOUMENA_API_MAX_BODY_BYTES) is answered 413 at once;
3. the body is read, counting bytes as they stream in (chunked bodies have no length): past the limit, 413; a
   body that has not arrived whole within NOUMENA_API_BODY_TIMEOUT_SECONDS (idle or trickling), 408;
4. a JSON body (or one with no content type: FastAPI reads those as JSON) is parsed here, off the event loop when
   it is large, once: nesting deeper than MAX_JSON_DEPTH is a 400 found by a scan that does not recurse, before
   any parser does; malformed JSON is a 400, a string holding a lone UTF-16 surrogate a 422 naming where. The
   route reuses the parsed value (`EdgeRoute`).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable, Coroutine
from typing import Any

import numpy as np
from fastapi import Request, Response
from fastapi.routing import APIRoute
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.problems import ApiProblem, FieldError, problem_response
from domain.access import admin_key_matches
from domain.values import lone_surrogate_path

PARSED_JSON = "noumena.json"
"""Where the edge leaves the parsed body in the ASGI scope for the route."""
INLINE_PARSE_BYTES = 64 * 1024
"""Smaller bodies are parsed on the event loop: under a millisecond, cheaper than two thread hand-offs."""
MAX_JSON_DEPTH = 64
"""Most levels of nested arrays and objects a JSON body may have. Our bodies need a handful; Python's parser and
every walk over a parsed value recurse once per level, so a body nested thousands deep would end in a
RecursionError (a 500) or a dead worker."""
_MISSING = object()
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"?', re.DOTALL)
"""A JSON string, or an unterminated one up to the end: matching either way keeps the scan linear."""
_DEPTH_CHUNK = 1 << 20
_OPEN, _CLOSE = np.frombuffer(b"[{", dtype=np.uint8), np.frombuffer(b"]}", dtype=np.uint8)


def nesting_exceeds(body: bytes, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether the brackets outside strings nest deeper than `limit`: a linear scan (strings dropped by one regex,
    then a running sum of +1/-1 in numpy, a chunk at a time), never a recursion."""
    if body.count(b"[") + body.count(b"{") <= limit:
        return False
    structure = _STRING.sub(b"", body)
    depth = 0
    for start in range(0, len(structure), _DEPTH_CHUNK):
        chunk = np.frombuffer(structure, dtype=np.uint8, count=min(_DEPTH_CHUNK, len(structure) - start),
                              offset=start)
        steps = np.isin(chunk, _OPEN).astype(np.int64) - np.isin(chunk, _CLOSE)
        running = np.cumsum(steps) + depth
        if len(running) and int(running.max()) > limit:
            return True
        depth = int(running[-1]) if len(running) else depth
    return False


def load_json(body: bytes) -> Any:
    """`json.loads` for a body, refusing (ValueError) nesting deeper than MAX_JSON_DEPTH before parsing."""
    if nesting_exceeds(body):
        raise ValueError(f"the body nests arrays and objects deeper than {MAX_JSON_DEPTH} levels")
    return json.loads(body)


def _is_json(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


def _parse(body: bytes) -> tuple[Any, ApiProblem | None]:
    """Decode the body; a problem instead when it nests too deep, is not JSON or holds text that is not valid
    Unicode."""
    if nesting_exceeds(body):
        return None, ApiProblem(400, "too-deeply-nested", "The body nests too deep",
                                f"arrays and objects nest deeper than {MAX_JSON_DEPTH} levels (the limit)",
                                field="body")
    try:
        value = json.loads(body)
    except UnicodeDecodeError as error:
        return None, ApiProblem(400, "malformed-json", "The body is not JSON", f"not UTF-8: {error.reason} at byte"
                                f" {error.start}", field="body")
    except json.JSONDecodeError as error:
        return None, ApiProblem(400, "malformed-json", "The body is not JSON",
                                f"{error.msg} at line {error.lineno} column {error.colno} (char {error.pos})",
                                field="body")
    where = lone_surrogate_path(value)
    if where is not None:
        field = ".".join(str(part) for part in ("body", *where))
        detail = "contains a lone UTF-16 surrogate (e.g. \\ud800): not valid Unicode text"
        return None, ApiProblem(422, "invalid-input", "Invalid input", f"{field}: {detail}", field=field,
                                errors=[FieldError(field=field, detail=detail)])
    return value, None


class RequestEdge:
    """ASGI middleware enforcing the steps above. `limit`: most body bytes a request may carry; `body_timeout`:
    seconds a body may take to arrive whole."""

    def __init__(self, app: ASGIApp, limit: int, body_timeout: float = 30.0) -> None:
        self.app, self.limit, self.body_timeout = app, limit, body_timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        length_text = headers.get("content-length")
        chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        if length_text is None and not chunked or length_text == "0":
            await self.app(scope, receive, send)
            return
        refused = self._unauthorized(scope, headers)
        if refused is None and length_text is not None:
            if not length_text.isdigit():
                refused = ApiProblem(400, "bad-request", "Bad request", "Content-Length is not a number",
                                     field="Content-Length")
            elif int(length_text) > self.limit:
                refused = self._too_large(int(length_text))
        if refused is None:
            body, refused = await self._read(receive)
            if body is None and refused is None:
                return  # the client went away
        content_type = headers.get("content-type")
        if refused is None and body and (content_type is None or _is_json(content_type)):
            parsed, refused = _parse(body) if len(body) <= INLINE_PARSE_BYTES else await run_in_threadpool(
                _parse, body)
            if refused is None:
                scope[PARSED_JSON] = parsed
        if refused is not None:
            await problem_response(Request(scope), refused)(scope, receive, send)
            return
        await self.app(scope, _replay(body or b"", receive), send)

    def _too_large(self, size: int | None) -> ApiProblem:
        said = f"{size} bytes" if size is not None else "more"
        return ApiProblem(413, "payload-too-large", "Payload too large",
                          f"the body is {said}; the limit is {self.limit} bytes (NOUMENA_API_MAX_BODY_BYTES)",
                          field="body")

    def _unauthorized(self, scope: Scope, headers: dict[str, str]) -> ApiProblem | None:
        """401 for a /v1 request with a body and no valid key: decided from the headers alone."""
        path: str = scope.get("path", "")
        if not path.startswith("/v1/"):
            return None
        state = scope["app"].state
        settings, keys = getattr(state, "settings", None), getattr(state, "keys", None)
        if settings is None or keys is None:
            return None
        scheme, _, key = headers.get("authorization", "").partition(" ")
        key = key.strip()
        if scheme.lower() == "bearer" and key:
            if path.startswith("/v1/admin/"):
                if admin_key_matches(settings.admin_key.get_secret_value(), key):
                    return None
            elif keys.tenant_for(key) is not None:
                return None
        return ApiProblem(401, "unauthorized", "Unauthorized", "send a valid API key before a body:"
                          " Authorization: Bearer nk_...", field="Authorization",
                          headers={"WWW-Authenticate": "Bearer"})

    async def _read(self, receive: Receive) -> tuple[bytes | None, ApiProblem | None]:
        """The whole body, or a problem: over the limit (413), not arrived within the timeout (408: a client
        holding a connection open by sending nothing, or a byte at a time, would hold a worker)."""
        try:
            async with asyncio.timeout(self.body_timeout):
                return await self._read_all(receive)
        except TimeoutError:
            return None, ApiProblem(408, "request-timeout", "Request timeout",
                                    f"the body did not arrive whole within {self.body_timeout:g} s"
                                    " (NOUMENA_API_BODY_TIMEOUT_SECONDS)", field="body",
                                    headers={"Connection": "close"})

    async def _read_all(self, receive: Receive) -> tuple[bytes | None, ApiProblem | None]:
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None, None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.limit:
                return None, self._too_large(None)
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks), None


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


class _EdgeRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            parsed = self.scope.get(PARSED_JSON, _MISSING)
            self._json = load_json(await self.body()) if parsed is _MISSING else parsed
        return self._json


class EdgeRoute(APIRoute):
    """Routes that take the body the edge already parsed, instead of parsing it again on the event loop."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def edge_handler(request: Request) -> Response:
            return await handler(_EdgeRequest(request.scope, request.receive))

        return edge_handler
