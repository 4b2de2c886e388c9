"""Whom agents serve (`domain.access.persons_served`) is read from the ontology's `served_by`, kept by the fold,
instead of a pass over every fact and session under the service's lock: it equals that pass after any history
of sessions, `serves` facts and their ends and restorations, and after a batch rolled back."""

from __future__ import annotations

from datetime import timedelta
from itertools import combinations

from hypothesis import given, settings
from hypothesis import strategies as st

from domain import commands as c
from domain.access import persons_served
from domain.errors import DomainError
from domain.facts import FactStatus
from domain.ontology import Ontology
from domain.rules import decide
from domain.sessions import SessionKind
from tests.properties import examples
from tests.unit.test_rules import NOW, T, people, when
from tests.unit.test_rules import given as folded

AGENTS = ("agent:a", "agent:b", "agent:c")
PERSONS = ("person:p", "person:q", "person:r")


def scanned(state: Ontology, agents: tuple[str, ...]) -> set[str]:
    """The pass over every session and fact that `served_by` replaces."""
    served = {s.serving for s in state.sessions.values()
              if s.agent in agents and s.kind == SessionKind.MAIN and s.serving is not None}
    served |= {f.object for f in state.facts.values()
               if f.relation == "serves" and f.subject in agents and f.status is FactStatus.CURRENT}
    return served


steps = st.one_of(
    st.tuples(st.just("session"), st.sampled_from(AGENTS), st.sampled_from([None, None, *PERSONS])),
    st.tuples(st.just("worker"), st.integers(0, 9), st.just(None)),
    st.tuples(st.just("fact"), st.sampled_from(AGENTS), st.sampled_from(PERSONS + AGENTS),
              st.sampled_from(["serves", "serves", "knows"]), st.sampled_from(["org", *PERSONS])),
    st.tuples(st.sampled_from(["invalidate", "archive", "restore"]), st.integers(0, 30)),
    st.tuples(st.sampled_from(["invalidate", "archive", "restore"]), st.integers(0, 30)),
)
"""Sessions, workers, `serves` facts (and others) in org and person scopes, and ends: an index off by one reason
(a session, one of two facts in two scopes) shows only when the other reasons are gone."""


@settings(max_examples=examples(0.5))
@given(history=st.lists(st.tuples(steps, st.booleans()), max_size=60))
def test_the_persons_agents_serve_are_what_a_scan_of_every_session_and_fact_finds(history):
    state = folded(*people(*AGENTS, *PERSONS))
    sessions: list[str] = []
    facts: list[str] = []
    for k, (step, rolled_back) in enumerate(history):
        kind = step[0]
        if kind == "session":
            command: c.Command = c.StartSession(tenant=T, session_id=f"s{k}", agent=step[1], serving=step[2])
        elif kind == "worker":
            if not sessions:
                continue
            command = c.DispatchWorker(tenant=T, session_id=sessions[step[1] % len(sessions)],
                                       worker_session_id=f"w{k}", task="look it up")
        elif kind == "fact":
            command = c.AssertFact(tenant=T, subject=step[1], object=step[2], relation=step[3], scope=step[4],
                                   reason="said so")
        else:
            if not facts:
                continue
            fact_id = facts[step[1] % len(facts)]
            command = (c.InvalidateFact(tenant=T, fact_id=fact_id, reason="ended") if kind == "invalidate"
                       else c.ArchiveFact(tenant=T, fact_id=fact_id, cause="disuse") if kind == "archive"
                       else c.RestoreFact(tenant=T, fact_id=fact_id, cause="back"))
        moment = NOW + timedelta(hours=1, seconds=k)
        if rolled_back:  # a batch that could not be written: the journal undoes it, `served_by` included
            state.begin()
            try:
                for event in decide(state, command, moment):
                    state.apply(event)
            except DomainError:
                pass
            state.rollback()
            continue
        try:
            events = when(state, command, moment)
        except DomainError:
            continue
        for event in events:
            if getattr(event, "fact_id", None) and event.fact_id not in facts:
                facts.append(event.fact_id)
        if kind == "session":
            sessions.append(f"s{k}")
    for size in range(len(AGENTS) + 1):
        for agents in combinations(AGENTS, size):
            assert persons_served(state, agents) == scanned(state, agents), agents
