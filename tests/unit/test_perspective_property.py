"""Privacy and time, over random organizations (hypothesis): whatever the structure, no perspective ever holds a
fact whose scope excludes the viewer, a fact that is not current, or a fact reached only through a hub."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from domain.activation import DEFAULT_PARAMETERS
from projections.perspective_index import Viewpoint
from tests.perspective_support import Org
from tests.properties import examples

PERSONS, AGENTS, THINGS = 5, 4, 8


@dataclass
class Fact:
    fact_id: str
    subject: str
    object: str
    scope: str
    current: bool = True


@dataclass
class World:
    org: Org
    facts: dict[str, Fact]
    hubs: set[str]
    sessions: dict[str, tuple[str, str | None]]


@st.composite
def worlds(draw: st.DrawFn) -> World:
    org = Org()
    persons = [org.entity(f"person:{k}") for k in range(PERSONS)]
    hubs = set(draw(st.sets(st.sampled_from([f"agent:{k}" for k in range(AGENTS)]), max_size=2)))
    agents = [org.entity(f"agent:{k}", hub=f"agent:{k}" in hubs) for k in range(AGENTS)]
    things = [org.entity(f"thing:{k}") for k in range(THINGS)]
    refs = persons + agents + things
    sessions: dict[str, tuple[str, str | None]] = {}
    for k in range(draw(st.integers(0, 3))):
        agent = draw(st.sampled_from(agents))
        serving = draw(st.none() | st.sampled_from(persons))
        org.session(f"s{k}", agent, serving)
        sessions[f"s{k}"] = (agent, serving)
    scopes = ["org"] + [f"person:{k}" for k in range(PERSONS)] + [f"session:{s}" for s in sessions]
    facts: dict[str, Fact] = {}
    # what the tiers' clocks read: sources' own dates (up to 400 days back), corroborations and corrections,
    # later sessions and compactions (episodes), workers about things (mentions)
    past = st.none() | st.floats(0, 400).map(lambda days: org.now - timedelta(days=days))
    for _ in range(draw(st.integers(1, 45))):
        subject, obj = draw(st.sampled_from(refs)), draw(st.sampled_from(refs))
        scope = draw(st.sampled_from(scopes))
        fact_id = org.fact(subject, draw(st.sampled_from(["knows", "about", "serves"])), obj, scope=scope,
                           confidence=draw(st.floats(0.05, 1.0)), occurred=draw(past))
        facts[fact_id] = Fact(fact_id, subject, obj, scope)
        org.advance(draw(st.floats(0, 3)))
        roll = draw(st.integers(0, 15))
        if roll == 0:
            victim = draw(st.sampled_from(sorted(facts)))
            if facts[victim].current:
                (org.invalidate if draw(st.booleans()) else org.archive)(victim)
                facts[victim].current = False
        elif roll == 1:
            org.recall(draw(st.sampled_from(agents)), [draw(st.sampled_from(sorted(facts)))])
        elif roll == 2:
            org.corroborate(draw(st.sampled_from(sorted(facts))), occurred=draw(past))
        elif roll == 3:
            org.correct(draw(st.sampled_from(sorted(facts))))
        elif roll in (4, 5):
            later = f"e{len(org.records)}"  # an episode of a person; its scope is never used by a fact
            org.session(later, draw(st.sampled_from(agents)), draw(st.sampled_from(persons)), occurred=draw(past))
        elif roll == 6 and sessions:
            org.compact(draw(st.sampled_from(sorted(sessions))))
        elif roll == 7 and sessions:
            org.dispatch(draw(st.sampled_from(sorted(sessions))), f"w{len(org.records)}",
                         about=(draw(st.sampled_from(things)),))
    return World(org, facts, hubs, sessions)


def visible(world: World, fact: Fact, agent: str, serving: str | None) -> bool:
    if fact.scope == "org":
        return True
    if fact.scope.startswith("person:"):
        return fact.scope == serving
    session_agent, session_serving = world.sessions[fact.scope.removeprefix("session:")]
    return session_agent == agent and session_serving in (None, serving)


def reachable(world: World, view: Viewpoint, depth: int) -> set[str]:
    """The reference walk: breadth first over current visible facts; hubs are reached but never expanded; a hub
    viewer never reaches, nor expands, the other persons it has facts with."""
    sources = {view.agent, *(view.serving or "",), *view.focus} - {""}
    usable = [f for f in world.facts.values() if f.current and visible(world, f, view.agent, view.serving)]
    blocked: set[str] = set()
    for hub in sources & world.hubs:
        for f in usable:
            for end, other in ((f.subject, f.object), (f.object, f.subject)):
                if end == hub and other.startswith("person:") and other != view.serving:
                    blocked.add(other)
    reached: set[str] = set()
    distance = {s: 0 for s in sources}
    frontier = set(sources)
    for hop in range(1, depth + 1):
        following: set[str] = set()
        for f in usable:
            for end, other in ((f.subject, f.object), (f.object, f.subject)):
                if end not in frontier:
                    continue
                if end in world.hubs and end not in sources:
                    continue
                if end in sources and end in world.hubs and other in blocked:
                    continue
                reached.add(f.fact_id)
                if other not in distance and other not in world.hubs and other not in blocked:
                    following.add(other)
        for node in following:
            distance[node] = hop
        frontier = following
    return reached


@settings(max_examples=examples(1.5), suppress_health_check=[HealthCheck.too_slow])
@given(world=worlds(), data=st.data())
def test_no_perspective_holds_an_excluded_a_stale_or_a_hub_hidden_fact(world: World, data: st.DataObject):
    agent = data.draw(st.sampled_from([f"agent:{k}" for k in range(AGENTS)]))
    serving = data.draw(st.none() | st.sampled_from([f"person:{k}" for k in range(PERSONS)]))
    focus = tuple(data.draw(st.lists(st.sampled_from([f"thing:{k}" for k in range(THINGS)] + ["agent:0"]),
                                     max_size=2)))
    deeper = data.draw(st.booleans())
    parameters = DEFAULT_PARAMETERS.deeper() if deeper else DEFAULT_PARAMETERS
    view = Viewpoint(agent, serving, focus)
    index = world.org.index()
    walked = index.walk(view, parameters, world.org.now.timestamp())
    seen = [index.fact_ids.at(int(f)) for f in walked.facts]  # every tier, the forgotten included
    assert len(seen) == len(set(seen))
    allowed = reachable(world, view, parameters.depth)
    for fact_id in seen:
        fact = world.facts[fact_id]
        assert fact.current, f"{fact} is not current"
        assert visible(world, fact, agent, serving), f"{fact} is outside {agent} serving {serving}"
        assert fact_id in allowed, f"{fact} is reached only through a hub (or beyond the depth)"
    # a hub viewer serving one person never sees the other persons it serves, nor what lies behind them
    if agent in world.hubs:
        for fact_id in seen:
            fact = world.facts[fact_id]
            for end, other in ((fact.subject, fact.object), (fact.object, fact.subject)):
                if end == agent and other.startswith("person:"):
                    assert other == serving
