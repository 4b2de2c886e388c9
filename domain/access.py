"""Who may do what: the caller of a use case (a tenant, and the agents a key is scoped to) and the rules that
decide, once, for every entry point (HTTP, MCP, CLI).

A key naming no agents is tenant-wide (services, operators). A key scoped to agents:
- reads only as its agents, about persons they serve (a person one of them has a main session with, or the object
  of a current `serves` fact whose subject is one of them), in sessions of theirs;
- writes only as its agents: a fact's subject, its scope, its provenance's actor and session must be its agents,
  persons they serve or their sessions, and its provenance may cite only messages of their sessions;
- cannot use the tenant-wide use cases (events, entities, invalidation, forgetting, the graph, evidence).

Pure rules over the folded ontology; the use cases (`domain/application/use_cases/`) apply them before they do anything.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from domain.errors import NotPermitted
from domain.ontology import SERVES, Ontology
from domain.sessions import SessionState


@dataclass(frozen=True)
class Caller:
    """Who asks: the tenant of the key, and the agents it acts as (empty: a tenant-wide key)."""

    tenant: str
    agents: tuple[str, ...] = ()

    @property
    def scoped(self) -> bool:
        return bool(self.agents)


def as_caller(who: Caller | str) -> Caller:
    """A caller; a bare tenant name is a tenant-wide caller (the CLI, consumers and operators name a tenant)."""
    return who if isinstance(who, Caller) else Caller(who)


def persons_served(state: Ontology, agents: Collection[str]) -> set[str]:
    """Who `agents` serve: the persons of their main sessions and the objects of their current `serves` facts
    (the ontology's `served_by`, kept by the fold: O(persons of these agents))."""
    served: set[str] = set()
    for agent in agents:
        persons = state.served_by.get(agent)
        if persons:
            served.update(person for person, reasons in persons.items() if reasons)
    return served


def _agents_text(agents: Collection[str]) -> str:
    return ", ".join(sorted(agents))


def _own_session(state: Ontology, agents: Collection[str], session_id: str) -> SessionState | None:
    session = state.sessions.get(session_id)
    return session if session is not None and session.agent in agents else None


def check_acts_as(state: Ontology, agents: Collection[str], agent: str, serving: str | None = None,
                  session_id: str | None = None) -> None:
    """Raise NotPermitted (naming the field) unless a key scoped to `agents` may ask as `agent`, serving
    `serving`, in `session_id`. An empty `agents` is a tenant-wide key: everything is allowed."""
    if not agents:
        return
    if agent not in agents:
        raise NotPermitted(f"this key acts only as {_agents_text(agents)}, not {agent}", field="agent")
    if session_id is not None and _own_session(state, agents, session_id) is None:
        raise NotPermitted(f"session {session_id!r} is not a session of this key's agents", field="session_id")
    if serving is not None and serving not in persons_served(state, agents):
        raise NotPermitted(f"{serving} is not served by this key's agents (no main session with them and no"
                           f" 'serves' fact)", field="serving")


def require_tenant_wide(agents: Collection[str], what: str) -> None:
    if agents:
        raise NotPermitted(f"{what} needs a tenant-wide key; this key acts only as {_agents_text(agents)}",
                           field="Authorization")


def check_may_assert(agents: Collection[str], relation: str) -> None:
    """An agent-scoped key may remember facts, but not `serves` ones: those decide whom its agents serve, so
    writing one would widen the key's own reach. Tenant-wide keys (services) write them."""
    if agents and relation == SERVES:
        raise NotPermitted("a 'serves' fact decides whom an agent serves: write it with a tenant-wide key",
                           field="relation")


class _Reach:
    """What a scoped key's agents stand for: themselves, the persons they serve, their sessions (the persons
    found once per check)."""

    def __init__(self, state: Ontology, agents: Collection[str]) -> None:
        self.state, self.agents = state, agents
        self._served: set[str] | None = None

    @property
    def served(self) -> set[str]:
        if self._served is None:
            self._served = persons_served(self.state, self.agents)
        return self._served

    def session(self, session_id: str, field: str) -> SessionState:
        session = _own_session(self.state, self.agents, session_id)
        if session is None:
            raise NotPermitted(f"session {session_id!r} is not a session of this key's agents"
                               f" ({_agents_text(self.agents)})", field=field)
        return session

    def party(self, ref: str, field: str) -> None:
        """`ref` as the one a fact is about or by: one of the agents, a person they serve, a session of theirs,
        or a thing (a ticket, a file, a memory) that is not a hub."""
        if ref in self.agents:
            return
        kind = ref.split(":", 1)[0]
        if kind == "agent":
            raise NotPermitted(f"this key writes only as {_agents_text(self.agents)}, not as {ref}", field=field)
        if kind == "person":
            if ref not in self.served:
                raise NotPermitted(f"{ref} is not served by this key's agents (no main session with them and no"
                                   f" 'serves' fact)", field=field)
            return
        if kind == "session":
            self.session(ref.removeprefix("session:"), field)
            return
        entity = self.state.entities.get(ref)
        if entity is not None and entity.hub:
            raise NotPermitted(f"{ref} is a hub (many unrelated parties touch it): facts about it are written with"
                               f" a tenant-wide key", field=field)

    def sees(self, scope: str) -> bool:
        try:
            self.scope(scope, "scope")
        except NotPermitted:
            return False
        return True

    def memory(self, ref: str, field: str) -> None:
        """A `memory:` entity's label is a remembered statement: content of the scopes its facts are in. A fact
        naming one that only facts in scopes the key's agents do not see touch would show that statement in
        their own perspective and search (a memory no fact touches yet is nobody's: it may be used)."""
        if not ref.startswith("memory:") or ref in self.agents or ref not in self.state.entities:
            return
        touching = [f for f in self.state.facts.values() if ref in (f.subject, f.object)]
        if touching and not any(self.sees(f.scope) for f in touching):
            raise NotPermitted(f"{ref} is remembered in memory this key's agents do not see", field=field)

    def scope(self, scope: str, field: str) -> None:
        """A scope the key's agents see: org, a person they serve, a session of theirs."""
        if scope == "org":
            return
        if scope.startswith("person:"):
            if scope not in self.served:
                raise NotPermitted(f"{scope} is not served by this key's agents: it cannot write into that"
                                   f" person's memory", field=field)
            return
        self.session(scope.removeprefix("session:"), field)

    def actor(self, actor: str, field: str) -> None:
        if actor not in self.agents and actor not in self.served:
            raise NotPermitted(f"this key writes only as {_agents_text(self.agents)} (or a person they serve),"
                               f" not as {actor!r}", field=field)

    def messages(self, session_id: str | None, message_ids: Sequence[str], field: str) -> None:
        """Each cited message must be one the key's agents can read: in a session of theirs (the named one)."""
        sessions = [self.session(session_id, f"{field}.session_id")] if session_id is not None else [
            s for s in self.state.sessions.values() if s.agent in self.agents]
        for index, message_id in enumerate(message_ids):
            if not any(message_id in s.message_ids for s in sessions):
                where = f"session {session_id!r}" if session_id is not None else "the sessions of this key's agents"
                raise NotPermitted(f"message {message_id!r} is not in {where}: a fact may cite only messages this"
                                   f" key can read", field=f"{field}.message_ids[{index}]")


def check_may_write_fact(state: Ontology, agents: Collection[str], *, subject: str, relation: str, obj: str,
                         scope: str, session_id: str | None = None, message_ids: Sequence[str] = (),
                         actor: str | None = None, field_prefix: str = "") -> None:
    """Raise NotPermitted (naming the field) unless a key scoped to `agents` may write this fact: as its agents,
    into memory they see. The object is free (a fact may relate one's own to anyone: who sees the fact is decided
    by its scope and subject, which are checked), except a remembered statement the key may not read. An empty
    `agents` is a tenant-wide key."""
    if not agents:
        return
    check_may_assert(agents, relation)
    reach = _Reach(state, agents)
    reach.party(subject, f"{field_prefix}subject")
    reach.memory(subject, f"{field_prefix}subject")
    reach.memory(obj, f"{field_prefix}object")
    reach.scope(scope, f"{field_prefix}scope")
    source = f"{field_prefix}source"
    if actor is not None:
        reach.actor(actor, f"{source}.actor")
    if session_id is not None or message_ids:
        reach.messages(session_id, message_ids, source)


def scopes_seen(state: Ontology, agents: Collection[str]) -> Callable[[str], bool]:
    """Whether a scope is one a key scoped to `agents` sees (org, persons they serve, their sessions); every scope
    for a tenant-wide key. For answers that aggregate over facts (counts), so they count only what it may see."""
    if not agents:
        return lambda scope: True
    return _Reach(state, agents).sees


def check_may_use(state: Ontology, agents: Collection[str], fact_ids: Sequence[str], field: str = "fact_ids"
                  ) -> None:
    """A scoped key records uses only of facts its agents may see (org, persons they serve, their sessions)."""
    if not agents:
        return
    reach = _Reach(state, agents)
    for index, fact_id in enumerate(fact_ids):
        fact = state.facts.get(fact_id)
        if fact is None:
            continue  # unknown ids are the use case's 404
        try:
            reach.scope(fact.scope, f"{field}[{index}]")
        except NotPermitted:
            raise NotPermitted(f"fact {fact_id!r} is not visible to this key's agents", field=f"{field}[{index}]"
                               ) from None


def admin_key_matches(configured: str, presented: str) -> bool:
    """Constant-time check of the admin key; an unset admin key matches nothing."""
    return bool(configured) and hmac.compare_digest(configured.encode(), presented.encode())
