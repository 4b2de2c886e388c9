"""A local stand-in for an OpenAI-compatible chat-completions endpoint (no real LLM is reachable here).

It speaks the same protocol — POST /v1/chat/completions with a JSON body, a chat.completion answer — and
serves recorded answers in order: a dict is sent back as the message content (JSON), a string as raw
content, an int as that HTTP status, the string "sleep" as a request that never answers in time.
It records every request so tests can check what was sent.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class RecordedChatCompletionsServer:
    def __init__(self, answers: list[Any]) -> None:
        self.answers = list(answers)
        self.requests: list[dict[str, Any]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 (the stdlib's name)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append({"path": self.path, "body": body,
                                        "authorization": self.headers.get("Authorization")})
                answer = server.answers.pop(0) if server.answers else 500
                if answer == "sleep":
                    time.sleep(2)
                    answer = 500
                if isinstance(answer, int):
                    self.send_response(answer)
                    self.end_headers()
                    self.wfile.write(b'{"error": {"message": "recorded failure"}}')
                    return
                content = answer if isinstance(answer, str) else json.dumps(answer)
                payload = json.dumps({
                    "id": "chatcmpl-standin", "object": "chat.completion", "model": body.get("model"),
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": content}}],
                }).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> RecordedChatCompletionsServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
