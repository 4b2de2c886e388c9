"""The MCP server (`noumena mcp`, stdio, the official `mcp` SDK): noumena's memory as tools for agent runtimes.

The tools call the same application as the HTTP routes and the CLI (domain/application/use_cases.py), passing the
caller of the key the server was started with (its tenant and the agents it is scoped to); the use cases decide
what it may do, as for HTTP. No tool takes a tenant. The key is checked again on every call, so a revoked key
stops working at once. Arguments follow the same rules as HTTP (domain/values.py); errors
come back as tool errors naming the field.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Annotated, Any, Literal, TypeVar

from mcp.server.fastmcp import FastMCP
from mcp.server.fastmcp.exceptions import ToolError
from pydantic import Field, ValidationError

from domain.access import Caller
from domain.application.use_cases import Application
from domain.commands import Source
from domain.errors import DomainError, NoumenaError, UnknownPerspective
from domain.perspective import Perspective
from domain.values import Count, Flag, Identifier, Ref, RelationName, Scope, Text, Timestamp, text

T = TypeVar("T")
INSTRUCTIONS = """noumena is the memory behind an agent's main session. Call `perspective` with your agent ref
(and the person you serve) to get what you should keep in mind, `deepen` to think one step further, `remember` to
record a relation with its reason and source, `correct` when something no longer holds, `recall` to look facts
up nearest tier first (session, person, organization)."""


@contextmanager
def _tool_errors() -> Iterator[None]:
    try:
        yield
    except DomainError as error:
        raise ToolError(f"{error.field}: {error.message}" if error.field else error.message) from None
    except ValidationError as error:
        first = error.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or _model_field(error.title)
        raise ToolError(f"{field}: {first['msg']}") from None
    except UnknownPerspective as error:
        raise ToolError(f"perspective_id: {error}") from None
    except NoumenaError as error:
        raise ToolError(str(error)) from None


def _model_field(model: str) -> str:
    """The field a whole-model error is about (a command's own check, e.g. `correct` naming no fact)."""
    return {"InvalidateFact": "fact_id"}.get(model, model)


def _call(function: Callable[[], T]) -> T:
    with _tool_errors():
        return function()


def _brief(served: Perspective, format: str) -> dict[str, Any]:
    perspective = served.model_dump(mode="json")
    answer = {"perspective_id": perspective["perspective_id"], "context": perspective["context"],
              "counts": perspective["counts"]}
    if format == "json":
        answer["items"] = [{k: item[k] for k in ("tier", "fact_id", "subject", "relation", "object", "reason",
                                                  "activation", "hops")} for item in perspective["items"]]
    return answer


def build_server(memory: Application, tenant: str, key: str | None = None, keys: Any = None) -> FastMCP:
    """The MCP server for one tenant, over an application already built. With `key`, every call checks it
    again (against the key store, which follows its file): a revoked key is refused from the next call on."""
    server = FastMCP("noumena", instructions=INSTRUCTIONS)

    def caller() -> Caller:
        """The key's caller now (no agents: tenant-wide); a revoked key is refused."""
        if key is None:
            return Caller(tenant)
        record = keys.record_for(key) if keys is not None else None
        if record is None or record.tenant != tenant:
            raise ToolError("NOUMENA_API_KEY: unknown or revoked API key; nothing was done")
        return Caller(tenant, record.agents)

    def named(value: str, field: str) -> str:
        """A ref given as itself or by a name that names exactly one entity the key may see."""
        return _call(lambda: memory.resolve_ref(caller(), value, field))

    def checked(function: Callable[..., T]) -> Callable[..., T]:
        @functools.wraps(function)
        def call(*args: Any, **kwargs: Any) -> T:
            caller()
            return function(*args, **kwargs)
        return server.tool()(call)  # type: ignore[no-any-return]

    @checked
    def find_entities(
        name: Annotated[text(1, 200), Field(description="A name as a person would say it, in any script: a label,"
                                            " an alias, a ref or part of one; typos are tolerated. E.g. 王总, Wang")],
        limit: Annotated[Count, Field(ge=1, le=50, description="Most entities returned")] = 10,
    ) -> dict[str, Any]:
        """Find entities by name, best first, with their refs: use it whenever you know someone or something only
        by name and a tool needs a ref."""
        found, count = _call(lambda: memory.find_entities(caller(), name, limit))
        return {"entities": [{"ref": f.ref, "label": f.label, "kind": f.kind, "score": f.score, "match": f.match,
                              "matched": f.matched} for f in found], "count": count}

    @checked
    def perspective(
        agent: Annotated[Ref, Field(description="Your agent ref, e.g. agent:wang-assistant")],
        serving: Annotated[Ref | None, Field(description="The person you serve now, e.g. person:wang")] = None,
        focus: Annotated[list[Ref] | None, Field(description="Refs in focus now", max_length=20)] = None,
        as_of: Annotated[Timestamp | None, Field(description="What was believed then (ISO 8601)")] = None,
        budget_tokens: Annotated[Count | None, Field(ge=40, le=100_000)] = None,
        format: Literal["markdown", "json"] = "markdown",
    ) -> dict[str, Any]:
        """What you see from where you stand: the context block to keep in mind, ranked in clarity tiers."""
        return _brief(_call(lambda: memory.perspective(caller(), agent, serving, focus or [], as_of, budget_tokens)),
                      format)

    @checked
    def deepen(perspective_id: Identifier, budget_tokens: Annotated[Count | None, Field(ge=40, le=100_000)] = None,
               format: Literal["markdown", "json"] = "markdown") -> dict[str, Any]:
        """Think deeper from a perspective you were given: one more hop, a lower threshold."""
        return _brief(_call(lambda: memory.deepen(caller(), perspective_id, budget_tokens)), format)

    @checked
    def remember(
        subject: Ref, relation: RelationName, object: Ref,
        reason: Annotated[Text | None, Field(description="Why it holds")] = None,
        confidence: Annotated[float | None, Field(ge=0, le=1, strict=True)] = None,
        scope: Annotated[Scope, Field(description="org, person:<ref> or session:<id>")] = "org",
        session_id: Annotated[Identifier | None, Field(description="Provenance: the session it came from")] = None,
        message_ids: Annotated[list[Identifier] | None, Field(description="Provenance: the messages")] = None,
        actor: Annotated[text(1, 200) | None, Field(description="Provenance: who extracted it")] = None,
        valid_from: Timestamp | None = None,
        subject_label: Annotated[text(1, 500) | None, Field(description="Registers the subject if it is new")] = None,
        object_label: Annotated[text(1, 500) | None, Field(description="Registers the object if it is new")] = None,
    ) -> dict[str, Any]:
        """Remember a relation `subject -relation-> object` with its reason and provenance."""
        def run() -> dict[str, Any]:
            labels: dict[str, str | None] = {}
            for ref, label in ((subject, subject_label), (object, object_label)):
                if label:
                    labels.setdefault(ref, label)
            source = Source(session_id=session_id, message_ids=tuple(message_ids or ()), actor=actor)
            written = memory.remember(caller(), labels, subject=subject, relation=relation, object=object,
                                      reason=reason, confidence=confidence, scope=scope, valid_from=valid_from,
                                      source=source)
            return {"fact_id": written.fact_id, "change": written.change, "supersedes": written.supersedes,
                    "position": written.position}
        return _call(run)

    @checked
    def correct(
        reason: Annotated[Text, Field(description="Why it no longer holds")],
        fact_id: Identifier | None = None, subject: Ref | None = None, relation: RelationName | None = None,
        object: Ref | None = None, scope: Scope = "org", valid_to: Timestamp | None = None,
    ) -> dict[str, Any]:
        """Correct memory: end a fact (by fact_id, or by subject, relation, object). It stays in history."""
        def run() -> dict[str, Any]:
            written = memory.invalidate_fact(caller(), fact_id=fact_id, subject=subject, relation=relation,
                                             object=object, scope=scope, reason=reason, valid_to=valid_to)
            return {"fact_id": written.fact_id, "change": written.change, "position": written.position}
        return _call(run)

    @checked
    def recall(
        agent: Ref, subject: Annotated[Ref, Field(description="Facts about this entity")],
        relation: RelationName | None = None, serving: Ref | None = None, session_id: Identifier | None = None,
        deeper: Flag = False,
    ) -> dict[str, Any]:
        """Look facts up nearest tier first (session, then the person served, then the org); says which answered."""
        result = _call(lambda: memory.recall(caller(), agent, subject, relation=relation, serving=serving,
                                             session_id=session_id, deeper=deeper))
        return {"answered_by": result.answered_by, "tiers_checked": result.tiers_checked,
                "facts": [{"tier": h.tier, **{k: v for k, v in h.fact.items() if k in (
                    "fact_id", "subject", "relation", "object", "scope", "reason", "confidence")}}
                          for h in result.hits]}

    @checked
    def search(
        agent: Ref, query: Annotated[text(1, 10_000), Field(description="What you are looking for, in your own words")],
        serving: Ref | None = None, session_id: Identifier | None = None,
        k: Annotated[Count, Field(ge=1, le=100)] = 10, as_of: Timestamp | None = None,
        about: Annotated[list[Ref] | None, Field(description="Only facts touching these entities", max_length=20)
                         ] = None,
    ) -> dict[str, Any]:
        """Recall by content: the facts you may see that match the query (words and meaning), nearest tier first
        (your session, the person you serve, the org), each with its score components and source messages."""
        from projections.searches import search_json

        return search_json(_call(lambda: memory.search_for(caller(), agent, query, serving=serving,
                                                           session_id=session_id, k=k, as_of=as_of,
                                                           about=about or ())))

    @checked
    def forget(subject: Annotated[Ref, Field(description="person:<ref>, memory:<ref>, session:<id> or fact:<id>")]
               ) -> dict[str, Any]:
        """Really delete what is known about a subject ("forget me", "forget that"): its content becomes
        unreadable everywhere; ids and relations stay."""
        written = _call(lambda: memory.forget(caller(), subject))
        return {"subject": subject, "keys_deleted": written.keys_deleted, "position": written.position,
                "receipt_id": written.receipt.receipt_id if written.receipt is not None else None}

    @checked
    def context(
        session_id: Annotated[Identifier, Field(description="Your main session id, e.g. wang-main")],
        message: Annotated[text(0, 50_000) | None, Field(description="The request you are answering now")] = None,
        budget_tokens: Annotated[Count | None, Field(ge=1, le=200_000)] = None,
    ) -> dict[str, Any]:
        """The context block for your main session, compiled for this request: hard constraints, relations in
        view, live workers, the rolling summary and the recent turns, within the budget."""
        served = _call(lambda: memory.context(caller(), session_id, message, budget_tokens))
        return {"context_id": served.context_id, "context": served.text, "tokens": served.tokens,
                "focus": [f.ref for f in served.focus]}

    return server


def run_stdio(key: str) -> None:
    """Serve MCP over stdin/stdout for the tenant of `key`."""
    import sys

    from infra.api_keys import ApiKeyStore
    from infra.bootstrap import bootstrap

    noumena = bootstrap()
    try:
        keys = ApiKeyStore(noumena.settings.api_keys_path())
        tenant = keys.tenant_for(key)
        if tenant is None:
            print("error: unknown or revoked API key (NOUMENA_API_KEY / --key)", file=sys.stderr)
            raise SystemExit(2)
        build_server(noumena.application, tenant, key, keys).run("stdio")
    finally:
        noumena.close()
