"""The MCP server (`noumena mcp`, stdio, the official `mcp` SDK): noumena's memory as tools for agent runtimes.

The tools call the same application as the HTTP routes and the CLI (domain/application/use_cases/). The tenant
is the one of the API key the server was started with; no tool takes a tenant. The key is checked again on every
call, so a revoked key stops working at once. Arguments follow the same rules as HTTP (domain/values.py), and where
a ref is expected a name that names exactly one entity does too. Every tool says what it does to memory
(annotations), every parameter is described, and an error is one short sentence naming the field and the fix.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Annotated, Any, Literal, TypeVar
from urllib.parse import unquote

from mcp.server.fastmcp import FastMCP
from mcp.server.fastmcp.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import Field, ValidationError

from domain.access import Caller
from domain.application.application import Application
from domain.commands import Source
from domain.errors import DomainError, NotPermitted, NoumenaError, UnknownEntity, UnknownPerspective
from domain.perspective import Perspective
from domain.values import Count, Flag, Identifier, RefOrName, RelationName, Scope, Text, Timestamp, text

T = TypeVar("T")
INSTRUCTIONS = """noumena is the memory behind an agent's main session: who is who, how they relate, why, and how
far along things are. Refs look like person:wang or agent:wang-assistant; wherever a tool takes a ref, a name that
names exactly one entity works too (otherwise the error lists the candidates).
- `find_entities`: find someone or something by name (王总, Wang, a typo) and get its ref. Use it first when you
  know only a name.
- `perspective`: what to keep in mind now, from where you stand (your agent ref and the person you serve). Call
  it at the start of a turn. Also a resource: noumena://perspective/{agent}/{serving}.
- `deepen`: think one step further from a perspective you were given (one more hop, a lower threshold).
- `context`: the whole context block of your main session for the request you are answering. Also a resource:
  noumena://context/{session_id}.
- `recall`: look up facts about one entity, nearest memory tier first (session, person, organization).
- `search`: find facts by content, in your own words, when you know no entity to ask about.
- `list_relations`: the relation names in use and their rules; a functional one (e.g. works_for) keeps one
  current object, so remembering a new one supersedes the old. Check it before choosing a relation name.
- `remember`: record a relation subject -relation-> object with its reason and where it came from.
- `correct`: end a fact that no longer holds (it stays in history).
- `forget`: really delete what is known about a subject when someone asks to be forgotten (irreversible)."""

READS = ToolAnnotations(readOnlyHint=True, destructiveHint=False, idempotentHint=True, openWorldHint=False)
"""Tools that change no fact. Serving a perspective, a context or a search also records that its facts were
shown (a use, which ranks them higher next time): bookkeeping of reading, not a change to what is known."""
LOOKUP = ToolAnnotations(readOnlyHint=False, destructiveHint=False, idempotentHint=True, openWorldHint=False)
"""`recall`: a lookup that restores a fact archived for disuse when it finds one."""
ADDS = ToolAnnotations(readOnlyHint=False, destructiveHint=False, idempotentHint=False, openWorldHint=False)
ENDS = ToolAnnotations(readOnlyHint=False, destructiveHint=True, idempotentHint=True, openWorldHint=False)

_FIXES: dict[type, str] = {
    UnknownEntity: "find its ref with find_entities, or pass subject_label / object_label to register it",
    NotPermitted: "ask as one of this key's agents, about a person they serve",
    UnknownPerspective: "call perspective for a new one",
}


def _sentence(text: str) -> str:
    text = text.strip()
    return text if text.endswith((".", "?", "!")) else text + "."


def _fix(error: Exception) -> str:
    for kind, fix in _FIXES.items():
        if isinstance(error, kind):
            return f"; {fix}"
    return ""


@contextmanager
def _tool_errors() -> Iterator[None]:
    try:
        yield
    except DomainError as error:
        where = f"{error.field}: " if error.field else ""
        raise ToolError(_sentence(f"{where}{error.message}{_fix(error)}")) from None
    except ValidationError as error:
        raise ToolError(_validation_sentence(error)) from None
    except UnknownPerspective as error:
        raise ToolError(_sentence(f"perspective_id: {error}{_fix(error)}")) from None
    except NoumenaError as error:
        raise ToolError(_sentence(f"{error}; try again in a moment")) from None


def _validation_sentence(error: ValidationError) -> str:
    first = error.errors()[0]
    field = ".".join(str(p) for p in first["loc"]) or _model_field(error.title)
    more = f" ({error.error_count() - 1} more)" if error.error_count() > 1 else ""
    return _sentence(f"{field}: {first['msg']}{more}; fix {field} and call again")


def _model_field(model: str) -> str:
    """The field a whole-model error is about (a command's own check, e.g. `correct` naming no fact)."""
    return {"InvalidateFact": "fact_id"}.get(model, model)


def _call(function: Callable[[], T]) -> T:
    with _tool_errors():
        return function()


class _Server(FastMCP):  # type: ignore[type-arg]
    """FastMCP whose errors are the tools' own short sentences: arguments that fail validation, and errors raised
    inside a tool, are not wrapped in "Error executing tool ..." and a validation report."""

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        try:
            return await super().call_tool(name, arguments)
        except ToolError as error:
            cause = error.__cause__
            if isinstance(cause, ValidationError):
                raise ToolError(_validation_sentence(cause)) from None
            if isinstance(cause, ToolError):
                raise ToolError(str(cause)) from None
            raise


def _brief(served: Perspective, format: str) -> dict[str, Any]:
    perspective = served.model_dump(mode="json")
    answer = {"perspective_id": perspective["perspective_id"], "context": perspective["context"],
              "counts": perspective["counts"]}
    if format == "json":
        answer["items"] = [{k: item[k] for k in ("tier", "fact_id", "subject", "relation", "object", "reason",
                                                  "activation", "hops")} for item in perspective["items"]]
    return answer


AgentRef = Annotated[RefOrName, Field(description="Your agent's ref (or its name), e.g. agent:wang-assistant")]
ServingRef = Annotated[RefOrName | None, Field(description="The person you serve now: ref or name, e.g. person:wang"
                                               " or 王总; omit when you serve no one in particular")]
SessionId = Annotated[Identifier | None, Field(description="Your session id, to look in that session's memory first"
                                               " (e.g. wang-main); omit if none")]
Budget = Annotated[Count | None, Field(ge=40, le=100_000, description="Most tokens the context block may take"
                                       " (default 800)")]
Format = Annotated[Literal["markdown", "json"], Field(description="markdown: the context block only; json: also"
                                                      " every item with its fact_id, tier and activation")]
AsOf = Annotated[Timestamp | None, Field(description="What was believed at this moment (ISO 8601 with a zone, e.g."
                                         " 2026-09-10T10:00:00+08:00); omit for now")]


def build_server(memory: Application, tenant: str, key: str | None = None, keys: Any = None) -> FastMCP:  # type: ignore[type-arg]
    """The MCP server for one tenant, over an application already built. With `key`, every call checks it
    again (against the key store, which follows its file): a revoked key is refused from the next call on."""
    server = _Server("noumena", instructions=INSTRUCTIONS)

    def caller() -> Caller:
        """The key's caller now (no agents: tenant-wide); a revoked key is refused."""
        if key is None:
            return Caller(tenant)
        record = keys.record_for(key) if keys is not None else None
        if record is None or record.tenant != tenant:
            raise ToolError("NOUMENA_API_KEY: unknown or revoked API key; nothing was done. Start the server with a"
                            " valid key.")
        return Caller(tenant, record.agents)

    def named(value: str, field: str) -> str:
        """A ref given as itself or by a name that names exactly one entity the key may see."""
        return _call(lambda: memory.entities.resolve_ref(caller(), value, field))

    def named_if(value: str | None, field: str) -> str | None:
        return None if value is None else named(value, field)

    def checked(annotations: ToolAnnotations) -> Callable[[Callable[..., T]], Callable[..., T]]:
        def register(function: Callable[..., T]) -> Callable[..., T]:
            @functools.wraps(function)
            def call(*args: Any, **kwargs: Any) -> T:
                caller()
                return function(*args, **kwargs)
            return server.tool(annotations=annotations)(call)  # type: ignore[no-any-return]
        return register

    @checked(READS)
    def find_entities(
        name: Annotated[text(1, 200), Field(description="A name as a person would say it, in any script: a label,"
                                            " an alias, a ref or part of one; typos are tolerated. E.g. 王总, Wang")],
        limit: Annotated[Count, Field(ge=1, le=50, description="Most entities returned, best first")] = 10,
    ) -> dict[str, Any]:
        """Find entities by name, best first, with their refs (score 1 = exactly this one; `match` says how it
        matched). Use it whenever you know someone or something only by name and a tool needs a ref."""
        found, count = _call(lambda: memory.entities.find_entities(caller(), name, limit))
        return {"entities": [{"ref": f.ref, "label": f.label, "kind": f.kind, "score": f.score, "match": f.match,
                              "matched": f.matched} for f in found], "count": count}

    @checked(READS)
    def list_relations() -> dict[str, Any]:
        """The relation names this organization's memory knows and uses, with their rules: `functional` ones keep
        one current object per subject (remembering a new one supersedes the old), `symmetric` ones read both
        ways. Check it before remembering, to reuse an existing name."""
        relations = _call(lambda: memory.entities.relations(caller()))
        return {"relations": [vars(r) for r in relations]}

    @checked(READS)
    def perspective(agent: AgentRef, serving: ServingRef = None,
                    focus: Annotated[list[RefOrName] | None, Field(
                        description="Refs or names of what the conversation is about now (a file, a ticket, a"
                        " person)", max_length=20)] = None,
                    as_of: AsOf = None, budget_tokens: Budget = None, format: Format = "markdown",
                    ) -> dict[str, Any]:
        """What you see from where you stand: the context block to keep in mind, ranked in clarity tiers (full,
        gist, marker, count). Call it at the start of a turn."""
        agent_ref, serving_ref = named(agent, "agent"), named_if(serving, "serving")
        refs = [named(ref, f"focus.{i}") for i, ref in enumerate(focus or [])]
        return _brief(_call(lambda: memory.reading.perspective(caller(), agent_ref, serving_ref, refs,
                                                               as_of, budget_tokens)), format)

    @checked(READS)
    def deepen(perspective_id: Annotated[Identifier, Field(description="The perspective_id a perspective call"
                                                           " returned")],
               budget_tokens: Budget = None, format: Format = "markdown") -> dict[str, Any]:
        """Think deeper from a perspective you were given: one more hop, a lower threshold."""
        return _brief(_call(lambda: memory.reading.deepen(caller(), perspective_id, budget_tokens)), format)

    @checked(ADDS)
    def remember(
        subject: Annotated[RefOrName, Field(description="Who or what it is about: a ref (person:li) or the name of"
                                            " a known entity")],
        relation: Annotated[RelationName, Field(description="snake_case relation name, e.g. prefers, works_for"
                                                " (see list_relations)")],
        object: Annotated[RefOrName, Field(description="The other end: a ref (memory:li-monthly) or a known"
                                           " entity's name")],
        reason: Annotated[Text | None, Field(description="Why it holds, in a sentence")] = None,
        confidence: Annotated[float | None, Field(ge=0, le=1, strict=True,
                                                  description="How sure, 0 to 1 (default 1)")] = None,
        scope: Annotated[Scope, Field(description="Who may ever see it: org (everyone), person:<ref> (only while"
                                      " serving that person), session:<id> (this session)")] = "org",
        session_id: Annotated[Identifier | None, Field(description="Provenance: the session it came from")] = None,
        message_ids: Annotated[list[Identifier] | None, Field(description="Provenance: the messages it came"
                                                              " from")] = None,
        actor: Annotated[text(1, 200) | None, Field(description="Provenance: who extracted it, e.g. your agent"
                                                    " ref")] = None,
        valid_from: Annotated[Timestamp | None, Field(description="Since when it holds in the world (ISO 8601);"
                                                      " omit for now")] = None,
        subject_label: Annotated[text(1, 500) | None, Field(description="The subject's name, to register it when"
                                                            " it is new")] = None,
        object_label: Annotated[text(1, 500) | None, Field(description="The object's name, to register it when it"
                                                           " is new")] = None,
    ) -> dict[str, Any]:
        """Remember a relation `subject -relation-> object` with its reason and provenance. Repeating a fact
        corroborates it; for a functional relation a new object supersedes the old."""
        def run() -> dict[str, Any]:
            labels: dict[str, str | None] = {}
            subject_ref = subject if subject_label else named(subject, "subject")
            object_ref = object if object_label else named(object, "object")
            for ref, label in ((subject_ref, subject_label), (object_ref, object_label)):
                if label:
                    labels.setdefault(ref, label)
            source = Source(session_id=session_id, message_ids=tuple(message_ids or ()), actor=actor)
            written = memory.facts.remember(caller(), labels, subject=subject_ref, relation=relation, object=object_ref,
                                            reason=reason, confidence=confidence, scope=scope, valid_from=valid_from,
                                            source=source)
            return {"fact_id": written.fact_id, "change": written.change, "supersedes": written.supersedes,
                    "position": written.position}
        return _call(run)

    @checked(ENDS)
    def correct(
        reason: Annotated[Text, Field(description="Why it no longer holds")],
        fact_id: Annotated[Identifier | None, Field(description="The fact to end (from perspective, recall or"
                                                    " search); or name it by subject, relation, object")] = None,
        subject: Annotated[RefOrName | None, Field(description="The fact's subject (ref or name)")] = None,
        relation: Annotated[RelationName | None, Field(description="The fact's relation")] = None,
        object: Annotated[RefOrName | None, Field(description="The fact's object (ref or name)")] = None,
        scope: Annotated[Scope, Field(description="The fact's scope: org, person:<ref> or session:<id>")] = "org",
        valid_to: Annotated[Timestamp | None, Field(description="When it stopped holding in the world (ISO 8601);"
                                                    " omit for now")] = None,
    ) -> dict[str, Any]:
        """Correct memory: end a fact (by fact_id, or by subject, relation, object) that no longer holds. It is
        kept in history ("what was believed then"), never in a current perspective again."""
        def run() -> dict[str, Any]:
            written = memory.facts.invalidate_fact(caller(), fact_id=fact_id, subject=named_if(subject, "subject"),
                                                   relation=relation, object=named_if(object, "object"), scope=scope,
                                                   reason=reason, valid_to=valid_to)
            return {"fact_id": written.fact_id, "change": written.change, "position": written.position}
        return _call(run)

    @checked(LOOKUP)
    def recall(
        agent: AgentRef,
        subject: Annotated[RefOrName, Field(description="The entity to look up facts about: ref or name")],
        relation: Annotated[RelationName | None, Field(description="Only this relation, e.g. prefers")] = None,
        serving: ServingRef = None, session_id: SessionId = None,
        deeper: Annotated[Flag, Field(description="Also look in facts archived for disuse (and restore those"
                                      " found)")] = False,
    ) -> dict[str, Any]:
        """Look facts about one entity up, nearest tier first (your session, then the person you serve, then
        the organization); says which tier answered."""
        agent_ref, serving_ref = named(agent, "agent"), named_if(serving, "serving")
        subject_ref = named(subject, "subject")
        result = _call(lambda: memory.reading.recall(caller(), agent_ref, subject_ref, relation=relation,
                                                     serving=serving_ref, session_id=session_id, deeper=deeper))
        return {"answered_by": result.answered_by, "tiers_checked": result.tiers_checked,
                "facts": [{"tier": h.tier, **{k: v for k, v in h.fact.items() if k in (
                    "fact_id", "subject", "relation", "object", "scope", "reason", "confidence")}}
                          for h in result.hits]}

    @checked(READS)
    def search(
        agent: AgentRef,
        query: Annotated[text(1, 10_000), Field(description="What you are looking for, in your own words")],
        serving: ServingRef = None, session_id: SessionId = None,
        k: Annotated[Count, Field(ge=1, le=100, description="Most facts returned (5 to 20 is usual)")] = 10,
        as_of: AsOf = None,
        about: Annotated[list[RefOrName] | None, Field(description="Only facts touching these entities (refs or"
                                                       " names)", max_length=20)] = None,
    ) -> dict[str, Any]:
        """Recall by content: the facts you may see that match the query (words and meaning), nearest tier first
        (your session, the person you serve, the org), each with its score components and source messages."""
        agent_ref, serving_ref = named(agent, "agent"), named_if(serving, "serving")
        refs = [named(ref, f"about.{i}") for i, ref in enumerate(about or [])]
        from projections.searches import search_json

        return search_json(_call(lambda: memory.reading.search_for(caller(), agent_ref, query, serving=serving_ref,
                                                                   session_id=session_id, k=k, as_of=as_of,
                                                                   about=refs)))

    @checked(ENDS)
    def forget(subject: Annotated[RefOrName, Field(description="What to forget: person:<ref> (forget me),"
                                                   " memory:<ref> or fact:<id> (forget that), session:<id>; or the"
                                                   " exact name of a person or memory")]) -> dict[str, Any]:
        """Really delete what is known about a subject ("forget me", "forget that"): its content becomes
        unreadable everywhere, irreversibly; ids and relations stay. Only when someone asks for it."""
        ref = named(subject, "subject")
        written = _call(lambda: memory.forgetting.forget(caller(), ref))
        return {"subject": ref, "keys_deleted": written.keys_deleted, "position": written.position,
                "receipt_id": written.receipt.receipt_id if written.receipt is not None else None}

    def context_of(session_id: str, message: str | None, budget_tokens: int | None) -> dict[str, Any]:
        served = _call(lambda: memory.reading.context(caller(), session_id, message, budget_tokens))
        return {"context_id": served.context_id, "context": served.text, "tokens": served.tokens,
                "focus": [f.ref for f in served.focus]}

    @checked(READS)
    def context(
        session_id: Annotated[Identifier, Field(description="Your main session id, e.g. wang-main")],
        message: Annotated[text(0, 50_000) | None, Field(description="The request you are answering now")] = None,
        budget_tokens: Annotated[Count | None, Field(ge=1, le=200_000, description="Most tokens the block may"
                                                     " take")] = None,
    ) -> dict[str, Any]:
        """The context block for your main session, compiled for this request: hard constraints, relations in
        view, live workers, the rolling summary and the recent turns, within the budget."""
        return context_of(session_id, message, budget_tokens)

    # (a URI carries names percent-encoded: 王总 arrives as %E7%8E%8B%E6%80%BB)
    @server.resource("noumena://perspective/{agent}", mime_type="text/markdown",
                     description="The perspective of an agent serving no one in particular (the context block).")
    def perspective_resource(agent: str) -> str:
        return str(perspective(unquote(agent))["context"])

    @server.resource("noumena://perspective/{agent}/{serving}", mime_type="text/markdown",
                     description="The perspective of an agent serving a person (refs or names): the context"
                     " block.")
    def perspective_serving_resource(agent: str, serving: str) -> str:
        return str(perspective(unquote(agent), unquote(serving))["context"])

    @server.resource("noumena://context/{session_id}", mime_type="text/markdown",
                     description="The context block of a main session.")
    def context_resource(session_id: str) -> str:
        return str(context_of(unquote(session_id), None, None)["context"])

    return server


def run_stdio(key: str) -> None:
    """Serve MCP over stdin/stdout for the tenant of `key`."""
    import sys

    from infra.bootstrap import api_keys, bootstrap

    noumena = bootstrap()
    try:
        keys = api_keys(noumena.settings)
        tenant = keys.tenant_for(key)
        if tenant is None:
            print("error: unknown or revoked API key (NOUMENA_API_KEY / --key)", file=sys.stderr)
            raise SystemExit(2)
        build_server(noumena.application, tenant, key, keys).run("stdio")
    finally:
        noumena.close()
