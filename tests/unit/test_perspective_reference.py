"""The index walk equals a plain-Python reference of the same rules, value for value, over random organizations.

The reference reads the log records directly (no index, no numpy) and follows docs/perspectives.md, docs/design.md
("The perspective's rules") and `domain.activation` step by step: sources share W; a node passes activation on once,
at its first hop, when it is a source or its spread could still lift a fact over tau; crossing a fact multiplies by
the hop factor, the relation's weight and the node's fan share min(1, e^S / f), where f counts the node's current
facts that this viewer may see; a fact's spread sums the ways it is reached at its first hop, and it is about the
end that gave more (the lower entity id on a tie); the viewer's own facts (hop 1) then take, per source, the rank
share min(1, e^S / r) by standing (B + ln confidence + ln weight, to 9 decimals) instead of the fan share; B by
the salience model (tiers: every use the log shows, the assertion, corroborations, corrections, the latest later
mention of an entity, each weighing (1 + age)^-d with its age on the fact's tier clock, and this agent's recalls
in weeks; calendar: the assertion and the recalls in weeks); ranked by activation, then the more recent
assertion, then id hash; tiers by `domain.activation.assign_tiers`.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from domain.activation import DEFAULT_PARAMETERS, ActivationParameters, Ranked, Tier, assign_tiers
from domain.relations import BUILTIN_RELATIONS
from projections.perspective_fact_ids import id_hash
from projections.perspective_index import TIER_CODES, PerspectiveIndex, Viewpoint
from tests.perspective_support import Org
from tests.unit.test_perspective_property import AGENTS, PERSONS, THINGS, worlds


@dataclass
class RefFact:
    fact_id: str
    subject: str
    object: str
    relation: str
    scope: str
    confidence: float
    asserted: float
    current: bool = True
    log_uses: list[tuple[float, str]] = field(default_factory=list)


@dataclass
class RefWorld:
    entities: list[str] = field(default_factory=list)
    hubs: set[str] = field(default_factory=set)
    sessions: dict[str, tuple[str, str | None]] = field(default_factory=dict)
    facts: dict[str, RefFact] = field(default_factory=dict)
    uses: dict[str, list[tuple[str, float]]] = field(default_factory=lambda: defaultdict(list))
    merged: dict[str, str] = field(default_factory=dict)
    episodes: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    """person -> moments of sessions serving them started, and of those sessions' compactions"""
    mentions: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    """entity -> moments a fact naming it was asserted or a worker was about it"""


def _dated(occurred: str | None, recorded: float) -> float:
    return min(_time(occurred), recorded) if occurred else recorded


def _time(value: str) -> float:
    return datetime.fromisoformat(value).timestamp()


def read(org: Org) -> RefWorld:
    world = RefWorld()
    for _position, topic, d in org.records:
        at = _time(d["recorded_at"])
        if topic == "entity.registered":
            if d["ref"] not in world.entities:
                world.entities.append(d["ref"])
            if d.get("hub"):
                world.hubs.add(d["ref"])
        elif topic == "session.started":
            world.sessions[d["session_id"]] = (d["agent"], d.get("serving"))
            if d.get("serving"):
                world.episodes[d["serving"]].append(_dated(d.get("occurred_at"), at))
        elif topic == "session.compacted":
            serving = world.sessions.get(d["session_id"], (None, None))[1]
            if serving:
                world.episodes[serving].append(_dated(d.get("occurred_at"), at))
        elif topic == "worker.dispatched":
            world.sessions.setdefault(d["worker_session_id"], world.sessions.get(d["session_id"], (None, None)))
            for ref in d.get("about", []):
                world.mentions[ref].append(_dated(d.get("occurred_at"), at))
        elif topic == "fact.asserted":
            first = _dated(d["provenance"].get("occurred_at"), at)
            world.facts[d["fact_id"]] = RefFact(d["fact_id"], d["subject"], d["object"], d["relation"], d["scope"],
                                                d["confidence"], first)
            world.mentions[d["subject"]].append(first)
            world.mentions[d["object"]].append(first)
        elif topic == "fact.corroborated":
            world.facts[d["fact_id"]].confidence = d["confidence"]
            world.facts[d["fact_id"]].log_uses.append((_dated(d["provenance"].get("occurred_at"), at), "corroborated"))
        elif topic == "fact.corrected":
            world.facts[d["fact_id"]].log_uses.append((_dated(d["provenance"].get("occurred_at"), at), "corrected"))
        elif topic in ("fact.invalidated", "fact.archived"):
            world.facts[d["fact_id"]].current = False
        elif topic == "fact.restored":
            world.facts[d["fact_id"]].current = True
        elif topic == "facts.recalled":
            for fact_id in d["fact_ids"]:
                world.uses[d["agent"]].append((fact_id, at))
    return world


def reference(world: RefWorld, view: Viewpoint, p: ActivationParameters, now: float
              ) -> dict[str, tuple[float, int, str, str]]:
    """fact id -> (activation, hops, about, tier) of every fact the walk reaches."""
    order = {ref: k for k, ref in enumerate(world.entities)}
    agent, serving = view.agent, view.serving

    def visible(f: RefFact) -> bool:
        if f.scope == "org":
            return True
        if f.scope.startswith("person:"):
            return f.scope == serving
        session_agent, session_serving = world.sessions.get(f.scope.removeprefix("session:"), (None, None))
        return session_agent == agent and session_serving in (None, serving)

    def weight(relation: str) -> float:
        known = BUILTIN_RELATIONS.get(relation)
        return known.weight if known is not None else 1.0

    usable = [f for f in world.facts.values() if f.current and visible(f)]
    touching: dict[str, list[RefFact]] = defaultdict(list)
    for f in usable:
        touching[f.subject].append(f)
        if f.object != f.subject:
            touching[f.object].append(f)

    def other(f: RefFact, end: str) -> str:
        return f.object if f.subject == end else f.subject

    sources = [r for r in (agent, serving, *view.focus) if r and r in order]
    if not sources:
        return {}
    hub_sources = {s for s in sources if s in world.hubs}
    blocked = set()
    for f in world.facts.values():  # a hub viewer's other parties: from any of its facts
        for end in (f.subject, f.object):
            if end in hub_sources:
                o = other(f, end)
                if o.split(":")[0] in p.party_kinds and o != serving:
                    blocked.add(o)
    uses = world.uses.get(agent, [])
    most = max((sum(1 for u, _ in uses if u == fid) for fid in {u for u, _ in uses}), default=0)
    if p.salience == "calendar":
        best_base = math.log((p.minimum_age_seconds / p.time_unit_seconds) ** -p.decay * (1 + most))
    else:  # a log use weighs at most 1 (the assertion, a mention, the most log uses of one fact), a recall at
        fresh = (p.minimum_age_seconds / p.time_unit_seconds) ** -p.decay  # most a fresh one
        logged = 2 + sum(max((sum(1 for _, k in f.log_uses if k == kind) for f in world.facts.values()), default=0)
                         for kind in ("corroborated", "corrected"))
        best_base = math.log(logged + fresh * most)
    floor = max(p.minimum_spread, math.exp(p.threshold - p.associative_strength - best_base)) if p.cut_off \
        else p.minimum_spread
    max_weight = max([1.0] + [r.weight for r in BUILTIN_RELATIONS.values()])
    exp_s = math.exp(p.associative_strength)

    act: dict[str, float] = defaultdict(float)
    for s in sources:
        act[s] += p.source_weight / len(sources)
    visited = set(sources) | world.hubs | blocked
    frontier = sorted(act, key=order.__getitem__)
    seen: set[str] = set()
    reached: dict[str, tuple[float, int, str, float]] = {}  # fact -> (spread, hop, about, its best part)
    for hop in range(1, p.depth + 1):
        out = {u: act[u] * min(1.0, exp_s / max(len(touching[u]), 1)) * p.hop_factor for u in frontier}
        if hop > 1:
            frontier = [u for u in frontier if out[u] * max_weight >= floor]
        parts: dict[str, list[tuple[float, str]]] = defaultdict(list)
        onward: dict[str, float] = defaultdict(float)
        for u in frontier:
            for f in touching[u]:
                v = other(f, u)
                if f.fact_id in seen:
                    continue
                if hop == 1 and {f.subject, f.object} == {agent, serving}:
                    continue  # the viewpoint itself
                if hop == 1 and u in hub_sources and v in blocked:
                    continue
                x = out[u] * weight(f.relation)
                parts[f.fact_id].append((x, u))
                if v not in visited:
                    onward[v] += x
        for fact_id, xs in parts.items():
            best = max(xs, key=lambda item: (item[0], -order[item[1]]))
            reached[fact_id] = (sum(x for x, _ in xs), hop, best[1], best[0])
        seen |= set(parts)
        visited |= set(onward)
        frontier = sorted(onward, key=order.__getitem__)
        act = onward
        if not frontier:
            break

    bases = {fact_id: reference_base(world, world.facts[fact_id], agent, serving, p, now) for fact_id in reached}
    if p.own_share == "rank":  # the viewer's own facts: ranked per source, the r-th gets min(1, e^S / r)
        source_act: dict[str, float] = defaultdict(float)
        for s in sources:
            source_act[s] += p.source_weight / len(sources)
        own: dict[str, list[str]] = defaultdict(list)
        for fact_id, (_spread, hop, _about, _best) in reached.items():
            f = world.facts[fact_id]
            for end in ({f.subject, f.object} & set(source_act) if hop == 1 else ()):
                own[end].append(fact_id)

        def standing(fact_id: str) -> float:
            f = world.facts[fact_id]
            value = bases[fact_id] + math.log(f.confidence) + math.log(weight(f.relation))
            return round(value * 1e9) / 1e9 if math.isfinite(value) else value  # 9 decimals, as np.round

        spreads: dict[str, float] = defaultdict(float)
        for s, fact_ids in own.items():
            ranked = sorted(fact_ids, key=lambda fid: (-standing(fid), -world.facts[fid].asserted, id_hash(fid)))
            for rank, fact_id in enumerate(ranked, 1):
                share = min(1.0, exp_s / rank)
                spreads[fact_id] += source_act[s] * p.hop_factor * weight(world.facts[fact_id].relation) * share
        for fact_id, x in spreads.items():
            reached[fact_id] = (x, *reached[fact_id][1:])

    rows = []
    for fact_id, (spread, hop, about, _best) in reached.items():
        f = world.facts[fact_id]
        base = bases[fact_id]
        a = base + math.log(f.confidence) + p.associative_strength + math.log(spread) if spread > 0 else -math.inf
        rows.append((fact_id, a, hop, about))
    rows.sort(key=lambda r: (-r[1], -world.facts[r[0]].asserted, id_hash(r[0])))
    abouts = {ref: k for k, ref in enumerate(world.entities)}
    tiering = assign_tiers(p, [Ranked(k, a, abouts[about]) for k, (_f, a, _h, about) in enumerate(rows)])
    return {fact_id: (a, hop, about, tiering.tiers.get(k, Tier.FORGOTTEN).value)
            for k, (fact_id, a, hop, about) in enumerate(rows)}


def reference_base(world: RefWorld, f: RefFact, agent: str, serving: str | None, p: ActivationParameters,
                   now: float) -> float:
    """B of one fact for one viewer at `now`, written out per tier (docs/perspectives.md, "Forgetting by tier")."""
    recalls = [t for u, t in world.uses.get(agent, []) if u == f.fact_id]
    if p.salience == "calendar":
        total = sum((max(now - t, p.minimum_age_seconds) / p.time_unit_seconds) ** -p.decay
                    for t in [f.asserted, *recalls] if now - t >= 0)
        return math.log(total) if total > 0 else -math.inf

    def weight(t: float, recall: bool) -> float:
        if t > now:
            return 0.0  # not happened yet, as of now
        if recall:  # this agent's recall: ACT-R's calendar term, the testing effect
            return (max(now - t, p.minimum_age_seconds) / p.time_unit_seconds) ** -p.decay
        if f.scope == "org":  # semantic: the log's uses never age
            return 1.0
        if f.scope.startswith("person:"):  # episodic: in the served person's own episodes since the use
            since = sum(1 for e in world.episodes.get(serving or "", []) if t < e <= now)
            return (1 + since) ** -p.decay
        return (1 + (now - t) / p.session_time_unit_seconds) ** -p.decay  # session: in days

    ignored = set(p.mention_ignored_kinds)
    mentioned = max((m for end in (f.subject, f.object)
                     if end.split(":")[0] not in ignored and end not in world.hubs
                     for m in world.mentions.get(end, [])), default=-math.inf)
    total = weight(f.asserted, False) + sum(weight(t, False) for t, _ in f.log_uses)
    total += sum(weight(t, True) for t in recalls)
    if mentioned > f.asserted:
        total += weight(mentioned, False)
    return math.log(total) if total > 0 else -math.inf


def walked(org: Org, view: Viewpoint, p: ActivationParameters, incremental: bool = False,
           index: PerspectiveIndex | None = None, at: datetime | None = None
           ) -> dict[str, tuple[float, int, str, str]]:
    if index is None:
        index = org.index(one_by_one=True) if incremental else org.index()
    w = index.walk(view, p, (at or org.now).timestamp())
    tiers = {code: tier.value for tier, code in TIER_CODES.items()}
    return {index.fact_ids.at(int(f)): (float(a), int(h), index.refs[int(v)], tiers[int(t)])
            for f, a, h, v, t in zip(w.facts, w.activation, w.hops, w.via, w.tiers, strict=True)}


def _equal(got: dict, expected: dict) -> None:
    assert set(got) == set(expected)
    for fact_id, (a, hop, about, tier) in expected.items():
        g = got[fact_id]
        assert g[0] == pytest.approx(a, rel=1e-6, abs=1e-6), fact_id  # confidences are float32 in the index
        assert g[1:] == (hop, about, tier), fact_id


def _draw_view(data: st.DataObject) -> tuple[Viewpoint, ActivationParameters]:
    agent = data.draw(st.sampled_from([f"agent:{k}" for k in range(AGENTS)]))
    serving = data.draw(st.none() | st.sampled_from([f"person:{k}" for k in range(PERSONS)]))
    focus = tuple(data.draw(st.lists(st.sampled_from([f"thing:{k}" for k in range(THINGS)] + ["agent:0"]),
                                     max_size=2, unique=True)))
    p = data.draw(st.sampled_from([DEFAULT_PARAMETERS, DEFAULT_PARAMETERS.deeper(),
                                   DEFAULT_PARAMETERS.model_copy(update={"cut_off": False}),
                                   DEFAULT_PARAMETERS.model_copy(update={"salience": "calendar"})]))
    return Viewpoint(agent, serving, focus), p


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(world=worlds(), data=st.data())
def test_the_index_walk_equals_the_reference_value_for_value(world, data: st.DataObject):
    view, p = _draw_view(data)
    expected = reference(read(world.org), view, p, world.org.now.timestamp())
    _equal(walked(world.org, view, p), expected)
    _equal(walked(world.org, view, p, incremental=True), expected)  # the delta tail, never compacted


def _split(world, cut: int) -> PerspectiveIndex:
    """The index of the first `cut` records compacted, the rest applied after: a CSR and a delta tail."""
    index = PerspectiveIndex(world.org.tenant)
    for position, topic, d in world.org.records[:cut]:
        index.apply(position, topic, d)
    index.compact()
    for position, topic, d in world.org.records[cut:]:
        index.apply(position, topic, d)
    return index


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(world=worlds(), data=st.data())
def test_a_walk_over_a_csr_and_a_delta_tail_equals_the_reference_and_leaves_its_scratch_clean(
        world, data: st.DataObject):
    """With part of the facts in the CSR and the rest in the delta tail, a walk equals the reference, a second
    walk on the used scratch gives the same facts, and the scratch is left as found (zero; the stamps aside)."""
    view, p = _draw_view(data)
    cut = data.draw(st.integers(0, len(world.org.records)))
    now = world.org.now.timestamp()
    index = _split(world, cut)
    first = index.walk(view, p, now)
    _equal(walked(world.org, view, p, index=index), reference(read(world.org), view, p, now))
    again = index.walk(view, p, now)
    assert again.facts.tolist() == first.facts.tolist()
    assert again.activation.tolist() == first.activation.tolist()
    for scratch in index.walk_scratch.zeroed():
        assert not scratch.any()


def test_the_fan_counts_only_what_the_viewer_may_see():
    """A node's fan share is computed from the facts this viewer may see: how many facts about a thing exist in
    another person's scope changes nothing in what this viewer's perspective says (not even the numbers)."""

    def org_with(hidden: int) -> tuple[Org, str]:
        org = Org()
        for ref in ("agent:a", "person:p", "person:q", "thing:x", "thing:y"):
            org.entity(ref)
        org.fact("agent:a", "knows", "thing:x", confidence=1.0)
        far = org.fact("thing:x", "knows", "thing:y", confidence=1.0)
        for k in range(hidden):
            org.entity(f"thing:h{k}")
            org.fact("thing:x", "knows", f"thing:h{k}", scope="person:q")  # q's, never visible serving p
        org.advance(7)
        return org, far

    plain, far = org_with(0)
    crowded, _ = org_with(40)
    view = Viewpoint("agent:a", serving="person:p")
    assert walked(crowded, view, DEFAULT_PARAMETERS) == walked(plain, view, DEFAULT_PARAMETERS)
    # two sources of 0.5; thing:x has 2 facts this viewer sees (fan 2 <= e^1.5): 0.5 * 0.5 * 0.5 reach thing:y
    assert walked(crowded, view, DEFAULT_PARAMETERS)[far][0] == pytest.approx(1.5 + math.log(0.125))
    # serving q, the 40 are visible and dilute thing:x's share: 42 facts
    exhaustive = DEFAULT_PARAMETERS.model_copy(update={"cut_off": False})  # (x = 0.013 is below the cut-off)
    seen_by_q = walked(crowded, Viewpoint("agent:a", serving="person:q"), exhaustive)
    assert seen_by_q[far][0] == pytest.approx(1.5 + math.log(0.125 * math.exp(1.5) / 42))


def test_equal_activations_rank_by_id_hash():
    """Many facts with the same activation (one bulk import: same node, relation, confidence and moment) are
    ranked by their id hash, as the reference ranks them (the walk sorts twice only when activations tie)."""
    org = Org()
    for ref in ("agent:a", "thing:x", *(f"thing:h{k}" for k in range(80))):
        org.entity(ref)
    org.fact("agent:a", "knows", "thing:x", confidence=1.0)
    tied = [org.fact("thing:x", "about", f"thing:h{k}", confidence=0.9) for k in range(80)]
    org.advance(3)
    view = Viewpoint("agent:a")  # thing:x one hop out (a source's own facts would be ranked apart by the rank share)
    p = DEFAULT_PARAMETERS.model_copy(update={"cut_off": False})
    index = org.index()
    w = index.walk(view, p, org.now.timestamp())
    ranked = [index.fact_ids.at(int(f)) for f in w.facts]
    assert [f for f in ranked if f in tied] == sorted(tied, key=id_hash)
    assert len({float(a) for f, a in zip(ranked, w.activation, strict=True) if f in tied}) == 1
    expected = reference(read(org), view, p, org.now.timestamp())
    assert ranked == list(expected)  # the reference's order: activation, then id hash


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(world=worlds(), data=st.data())
def test_a_view_at_t_computed_later_equals_the_view_computed_at_t(world, data: st.DataObject):
    """As-of: the index that followed the log up to T (record by record), walked at T, and the index folded later
    from the whole log up to T, walked at T, give the same view, and the reference over the records up to T does
    too: nothing recorded after T (a recall, an episode, a mention, a corroboration) reaches back."""
    view, p = _draw_view(data)
    records = world.org.records
    cut = data.draw(st.integers(1, len(records)))
    at = datetime.fromisoformat(records[cut - 1][2]["recorded_at"])
    then = Org(world.org.tenant)
    then.records = [r for r in records if datetime.fromisoformat(r[2]["recorded_at"]) <= at]
    then.now = at
    served_then = walked(then, view, p, incremental=True)
    later = walked(world.org, view, p, index=world.org.index(until=at), at=at)
    assert later == served_then
    _equal(served_then, reference(read(then), view, p, at.timestamp()))


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(world=worlds(), data=st.data())
def test_an_index_walked_while_it_follows_the_log_ranks_exactly_as_a_fresh_fold(world, data: st.DataObject):
    """Walks between records (the follower's life: uses merged into the sorted copies as they come) leave the
    index giving exactly the numbers of an index folded afresh from the same records (sums in the same order)."""
    view, p = _draw_view(data)
    now = world.org.now.timestamp()
    following = PerspectiveIndex(world.org.tenant)
    for position, topic, d in world.org.records:
        following.apply(position, topic, d)
        if topic in ("facts.recalled", "fact.corroborated", "fact.corrected") or data.draw(st.integers(0, 9)) == 0:
            following.walk(view, p, now)
    fresh = world.org.index()
    a, b = following.walk(view, p, now), fresh.walk(view, p, now)
    assert [following.fact_ids.at(int(f)) for f in a.facts] == [fresh.fact_ids.at(int(f)) for f in b.facts]
    assert a.activation.tolist() == b.activation.tolist()
    assert a.tiers.tolist() == b.tiers.tolist()
