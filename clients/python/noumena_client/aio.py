"""The asynchronous client (`AsyncNoumena`), GENERATED from client.py by scripts/unasync.py: do not edit."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from datetime import datetime
from typing import Any
from urllib.parse import quote

import httpx

from noumena_client import models as m
from noumena_client._calls import RETRIED, Call, answer, clean, retry_delay, with_position, written_position


def _when(value: datetime | str | None) -> str | None:
    return value.isoformat() if isinstance(value, datetime) else value


class AsyncNoumena:
    """noumena's HTTP API for one API key (a tenant's, or the admin key for the admin methods).

    Read-your-writes: the position of the last write this client made is sent as `min_position` with every
    later read (to whichever replica answers), unless a read names its own. 503 and 429 answers are retried
    after their Retry-After (at most `retries` times, each wait at most `longest_wait` seconds); any other
    problem, or the last one, is raised as a typed exception (noumena_client.errors)."""

    def __init__(self, base_url: str, api_key: str | None = None, *, timeout: float = 30.0, retries: int = 3,
                 longest_wait: float = 30.0, http: httpx.AsyncClient | None = None) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = http or httpx.AsyncClient(base_url=base_url, headers=headers, timeout=timeout)
        self.retries = retries
        self.longest_wait = longest_wait
        self._position: int | None = None
        self._lock = threading.Lock()

    @property
    def last_position(self) -> int | None:
        """The log position of the latest write this client made (sent as `min_position` by reads)."""
        return self._position

    def remember_position(self, position: int | None) -> None:
        """Make reads wait for `position` too (a write made elsewhere, e.g. by another client)."""
        if position is not None:
            with self._lock:
                self._position = max(self._position or 0, position)

    async def close(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncNoumena:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def _send(self, call: Call) -> Any:
        call = with_position(call, self._position)
        attempt = 0
        while True:
            response = await self._http.request(call.method, call.path, params=call.params or None, json=call.json)
            if response.status_code in RETRIED and attempt < self.retries and not call.accept_503:
                await asyncio.sleep(retry_delay(response, attempt, self.longest_wait))
                attempt += 1
                continue
            result = answer(call, response)
            if call.write:
                self.remember_position(written_position(result))
            return result

    # ------------------------------------------------------------------ writes

    async def ingest_events(self, events: Sequence[dict[str, Any]]) -> m.EventsWritten:
        """Write a batch of wire-format envelopes, all or nothing (POST /v1/events)."""
        return await self._send(Call("POST", "/v1/events", json={"events": list(events)}, model=m.EventsWritten,
                               write=True))

    async def register_entity(self, ref: str, label: str, *, aliases: Sequence[str] = (), hub: bool = False
                        ) -> m.EntityWritten:
        """Register an entity, or update its label and aliases (POST /v1/entities)."""
        return await self._send(Call("POST", "/v1/entities", json={"ref": ref, "label": label, "aliases": list(aliases),
                                                             "hub": hub}, model=m.EntityWritten, write=True))

    async def assert_fact(self, subject: str, relation: str, object: str, *, reason: str | None = None,
                    confidence: float | None = None, valid_from: datetime | str | None = None,
                    valid_to: datetime | str | None = None, scope: str | None = None,
                    source: dict[str, Any] | None = None) -> m.FactWritten:
        """Assert `subject -relation-> object` (POST /v1/facts): asserted, corroborated, or superseding."""
        body = clean({"subject": subject, "relation": relation, "object": object, "reason": reason,
                      "confidence": confidence, "valid_from": _when(valid_from), "valid_to": _when(valid_to),
                      "scope": scope, "source": source})
        return await self._send(Call("POST", "/v1/facts", json=body, model=m.FactWritten, write=True))

    async def invalidate_fact(self, fact_id: str, reason: str, *, valid_to: datetime | str | None = None,
                        source: dict[str, Any] | None = None) -> m.FactWritten:
        """End a current fact, kept in history (POST /v1/facts/{fact_id}/invalidate)."""
        body = clean({"reason": reason, "valid_to": _when(valid_to), "source": source})
        return await self._send(Call("POST", f"/v1/facts/{quote(fact_id, safe='')}/invalidate", json=body,
                               model=m.FactWritten, write=True))

    async def mark_used(self, agent: str, fact_ids: Sequence[str], *, perspective_id: str | None = None
                  ) -> m.UsedWritten:
        """Record that `agent` used these facts (POST /v1/memory/used)."""
        body = clean({"agent": agent, "fact_ids": list(fact_ids), "perspective_id": perspective_id})
        return await self._send(Call("POST", "/v1/memory/used", json=body, model=m.UsedWritten, write=True))

    async def forget(self, subject: str) -> m.ForgetReceipt:
        """Really delete what is known about `subject` (crypto-shredding; POST /v1/forget)."""
        return await self._send(Call("POST", "/v1/forget", json={"subject": subject}, model=m.ForgetReceipt,
                               write=True))

    # ------------------------------------------------------------------ reads

    async def find_entities(self, q: str = "", *, kind: str | None = None, limit: int | None = None,
                      skip: int | None = None, min_position: int | None = None) -> m.Entities:
        """Entities a name may mean (of `kind` only, if given), best first; without `q`, every entity (GET
        /v1/entities)."""
        params = clean({"q": q or None, "kind": kind, "limit": limit, "skip": skip, "min_position": min_position})
        return await self._send(Call("GET", "/v1/entities", params=params, model=m.Entities, read=True))

    async def get_entity(self, ref: str, *, min_position: int | None = None) -> m.Entity:
        """One entity as it is now (GET /v1/entities/{ref})."""
        return await self._send(Call("GET", f"/v1/entities/{quote(ref, safe=':/')}",
                               params=clean({"min_position": min_position}), model=m.Entity, read=True))

    async def get_fact(self, fact_id: str, *, min_position: int | None = None) -> m.Fact:
        """A fact now, every version on both time axes, every change (GET /v1/facts/{fact_id})."""
        return await self._send(Call("GET", f"/v1/facts/{quote(fact_id, safe='')}",
                               params=clean({"min_position": min_position}), model=m.Fact, read=True))

    async def get_graph(self, *, recorded_at: datetime | str | None = None, valid_at: datetime | str | None = None,
                  skip: int | None = None, limit: int | None = None, min_position: int | None = None) -> m.Graph:
        """The facts believed at `recorded_at`, holding at `valid_at`, paged (GET /v1/graph)."""
        params = clean({"recorded_at": _when(recorded_at), "valid_at": _when(valid_at), "skip": skip,
                        "limit": limit, "min_position": min_position})
        return await self._send(Call("GET", "/v1/graph", params=params, model=m.Graph, read=True))

    async def get_perspective(self, agent: str, *, serving: str | None = None, focus: Sequence[str] = (),
                        as_of: datetime | str | None = None, budget_tokens: int | None = None,
                        record: bool | None = None, min_position: int | None = None) -> m.Perspective:
        """What `agent` sees, serving `serving`, with `focus` in mind (GET /v1/perspectives); refs or names."""
        params = clean({"agent": agent, "serving": serving, "focus": list(focus) or None, "as_of": _when(as_of),
                        "budget_tokens": budget_tokens, "record": None if record is None else str(record).lower(),
                        "min_position": min_position})
        return await self._send(Call("GET", "/v1/perspectives", params=params, model=m.Perspective, read=True))

    async def get_perspective_markdown(self, agent: str, *, serving: str | None = None, focus: Sequence[str] = (),
                                 budget_tokens: int | None = None, min_position: int | None = None) -> str:
        """Only the context block of a perspective, as markdown."""
        params = clean({"agent": agent, "serving": serving, "focus": list(focus) or None,
                        "budget_tokens": budget_tokens, "format": "markdown", "min_position": min_position})
        return await self._send(Call("GET", "/v1/perspectives", params=params, read=True, raw=True))

    async def deepen_perspective(self, perspective_id: str, *, budget_tokens: int | None = None,
                           min_position: int | None = None) -> m.Perspective:
        """The same standpoint one hop deeper (POST /v1/perspectives/{id}/deepen)."""
        params = clean({"budget_tokens": budget_tokens, "min_position": min_position})
        return await self._send(Call("POST", f"/v1/perspectives/{quote(perspective_id, safe='')}/deepen", params=params,
                               model=m.Perspective, read=True))

    async def explain_perspective(self, perspective_id: str) -> m.Explanation:
        """Inputs, parameters and outputs of a served perspective (GET /v1/perspectives/{id}/explain)."""
        return await self._send(Call("GET", f"/v1/perspectives/{quote(perspective_id, safe='')}/explain",
                               model=m.Explanation))

    async def recall(self, agent: str, subject: str, *, relation: str | None = None, serving: str | None = None,
               session_id: str | None = None, deeper: bool | None = None, min_position: int | None = None
               ) -> m.Recall:
        """Facts about `subject`, nearest memory tier first (POST /v1/memory/recall)."""
        body = clean({"agent": agent, "subject": subject, "relation": relation, "serving": serving,
                      "session_id": session_id, "deeper": deeper, "min_position": min_position})
        return await self._send(Call("POST", "/v1/memory/recall", json=body, model=m.Recall, read=True, write=True,
                               body_position=True))

    async def search(self, agent: str, query: str, *, serving: str | None = None, session_id: str | None = None,
               about: Sequence[str] = (), k: int | None = None, as_of: datetime | str | None = None,
               record: bool | None = None, min_position: int | None = None) -> m.Search:
        """Facts matching `query` by content, nearest tier first (POST /v1/search)."""
        body = clean({"agent": agent, "query": query, "serving": serving, "session_id": session_id,
                      "about": list(about) or None, "k": k, "as_of": _when(as_of), "record": record,
                      "min_position": min_position})
        return await self._send(Call("POST", "/v1/search", json=body, model=m.Search, read=True, body_position=True))

    async def explain_search(self, search_id: str) -> dict[str, Any]:
        """The evidence of a served search (GET /v1/searches/{id}/explain)."""
        return await self._send(Call("GET", f"/v1/searches/{quote(search_id, safe='')}/explain"))

    async def list_workers(self, session_id: str, *, min_position: int | None = None) -> m.Workers:
        """A main session and the workers it dispatched (GET /v1/sessions/{id}/workers)."""
        return await self._send(Call("GET", f"/v1/sessions/{quote(session_id, safe='')}/workers",
                               params=clean({"min_position": min_position}), model=m.Workers, read=True))

    async def assemble_context(self, session_id: str, *, message: str | None = None, budget_tokens: int | None = None,
                         min_position: int | None = None) -> m.Context:
        """The budgeted context block of a main session (POST /v1/sessions/{id}/context)."""
        body = clean({"message": message, "budget_tokens": budget_tokens, "min_position": min_position})
        return await self._send(Call("POST", f"/v1/sessions/{quote(session_id, safe='')}/context", json=body,
                               model=m.Context, read=True, body_position=True))

    async def explain_context(self, context_id: str) -> dict[str, Any]:
        """The evidence of a served context (GET /v1/contexts/{id}/explain)."""
        return await self._send(Call("GET", f"/v1/contexts/{quote(context_id, safe='')}/explain"))

    # ------------------------------------------------------------------ admin (the admin key)

    async def create_tenant(self, tenant: str, *, display_name: str = "") -> m.TenantWritten:
        """Create a tenant (POST /v1/admin/tenants)."""
        return await self._send(Call("POST", "/v1/admin/tenants", json={"tenant": tenant, "display_name": display_name},
                               model=m.TenantWritten, write=True))

    async def create_key(self, tenant: str, *, label: str = "", agents: Sequence[str] = ()) -> m.KeyIssued:
        """Issue an API key for a tenant, scoped to `agents` if given; shown once (POST /v1/admin/keys)."""
        return await self._send(Call("POST", "/v1/admin/keys", json={"tenant": tenant, "label": label,
                                                               "agents": list(agents)}, model=m.KeyIssued))

    async def list_keys(self, *, tenant: str | None = None) -> m.Keys:
        """The keys issued, never the keys themselves (GET /v1/admin/keys)."""
        return await self._send(Call("GET", "/v1/admin/keys", params=clean({"tenant": tenant}), model=m.Keys))

    async def revoke_key(self, key_id: str) -> m.Key:
        """Revoke a key: it stops working at once (DELETE /v1/admin/keys/{key_id})."""
        return await self._send(Call("DELETE", f"/v1/admin/keys/{quote(key_id, safe='')}", model=m.Key))

    # ------------------------------------------------------------------ operations

    async def healthz(self) -> dict[str, Any]:
        """Liveness (GET /healthz)."""
        return await self._send(Call("GET", "/healthz"))

    async def readyz(self) -> dict[str, Any]:
        """Readiness, ready or not (GET /readyz: a 503 is answered, not raised)."""
        return await self._send(Call("GET", "/readyz", accept_503=True))

    async def metrics(self) -> str:
        """Prometheus text (GET /metrics)."""
        return await self._send(Call("GET", "/metrics", raw=True))


