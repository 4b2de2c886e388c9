"""The synchronous client, `Noumena`: its operations are the resource groups of `_operations.py`, shared with
`AsyncNoumena` (aio.py); only carrying a call out (blocking) is its own."""

from __future__ import annotations

import time
from typing import Any

import httpx

from noumena_client._calls import Call
from noumena_client._operations import Blocking, Groups, authorization


class Noumena(Groups[Blocking]):
    """noumena's HTTP API for one API key (a tenant's, or the admin key for `admin`), one attribute per OpenAPI
    tag: `memory.facts.assert_(...)`, `memory.perspectives.get(...)`, `memory.search.run(...)` ...

    Read-your-writes: the position of the last write this client made is sent as `min_position` with every
    later read (to whichever replica answers), unless a read names its own. 503 and 429 answers are retried
    after their Retry-After (at most `retries` times, each wait at most `longest_wait` seconds); any other
    problem, or the last one, is raised as a typed exception (noumena_client.errors)."""

    def __init__(self, base_url: str, api_key: str | None = None, *, timeout: float = 30.0, retries: int = 3,
                 longest_wait: float = 30.0, http: httpx.Client | None = None) -> None:
        super().__init__(retries, longest_wait)
        self._http = http or httpx.Client(base_url=base_url, headers=authorization(api_key), timeout=timeout)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Noumena:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _send(self, call: Call[Any]) -> Any:
        exchange, reply = self._exchange(call), None
        try:
            while True:
                step = exchange.send(reply)
                reply = self._http.request(**step.request) if isinstance(step, Call) else time.sleep(step)
        except StopIteration as done:
            return done.value
