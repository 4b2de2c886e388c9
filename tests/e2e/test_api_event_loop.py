"""Serving a perspective may write its recall (at once with coalescing off, as here; coalesced, when its flush is
due); a slow write must never stall the event loop and with it every other request. The write is slowed for real:
another connection holds SQLite's write lock on the served process's event store, the way a long transaction of
another process would."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from tests.api_support import start_server, stop_server

PATIENCE_SECONDS = 20.0
"""How long the other requests may take (a loaded machine is slow); a held event loop never answers them while
the lock is held, however long one waits. (The server waits 30 s for a SQLite lock before it gives up.)"""


def test_a_perspective_waiting_to_record_its_recall_does_not_hold_up_other_requests(tmp_path: Path) -> None:
    server = start_server(tmp_path / "home", NOUMENA_RECALL_FLUSH_SECONDS="0")  # every perspective writes
    try:
        tenant = server.tenant("acme")
        c = tenant.client
        for ref, label in (("agent:assistant", "the assistant"), ("person:li", "Li"), ("memory:cny", "quotes in CNY")):
            assert c.post("/v1/entities", json={"ref": ref, "label": label}).status_code == 200
        written = c.post("/v1/facts", json={"subject": "person:li", "relation": "prefers", "object": "memory:cny",
                                            "reason": "the last quote failed on the exchange rate"}).json()
        params = {"agent": "agent:assistant", "focus": "person:li", "min_position": written["position"]}
        warm = c.get("/v1/perspectives", params=params)
        assert warm.status_code == 200 and warm.json()["recall"]["fact_ids"] == [written["fact_id"]], warm.text

        lock = sqlite3.connect(server.home / "events.sqlite", timeout=30, isolation_level=None)
        lock.execute("BEGIN IMMEDIATE")  # the write lock: the recall's append now waits for it
        answer: dict[str, Any] = {}

        def serve_perspective() -> None:
            started = time.monotonic()
            answer["response"] = c.get("/v1/perspectives", params=params, timeout=60)
            answer["seconds"] = time.monotonic() - started

        held_since = time.monotonic()
        waiting = threading.Thread(target=serve_perspective)
        waiting.start()
        try:
            time.sleep(0.5)
            assert waiting.is_alive(), "the perspective did not wait for the write lock: the test proves nothing"
            with httpx.Client(base_url=server.url, timeout=PATIENCE_SECONDS) as other:
                try:
                    health = other.get("/healthz").status_code
                    entity = tenant.client.get("/v1/entities/person:li", timeout=PATIENCE_SECONDS).status_code
                except httpx.TimeoutException:
                    health = entity = 0  # no answer while the perspective waited: the event loop was held
            # still waiting (the lock is still held): the answers above came while it waited, not after
            still_waiting = waiting.is_alive()
        finally:
            held = time.monotonic() - held_since
            lock.execute("ROLLBACK")
            lock.close()
            waiting.join(60)
        assert health == 200 and entity == 200, "other requests got no answer while a perspective waited"
        assert still_waiting, "the perspective finished while the write lock was held: it never waited"
        response = answer["response"]
        assert response.status_code == 200, response.text
        assert response.json()["recall"]["position"] > written["position"]  # the recall was recorded after all
        assert answer["seconds"] >= held - 0.6  # it was served only once the lock was released
    finally:
        stop_server(server)
