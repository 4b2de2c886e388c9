"""A local stand-in for an OpenAI-compatible embeddings endpoint (no real embedding service is reachable here).

It speaks the same protocol: POST /v1/embeddings with `{"model", "input": [texts], "encoding_format"}`, answered
with `{"object": "list", "data": [{"object": "embedding", "index": i, "embedding": [...]}], "model", "usage"}`.
Its vectors are deterministic hashed bags of words (each lower-cased word, and each CJK character, adds ±1 to a
dimension chosen by its hash; not normalised), so texts sharing words are similar and the adapter's own
normalisation is exercised.

`mode` switches what it answers next: "ok"; "slow" (answers nothing for `slow_seconds`); "drip" (sends the status
and headers, then its body one byte every `drip_interval` seconds); "http500" and "http503"; "wrong_dimensions"
(3 numbers a vector); "wrong_count" (one vector fewer than texts); "malformed_json"; "non_finite" (a NaN in the
first vector); "duplicate_index"; "no_data". `shuffled=True` answers the items in reverse order (the protocol's
`index` says which text each is for). Every request is recorded, with its Authorization header.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODES = ("ok", "slow", "drip", "http500", "http503", "wrong_dimensions", "wrong_count", "malformed_json",
         "non_finite", "duplicate_index", "no_data")

_TOKENS = re.compile(r"[\u4e00-\u9fff]|\w+")


def hashed_bag_of_words(text: str, dimensions: int) -> list[float]:
    vector = [0.0] * dimensions
    for token in _TOKENS.findall(text.lower()):
        digest = hashlib.blake2b(token.encode(), digest_size=8).digest()
        slot = int.from_bytes(digest[:4], "little") % dimensions
        vector[slot] += 1.0 if digest[4] & 1 else -1.0
    return vector


class _QuietServer(ThreadingHTTPServer):
    """Handler threads never hold up shutdown, and a client that gave up (a closed connection) is not an error."""

    daemon_threads = True
    block_on_close = False

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class EmbeddingsStandIn:
    def __init__(self, dimensions: int = 64, mode: str = "ok", slow_seconds: float = 5.0,
                 drip_interval: float = 0.2) -> None:
        self.dimensions = dimensions
        self.mode = mode
        self.shuffled = False
        self.slow_seconds = slow_seconds
        self.drip_interval = drip_interval
        self.requests: list[dict[str, Any]] = []
        self._closing = threading.Event()
        standin = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 (the stdlib's name)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                standin.requests.append({"path": self.path, "body": body,
                                         "authorization": self.headers.get("Authorization")})
                if self.path != "/v1/embeddings":
                    return self._send(404, b'{"error": {"message": "no such route"}}')
                standin._answer(self, body)

            def _send(self, status: int, payload: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self._server = _QuietServer(("127.0.0.1", 0), Handler)
        self.root = f"http://127.0.0.1:{self._server.server_address[1]}"
        self.url = self.root + "/v1"
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)

    def _answer(self, handler: Any, body: dict[str, Any]) -> None:
        mode = self.mode
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        if mode == "slow":
            if self._closing.wait(self.slow_seconds):
                return
            mode = "ok"
        if mode in ("http500", "http503"):
            return handler._send(int(mode[4:]), b'{"error": {"message": "stand-in failure"}}')
        if mode == "malformed_json":
            return handler._send(200, b'{"object": "list", "data": [{"index": 0, "embedding": [0.1, ')
        dimensions = 3 if mode == "wrong_dimensions" else self.dimensions
        data: list[dict[str, Any]] = [
            {"object": "embedding", "index": i, "embedding": hashed_bag_of_words(text, dimensions)}
            for i, text in enumerate(texts)]
        if mode == "wrong_count":
            data = data[:-1]
        if mode == "non_finite" and data:
            data[0]["embedding"][0] = float("nan")
        if mode == "duplicate_index" and len(data) > 1:
            data[1]["index"] = 0
        if self.shuffled:
            data.reverse()
        answer: dict[str, Any] = {"object": "list", "data": data, "model": body.get("model"),
                                  "usage": {"prompt_tokens": 0, "total_tokens": 0}}
        if mode == "no_data":
            answer = {"object": "list", "model": body.get("model")}
        payload = json.dumps(answer).encode()  # a NaN is written as NaN, as a careless server would
        if mode == "drip":
            handler.send_response(200)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(payload)))
            handler.end_headers()
            handler.wfile.flush()
            for byte in payload:
                if self._closing.wait(self.drip_interval):
                    return
                handler.wfile.write(bytes([byte]))
                handler.wfile.flush()
            return
        handler._send(200, payload)

    def __enter__(self) -> EmbeddingsStandIn:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._closing.set()
        self._server.shutdown()
        self._server.server_close()
