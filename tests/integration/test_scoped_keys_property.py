"""Agent-scoped keys over random organisations, through the application (every entry point's path): a key
scoped to some agents writes a fact exactly when a reference written from docs/hardening.md says it may (its
agents, the persons they serve, their sessions and messages, remembered statements it may read), and no search
it makes finds a fact by the words of a message its agents may not read, whatever facts a tenant-wide writer made
citing that message, nor by a remembered statement only facts it may not see hold."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from domain.access import Caller
from domain.commands import CreateTenant, Source
from domain.errors import NotPermitted
from infra.bootstrap import Noumena
from tests.properties import examples

AGENTS = ["agent:a0", "agent:a1", "agent:a2"]
PERSONS = ["person:p0", "person:p1", "person:p2"]
THINGS = ["ticket:t0"]
MEMORIES = ["memory:r0", "memory:r1", "memory:r2"]


def secret(session: int) -> str:
    """A word only session `session`'s message holds."""
    return f"zq{session}hidden"


def remembered(memory: str) -> str:
    """A word only `memory`'s statement (its label) holds."""
    return f"zq{memory.removeprefix('memory:r')}stated"


@dataclass
class Organisation:
    sessions: list[tuple[str, str, str | None]]
    """(session id, agent, person served or None): main sessions."""
    serves: list[tuple[str, str]]
    key_agents: tuple[str, ...]
    tenant_writes: list[dict[str, Any]]
    attempts: list[dict[str, Any]] = field(default_factory=list)


def _facts(draw: st.DrawFn, sessions: list[str], count: int) -> list[dict[str, Any]]:
    scopes = ["org", *PERSONS, *(f"session:{s}" for s in sessions)]
    messages = [f"m-{s}" for s in sessions]
    facts = []
    for _ in range(count):
        session_id = draw(st.sampled_from([None, *sessions]))
        subject = draw(st.sampled_from(AGENTS + PERSONS + THINGS + MEMORIES))
        facts.append({"subject": subject,
                      "object": draw(st.sampled_from([r for r in PERSONS + THINGS + MEMORIES if r != subject])),
                      "scope": draw(st.sampled_from(scopes)),
                      "source": Source(session_id=session_id,
                                       message_ids=tuple(draw(st.lists(st.sampled_from(messages), max_size=2,
                                                                       unique=True))),
                                       actor=draw(st.sampled_from([None, *AGENTS, *PERSONS, "an extractor"])))})
    return facts


@st.composite
def organisations(draw: st.DrawFn) -> Organisation:
    sessions = [(f"s{k}", draw(st.sampled_from(AGENTS)), draw(st.sampled_from([*PERSONS, None])))
                for k in range(draw(st.integers(1, 5)))]
    serves = draw(st.lists(st.tuples(st.sampled_from(AGENTS), st.sampled_from(PERSONS)), max_size=2))
    key_agents = tuple(sorted(draw(st.sets(st.sampled_from(AGENTS), min_size=1, max_size=2))))
    ids = [s for s, _, _ in sessions]
    return Organisation(sessions, serves, key_agents, _facts(draw, ids, draw(st.integers(0, 5))),
                        _facts(draw, ids, draw(st.integers(1, 8))))


class Reference:
    """What the key's agents stand for, written from docs/hardening.md (not from domain/access.py)."""

    def __init__(self, org: Organisation) -> None:
        self.agents = set(org.key_agents)
        self.own_sessions = {s for s, agent, _ in org.sessions if agent in self.agents}
        self.served = {person for _, agent, person in org.sessions if agent in self.agents and person} | {
            person for agent, person in org.serves if agent in self.agents}
        self.session_of = {f"m-{s}": s for s, _, _ in org.sessions}
        self.sessions = {s: (agent, person) for s, agent, person in org.sessions}
        self.written: list[dict[str, Any]] = list(org.tenant_writes)
        """Every fact written so far (by the tenant, then what the key was let write)."""
        self.by_tenant = list(org.tenant_writes)

    def sees(self, scope: str) -> bool:
        return scope == "org" or scope in self.served or scope.removeprefix("session:") in self.own_sessions

    def may_name(self, ref: str, facts: list[dict[str, Any]]) -> bool:
        """A remembered statement is the key's to name if no fact holds it yet or one it sees does."""
        touching = [f for f in facts if ref in (f["subject"], f["object"])]
        return not ref.startswith("memory:") or not touching or any(self.sees(f["scope"]) for f in touching)

    def may_write(self, fact: dict[str, Any]) -> bool:
        subject, scope, source = fact["subject"], fact["scope"], fact["source"]
        kind = subject.split(":")[0]
        subject_ok = subject in self.agents or (kind == "person" and subject in self.served) or kind in (
            "ticket", "memory")
        memories_ok = self.may_name(subject, self.written) and self.may_name(fact["object"], self.written)
        scope_ok = self.sees(scope)
        actor_ok = source.actor is None or source.actor in self.agents or source.actor in self.served
        session_ok = source.session_id is None or source.session_id in self.own_sessions
        messages_ok = all(self.session_of[m] in self.own_sessions and source.session_id in (None, self.session_of[m])
                          for m in source.message_ids)
        return subject_ok and memories_ok and scope_ok and actor_ok and session_ok and messages_ok

    def may_read(self, agent: str, serving: str | None, session: str) -> bool:
        """Whether a viewer (agent serving `serving`) may read the messages of `session`: a session of the agent
        serving that person or no one, or (through a person's episodic facts) a session serving that person."""
        said_by, said_for = self.sessions[session]
        return (said_by == agent and said_for in (None, serving)) or (serving is not None and said_for == serving)


_tenants = itertools.count()


@pytest.fixture(scope="module")
def noumena(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from infra.bootstrap import bootstrap
    from infra.settings import Settings

    built = bootstrap(Settings(home=tmp_path_factory.mktemp("scoped") / "home", event_store="sqlite"))
    yield built
    built.close()


def _build(noumena: Noumena, org: Organisation) -> str:
    tenant = f"org-{next(_tenants)}"
    app = noumena.application
    noumena.service.execute(CreateTenant(tenant=tenant))
    envelopes: list[dict[str, Any]] = [
        {"event_id": f"{tenant}-{ref}", "tenant": tenant, "type": "entity.registered",
         "payload": {"ref": ref, "label": remembered(ref) if ref in MEMORIES else ref.split(":")[1]}}
        for ref in AGENTS + PERSONS + THINGS + MEMORIES]
    for k, (session, agent, person) in enumerate(org.sessions):
        envelopes.append({"event_id": f"{tenant}-{session}", "tenant": tenant, "type": "session.started",
                          "payload": {"session_id": session, "agent": agent, "serving": person}})
        envelopes.append({"event_id": f"{tenant}-m-{session}", "tenant": tenant, "type": "message.appended",
                          "payload": {"session_id": session, "message_id": f"m-{session}", "role": "user",
                                      "content": f"remember {secret(k)} please"}})
    app.facts.ingest(tenant, envelopes)
    for agent, person in org.serves:
        app.facts.assert_fact(tenant, subject=agent, relation="serves", object=person)
    for index, fact in enumerate(org.tenant_writes):
        app.facts.assert_fact(tenant, relation="noted", reason=f"tenant wrote {index}", **fact)
    return tenant


@settings(max_examples=examples(0.1), suppress_health_check=[HealthCheck.too_slow,
                                                            HealthCheck.function_scoped_fixture])
@given(organisations())
def test_a_scoped_key_neither_writes_nor_learns_what_its_agents_may_not_see(noumena: Noumena,
                                                                            org: Organisation) -> None:
    tenant = _build(noumena, org)
    app = noumena.application
    caller = Caller(tenant, org.key_agents)
    reference = Reference(org)
    for index, fact in enumerate(org.attempts):
        try:
            app.facts.assert_fact(caller, relation="claimed", reason=f"key wrote {index}", **fact)
            accepted = True
        except NotPermitted:
            accepted = False
        assert accepted == reference.may_write(fact), (fact, reference.__dict__)
        if accepted:
            reference.written.append(fact)
    for agent in org.key_agents:
        for serving in [None, *sorted(reference.served)]:
            for k, (session, _, _) in enumerate(org.sessions):
                answer = app.reading.search_for(caller, agent, secret(k), serving=serving, k=100)
                found = [item for item in answer.items if item.scores["lexical"] > 0]
                assert not found or reference.may_read(agent, serving, session), (agent, serving, session, found)
            for memory in MEMORIES:
                answer = app.reading.search_for(caller, agent, remembered(memory), serving=serving, k=100)
                found = [item for item in answer.items if item.scores["lexical"] > 0]
                assert not found or reference.may_name(memory, reference.by_tenant), (agent, serving, memory, found)
