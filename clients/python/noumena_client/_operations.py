"""Every operation of the HTTP API, defined once for both clients: a method of a resource group (one group per
OpenAPI tag) that describes its call. Bound to `Noumena`'s groups it answers; bound to `AsyncNoumena`'s, it
answers an awaitable. Only the sending differs (client.py, aio.py)."""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Awaitable, Callable, Generator, Sequence
from datetime import datetime
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, overload
from urllib.parse import quote

import httpx

from noumena_client import models as m
from noumena_client._calls import RETRIED, Call, answer, clean, retry_delay, with_position, written_position

P = ParamSpec("P")
T = TypeVar("T")


class Blocking:
    """The mode of `Noumena`'s groups: an operation answers."""


class Awaiting:
    """The mode of `AsyncNoumena`'s groups: an operation answers an awaitable."""


Mode = TypeVar("Mode", Blocking, Awaiting)


class Group(Generic[Mode]):
    """The operations of one OpenAPI tag, sent through the client that holds the group."""

    def __init__(self, send: Callable[[Call[Any]], Any]) -> None:
        self._send = send


class operation(Generic[P, T]):  # noqa: N801 (a decorator, named as one)
    """An operation: `describe(group, ...)` builds its `Call`; read from a group, it is the method that sends it."""

    def __init__(self, describe: Callable[Concatenate[Any, P], Call[T]]) -> None:
        self._describe = describe
        functools.update_wrapper(self, describe)
        described = inspect.signature(describe)
        self._signature = described.replace(parameters=list(described.parameters.values())[1:],
                                            return_annotation=inspect.Signature.empty)
        """What `help()` and editors show of the method: its arguments, without the group."""

    @overload
    def __get__(self, group: None, owner: type) -> operation[P, T]: ...

    @overload
    def __get__(self, group: Group[Blocking], owner: type) -> Callable[P, T]: ...

    @overload
    def __get__(self, group: Group[Awaiting], owner: type) -> Callable[P, Awaitable[T]]: ...

    def __get__(self, group: Group[Any] | None, owner: type) -> Any:
        if group is None:
            return self
        describe = self._describe

        @functools.wraps(describe)
        def send(*args: P.args, **kwargs: P.kwargs) -> Any:
            return group._send(describe(group, *args, **kwargs))

        send.__signature__ = self._signature  # type: ignore[attr-defined]
        return send


def _when(value: datetime | str | None) -> str | None:
    return value.isoformat() if isinstance(value, datetime) else value


def _segment(value: str, safe: str = "") -> str:
    return quote(value, safe=safe)


class Events(Group[Mode]):
    @operation
    def ingest(self, events: Sequence[dict[str, Any]]) -> Call[m.EventsWritten]:
        """Write a batch of wire-format envelopes, all or nothing (POST /v1/events)."""
        return Call("POST", "/v1/events", json={"events": list(events)}, model=m.EventsWritten, write=True)


class Entities(Group[Mode]):
    @operation
    def register(self, ref: str, label: str, *, aliases: Sequence[str] = (), hub: bool = False
                 ) -> Call[m.EntityWritten]:
        """Register an entity, or update its label and aliases (POST /v1/entities)."""
        return Call("POST", "/v1/entities", json={"ref": ref, "label": label, "aliases": list(aliases), "hub": hub},
                    model=m.EntityWritten, write=True)

    @operation
    def find(self, q: str = "", *, kind: str | None = None, limit: int | None = None, skip: int | None = None,
             min_position: int | None = None) -> Call[m.Entities]:
        """Entities a name may mean (of `kind` only, if given), best first; without `q`, every entity (GET
        /v1/entities)."""
        params = clean({"q": q or None, "kind": kind, "limit": limit, "skip": skip, "min_position": min_position})
        return Call("GET", "/v1/entities", params=params, model=m.Entities, read=True)

    @operation
    def get(self, ref: str, *, min_position: int | None = None) -> Call[m.Entity]:
        """One entity as it is now (GET /v1/entities/{ref})."""
        return Call("GET", f"/v1/entities/{_segment(ref, ':/')}", params=clean({"min_position": min_position}),
                    model=m.Entity, read=True)


class Facts(Group[Mode]):
    @operation
    def assert_(self, subject: str, relation: str, object: str, *, reason: str | None = None,
                confidence: float | None = None, valid_from: datetime | str | None = None,
                valid_to: datetime | str | None = None, scope: str | None = None,
                source: dict[str, Any] | None = None) -> Call[m.FactWritten]:
        """Assert `subject -relation-> object` (POST /v1/facts): asserted, corroborated, or superseding."""
        body = clean({"subject": subject, "relation": relation, "object": object, "reason": reason,
                      "confidence": confidence, "valid_from": _when(valid_from), "valid_to": _when(valid_to),
                      "scope": scope, "source": source})
        return Call("POST", "/v1/facts", json=body, model=m.FactWritten, write=True)

    @operation
    def invalidate(self, fact_id: str, reason: str, *, valid_to: datetime | str | None = None,
                   source: dict[str, Any] | None = None) -> Call[m.FactWritten]:
        """End a current fact, kept in history (POST /v1/facts/{fact_id}/invalidate)."""
        body = clean({"reason": reason, "valid_to": _when(valid_to), "source": source})
        return Call("POST", f"/v1/facts/{_segment(fact_id)}/invalidate", json=body, model=m.FactWritten,
                    write=True)

    @operation
    def get(self, fact_id: str, *, min_position: int | None = None) -> Call[m.Fact]:
        """A fact now, every version on both time axes, every change (GET /v1/facts/{fact_id})."""
        return Call("GET", f"/v1/facts/{_segment(fact_id)}", params=clean({"min_position": min_position}),
                    model=m.Fact, read=True)


class Graph(Group[Mode]):
    @operation
    def get(self, *, recorded_at: datetime | str | None = None, valid_at: datetime | str | None = None,
            skip: int | None = None, limit: int | None = None, min_position: int | None = None) -> Call[m.Graph]:
        """The facts believed at `recorded_at`, holding at `valid_at`, paged (GET /v1/graph)."""
        params = clean({"recorded_at": _when(recorded_at), "valid_at": _when(valid_at), "skip": skip,
                        "limit": limit, "min_position": min_position})
        return Call("GET", "/v1/graph", params=params, model=m.Graph, read=True)


class Perspectives(Group[Mode]):
    @operation
    def get(self, agent: str, *, serving: str | None = None, focus: Sequence[str] = (),
            as_of: datetime | str | None = None, budget_tokens: int | None = None, record: bool | None = None,
            min_position: int | None = None) -> Call[m.Perspective]:
        """What `agent` sees, serving `serving`, with `focus` in mind (GET /v1/perspectives); refs or names."""
        params = clean({"agent": agent, "serving": serving, "focus": list(focus) or None, "as_of": _when(as_of),
                        "budget_tokens": budget_tokens, "record": None if record is None else str(record).lower(),
                        "min_position": min_position})
        return Call("GET", "/v1/perspectives", params=params, model=m.Perspective, read=True)

    @operation
    def markdown(self, agent: str, *, serving: str | None = None, focus: Sequence[str] = (),
                 budget_tokens: int | None = None, min_position: int | None = None) -> Call[str]:
        """Only the context block of a perspective, as markdown (GET /v1/perspectives?format=markdown)."""
        params = clean({"agent": agent, "serving": serving, "focus": list(focus) or None,
                        "budget_tokens": budget_tokens, "format": "markdown", "min_position": min_position})
        return Call("GET", "/v1/perspectives", params=params, read=True, raw=True)

    @operation
    def deepen(self, perspective_id: str, *, budget_tokens: int | None = None, min_position: int | None = None
               ) -> Call[m.Perspective]:
        """The same standpoint one hop deeper (POST /v1/perspectives/{id}/deepen)."""
        params = clean({"budget_tokens": budget_tokens, "min_position": min_position})
        return Call("POST", f"/v1/perspectives/{_segment(perspective_id)}/deepen", params=params,
                    model=m.Perspective, read=True)

    @operation
    def explain(self, perspective_id: str) -> Call[m.Explanation]:
        """Inputs, parameters and outputs of a served perspective (GET /v1/perspectives/{id}/explain)."""
        return Call("GET", f"/v1/perspectives/{_segment(perspective_id)}/explain", model=m.Explanation)


class Memory(Group[Mode]):
    @operation
    def recall(self, agent: str, subject: str, *, relation: str | None = None, serving: str | None = None,
               session_id: str | None = None, deeper: bool | None = None, min_position: int | None = None
               ) -> Call[m.Recall]:
        """Facts about `subject`, nearest memory tier first (POST /v1/memory/recall)."""
        body = clean({"agent": agent, "subject": subject, "relation": relation, "serving": serving,
                      "session_id": session_id, "deeper": deeper, "min_position": min_position})
        return Call("POST", "/v1/memory/recall", json=body, model=m.Recall, read=True, write=True,
                    body_position=True)

    @operation
    def mark_used(self, agent: str, fact_ids: Sequence[str], *, perspective_id: str | None = None
                  ) -> Call[m.UsedWritten]:
        """Record that `agent` used these facts (POST /v1/memory/used)."""
        body = clean({"agent": agent, "fact_ids": list(fact_ids), "perspective_id": perspective_id})
        return Call("POST", "/v1/memory/used", json=body, model=m.UsedWritten, write=True)

    @operation
    def forget(self, subject: str) -> Call[m.ForgetReceipt]:
        """Really delete what is known about `subject` (crypto-shredding; POST /v1/forget)."""
        return Call("POST", "/v1/forget", json={"subject": subject}, model=m.ForgetReceipt, write=True)


class Search(Group[Mode]):
    @operation
    def run(self, agent: str, query: str, *, serving: str | None = None, session_id: str | None = None,
            about: Sequence[str] = (), k: int | None = None, as_of: datetime | str | None = None,
            record: bool | None = None, min_position: int | None = None) -> Call[m.Search]:
        """Facts and turns matching `query` by content, nearest tier first (POST /v1/search)."""
        body = clean({"agent": agent, "query": query, "serving": serving, "session_id": session_id,
                      "about": list(about) or None, "k": k, "as_of": _when(as_of), "record": record,
                      "min_position": min_position})
        return Call("POST", "/v1/search", json=body, model=m.Search, read=True, body_position=True)

    @operation
    def explain(self, search_id: str) -> Call[dict[str, Any]]:
        """The evidence of a served search (GET /v1/searches/{id}/explain)."""
        return Call("GET", f"/v1/searches/{_segment(search_id)}/explain")


class Contexts(Group[Mode]):
    @operation
    def assemble(self, session_id: str, *, message: str | None = None, budget_tokens: int | None = None,
                 min_position: int | None = None) -> Call[m.Context]:
        """The budgeted context block of a main session (POST /v1/sessions/{id}/context)."""
        body = clean({"message": message, "budget_tokens": budget_tokens, "min_position": min_position})
        return Call("POST", f"/v1/sessions/{_segment(session_id)}/context", json=body, model=m.Context, read=True,
                    body_position=True)

    @operation
    def explain(self, context_id: str) -> Call[dict[str, Any]]:
        """The evidence of a served context (GET /v1/contexts/{id}/explain)."""
        return Call("GET", f"/v1/contexts/{_segment(context_id)}/explain")


class Sessions(Group[Mode]):
    @operation
    def workers(self, session_id: str, *, min_position: int | None = None) -> Call[m.Workers]:
        """A main session and the workers it dispatched (GET /v1/sessions/{id}/workers)."""
        return Call("GET", f"/v1/sessions/{_segment(session_id)}/workers",
                    params=clean({"min_position": min_position}), model=m.Workers, read=True)


class Admin(Group[Mode]):
    """With the admin key."""

    @operation
    def create_tenant(self, tenant: str, *, display_name: str = "") -> Call[m.TenantWritten]:
        """Create a tenant (POST /v1/admin/tenants)."""
        return Call("POST", "/v1/admin/tenants", json={"tenant": tenant, "display_name": display_name},
                    model=m.TenantWritten, write=True)

    @operation
    def create_key(self, tenant: str, *, label: str = "", agents: Sequence[str] = ()) -> Call[m.KeyIssued]:
        """Issue an API key for a tenant, scoped to `agents` if given; shown once (POST /v1/admin/keys)."""
        return Call("POST", "/v1/admin/keys", json={"tenant": tenant, "label": label, "agents": list(agents)},
                    model=m.KeyIssued)

    @operation
    def list_keys(self, *, tenant: str | None = None) -> Call[m.Keys]:
        """The keys issued, never the keys themselves (GET /v1/admin/keys)."""
        return Call("GET", "/v1/admin/keys", params=clean({"tenant": tenant}), model=m.Keys)

    @operation
    def revoke_key(self, key_id: str) -> Call[m.Key]:
        """Revoke a key: it stops working at once (DELETE /v1/admin/keys/{key_id})."""
        return Call("DELETE", f"/v1/admin/keys/{_segment(key_id)}", model=m.Key)


class Operations(Group[Mode]):
    @operation
    def healthz(self) -> Call[dict[str, Any]]:
        """Liveness (GET /healthz)."""
        return Call("GET", "/healthz")

    @operation
    def readyz(self) -> Call[dict[str, Any]]:
        """Readiness, ready or not (GET /readyz: a 503 is answered, not raised)."""
        return Call("GET", "/readyz", accept_503=True)

    @operation
    def metrics(self) -> Call[str]:
        """Prometheus text (GET /metrics)."""
        return Call("GET", "/metrics", raw=True)


class Groups(Generic[Mode]):
    """What both clients hold: the resource groups, the position of the last write (read-your-writes) and each
    call's exchange with the server, retries included; the clients only carry it out, blocking or awaiting."""

    def __init__(self, retries: int, longest_wait: float) -> None:
        self.retries = retries
        self.longest_wait = longest_wait
        self._position: int | None = None
        self._lock = threading.Lock()
        send = self._send
        self.events: Events[Mode] = Events(send)
        self.entities: Entities[Mode] = Entities(send)
        self.facts: Facts[Mode] = Facts(send)
        self.graph: Graph[Mode] = Graph(send)
        self.perspectives: Perspectives[Mode] = Perspectives(send)
        self.memory: Memory[Mode] = Memory(send)
        self.search: Search[Mode] = Search(send)
        self.contexts: Contexts[Mode] = Contexts(send)
        self.sessions: Sessions[Mode] = Sessions(send)
        self.admin: Admin[Mode] = Admin(send)
        self.operations: Operations[Mode] = Operations(send)

    def _send(self, call: Call[Any]) -> Any:
        raise NotImplementedError

    def _exchange(self, call: Call[Any]) -> Generator[Call[Any] | float, Any, Any]:
        """One call, without the I/O: yields the call to send (and is sent its response) or the seconds to wait
        before sending it again; returns the answer."""
        call = with_position(call, self._position)
        for attempt in range(self.retries + 1):
            response: httpx.Response = yield call
            if response.status_code not in RETRIED or attempt == self.retries or call.accept_503:
                break
            yield retry_delay(response, attempt, self.longest_wait)
        result = answer(call, response)
        if call.write:
            self.remember_position(written_position(result))
        return result

    @property
    def last_position(self) -> int | None:
        """The log position of the latest write this client made (sent as `min_position` by reads)."""
        return self._position

    def remember_position(self, position: int | None) -> None:
        """Make reads wait for `position` too (a write made elsewhere, e.g. by another client)."""
        if position is not None:
            with self._lock:
                self._position = max(self._position or 0, position)


def authorization(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}
