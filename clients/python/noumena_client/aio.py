"""The asynchronous client, `AsyncNoumena`: the same resource groups as `Noumena` (`_operations.py`), each
operation answering an awaitable; only carrying a call out (awaiting) is its own."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from noumena_client._calls import Call
from noumena_client._operations import Awaiting, Groups, authorization


class AsyncNoumena(Groups[Awaiting]):
    """`Noumena`, awaited (`async with`, `await memory.facts.assert_(...)`): the same groups, operations,
    read-your-writes, retries and exceptions."""

    def __init__(self, base_url: str, api_key: str | None = None, *, timeout: float = 30.0, retries: int = 3,
                 longest_wait: float = 30.0, http: httpx.AsyncClient | None = None) -> None:
        super().__init__(retries, longest_wait)
        self._http = http or httpx.AsyncClient(base_url=base_url, headers=authorization(api_key), timeout=timeout)

    async def close(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncNoumena:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def _send(self, call: Call[Any]) -> Any:
        exchange, reply = self._exchange(call), None
        try:
            while True:
                step = exchange.send(reply)
                reply = await self._http.request(**step.request) if isinstance(step, Call) else \
                    await asyncio.sleep(step)
        except StopIteration as done:
            return done.value
