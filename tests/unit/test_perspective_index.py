"""The perspective index: the walk by hand, scopes, hubs, time, reinforcement, and every way of building it."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from domain.activation import DEFAULT_PARAMETERS as P
from domain.activation import Ranked, Tier, assign_tiers
from projections.perspective_index import (
    TIER_CODES,
    PerspectiveIndex,
    Viewpoint,
    Walked,
    tier_codes,
)
from projections.perspective_walk import path
from tests.perspective_support import Org
from tests.properties import examples

WEEK = 7.0


def _facts(walked: Walked, index: PerspectiveIndex) -> dict[str, tuple[float, int, str]]:
    """fact id -> (activation, hops, tier) of every reached fact."""
    return {index.fact_ids.at(int(f)): (float(a), int(h), TIERS[int(t)])
            for f, a, h, t in zip(walked.facts, walked.activation, walked.hops, walked.tiers, strict=True)}


TIERS = {code: tier.value for tier, code in TIER_CODES.items()}


def test_a_chain_spreads_one_half_then_one_quarter_as_computed_by_hand():
    org = Org()
    for ref in ("agent:a", "thing:x", "thing:y", "thing:z", "thing:w"):
        org.entity(ref)
    near = org.fact("agent:a", "knows", "thing:x", confidence=1.0)
    far = org.fact("thing:x", "knows", "thing:y", confidence=1.0)
    farther = org.fact("thing:y", "knows", "thing:z", confidence=1.0)
    too_far = org.fact("thing:z", "knows", "thing:w", confidence=1.0)
    org.advance(WEEK)  # every fact is exactly one week old: B = ln(1^-0.5) = 0
    index = org.index()
    walked = index.walk(Viewpoint("agent:a"), P, org.now.timestamp())
    seen = _facts(walked, index)
    assert seen[near][:2] == (pytest.approx(1.5 + math.log(0.5)), 1)  # 0.806853
    assert seen[far][:2] == (pytest.approx(1.5 + math.log(0.25)), 2)  # 0.113706
    assert seen[farther][:2] == (pytest.approx(1.5 + math.log(0.125)), 3)  # -0.579442
    assert too_far not in seen  # depth 3
    k = [index.fact_ids.at(int(f)) for f in walked.facts].index(farther)
    refs, crossed = path(index, walked, int(walked.facts[k]), int(walked.via[k]))
    assert refs == ["agent:a", "thing:x", "thing:y", "thing:z"] and crossed == [near, far, farther]
    deeper = index.walk(Viewpoint("agent:a"), P.deeper(), org.now.timestamp())
    assert _facts(deeper, index)[too_far][1] == 4


def test_the_source_weight_is_shared_and_paths_add_up():
    org = Org()
    for ref in ("agent:a", "person:p", "thing:x"):
        org.entity(ref)
    both = org.fact("agent:a", "knows", "thing:x", confidence=1.0)
    other = org.fact("person:p", "knows", "thing:x", confidence=1.0)
    org.advance(WEEK)
    index = org.index()
    seen = _facts(index.walk(Viewpoint("agent:a", focus=("person:p",)), P, org.now.timestamp()), index)
    # two sources of 0.5 each; each fact gets 0.5 * 0.5 from its own source
    assert seen[both][0] == pytest.approx(1.5 + math.log(0.25))
    assert seen[other][0] == pytest.approx(1.5 + math.log(0.25))


def test_invalidated_and_archived_facts_are_never_seen_and_a_restored_one_is_again():
    org = Org()
    for ref in ("agent:a", "thing:x", "thing:y", "thing:z"):
        org.entity(ref)
    gone = org.fact("agent:a", "status", "thing:x")
    archived = org.fact("agent:a", "knows", "thing:y")
    kept = org.fact("agent:a", "knows", "thing:z")
    org.invalidate(gone)
    org.archive(archived)
    index = org.index()
    seen = _facts(index.walk(Viewpoint("agent:a"), P, org.now.timestamp()), index)
    assert set(seen) == {kept}
    org.restore(archived)
    index = org.index()
    assert set(_facts(index.walk(Viewpoint("agent:a"), P, org.now.timestamp()), index)) == {kept, archived}


def test_person_scope_is_visible_only_while_serving_that_person_and_session_scope_only_to_its_agent():
    org = Org()
    for ref in ("agent:a", "agent:b", "person:p", "person:q", "thing:x"):
        org.entity(ref)
    org.session("s1", "agent:a", "person:p")
    about_p = org.fact("thing:x", "about", "agent:a", scope="person:p")
    about_q = org.fact("thing:x", "about", "agent:a", scope="person:q")
    in_session = org.fact("agent:a", "drafted", "thing:x", scope="session:s1")
    shared = org.fact("agent:a", "knows", "thing:x")
    org.fact("agent:b", "knows", "thing:x")
    index = org.index()
    now = org.now.timestamp()

    def seen(viewpoint: Viewpoint) -> set[str]:
        return set(_facts(index.walk(viewpoint, P, now), index))

    assert {about_p, in_session, shared} <= seen(Viewpoint("agent:a", serving="person:p"))
    assert about_q not in seen(Viewpoint("agent:a", serving="person:p"))
    assert not {about_p, in_session} & seen(Viewpoint("agent:a", serving="person:q"))
    assert not {about_p, about_q, in_session} & seen(Viewpoint("agent:a"))
    assert in_session not in seen(Viewpoint("agent:b", serving="person:p"))


def test_a_hub_is_reached_but_never_traversed():
    org = Org()
    for ref in ("agent:a", "person:p", "thing:x"):
        org.entity(ref)
    org.entity("agent:hub", hub=True)
    into_hub = org.fact("agent:a", "uses", "agent:hub")
    beyond = org.fact("agent:hub", "serves", "person:p")
    behind = org.fact("person:p", "owns", "thing:x")
    index = org.index()
    seen = set(_facts(index.walk(Viewpoint("agent:a"), P.deeper(), org.now.timestamp()), index))
    assert into_hub in seen and not {beyond, behind} & seen


def test_a_hub_viewer_serving_one_party_never_reaches_the_others():
    org = Org()
    org.entity("agent:cs", hub=True)
    for ref in ("person:jia", "person:yi", "memory:policy", "ticket:9", "thing:common"):
        org.entity(ref)
    serves_jia = org.fact("agent:cs", "serves", "person:jia")
    serves_yi = org.fact("agent:cs", "serves", "person:yi")
    policy = org.fact("agent:cs", "knows_policy", "memory:policy")
    yi_ticket = org.fact("person:yi", "reported", "ticket:9")  # org scope: only the structure protects it
    jia_knows_yi = org.fact("person:jia", "knows", "person:yi")
    yi_common = org.fact("person:yi", "likes", "thing:common")
    index = org.index()
    seen = set(_facts(index.walk(Viewpoint("agent:cs", serving="person:jia"), P.deeper(), org.now.timestamp()),
                      index))
    assert policy in seen and jia_knows_yi in seen  # Jia's own relation names Yi: reached, a stop point
    assert serves_jia not in seen  # the viewpoint itself (the header says it)
    assert not {serves_yi, yi_ticket, yi_common} & seen


def test_what_an_agent_used_ranks_higher_than_its_twin_and_only_for_that_agent():
    org = Org()
    for ref in ("agent:a", "agent:b", "thing:x", "thing:y"):
        org.entity(ref)
    twin_x = org.fact("agent:a", "knows", "thing:x")
    twin_y = org.fact("agent:a", "knows", "thing:y")
    org.fact("agent:b", "knows", "thing:x")
    org.fact("agent:b", "knows", "thing:y")
    org.advance(3)
    org.recall("agent:a", [twin_y])
    org.advance(1)
    index = org.index()
    now = org.now.timestamp()
    a = _facts(index.walk(Viewpoint("agent:a"), P, now), index)
    assert a[twin_y][0] > a[twin_x][0]
    # an org fact: its assertion weighs 1 at any age; the recall a day ago (1/7 weeks)^-0.5
    assert a[twin_y][0] - a[twin_x][0] == pytest.approx(math.log(1 + (1 / WEEK) ** -0.5))
    b_walk = index.walk(Viewpoint("agent:b"), P, now)
    b = {index.fact_ids.at(int(f)): float(x) for f, x in zip(b_walk.facts, b_walk.base, strict=True)}
    assert len(set(np.round(list(b.values()), 9))) == 1  # agent b's bases are untouched by a's recall


def test_an_as_of_index_holds_what_was_believed_then_with_decay_at_then():
    org = Org()
    for ref in ("agent:a", "thing:x", "thing:y"):
        org.entity(ref)
    early = org.fact("agent:a", "status", "thing:x", confidence=1.0)
    moment = org.advance(WEEK).now
    org.advance(1)
    org.invalidate(early)
    late = org.fact("agent:a", "status", "thing:y")
    then = org.index(until=moment)
    seen = _facts(then.walk(Viewpoint("agent:a"), P, moment.timestamp()), then)
    assert set(seen) == {early}
    assert seen[early][0] == pytest.approx(1.5 + math.log(0.5))  # one week old at T: B = 0
    now_index = org.index()
    assert set(_facts(now_index.walk(Viewpoint("agent:a"), P, org.now.timestamp()), now_index)) == {late}


def _random_org(seed: int, facts: int = 300) -> Org:
    rng = np.random.default_rng(seed)
    org = Org()
    refs = [org.entity(f"person:{k}") for k in range(20)] + [org.entity(f"thing:{k}") for k in range(40)]
    refs.append(org.entity("agent:hub", hub=True))
    org.session("s", "person:0", "person:1")
    ids = []
    for _ in range(facts):
        s, o = rng.choice(len(refs), 2)
        scope = ["org", "person:1", "person:2", "session:s"][int(rng.integers(4))]
        ids.append(org.fact(refs[s], "rel", refs[o], scope=scope, confidence=float(rng.uniform(0.3, 1))))
        org.advance(float(rng.uniform(0, 0.2)))
        if rng.random() < 0.05:
            org.invalidate(ids.pop(int(rng.integers(len(ids)))))
        if rng.random() < 0.1:
            org.recall("person:0", [ids[int(rng.integers(len(ids)))]])
    return org


def _same(left: Walked, right: Walked, li: PerspectiveIndex, ri: PerspectiveIndex) -> None:
    assert [li.fact_ids.at(int(f)) for f in left.facts] == [ri.fact_ids.at(int(f)) for f in right.facts]
    assert np.allclose(left.activation, right.activation)
    assert (left.tiers == right.tiers).all() and (left.hops == right.hops).all()


def test_applying_records_one_by_one_equals_the_bulk_fold_and_the_frames():
    org = _random_org(3)
    folded, incremental = org.index(), org.index(one_by_one=True)
    assert incremental.adjacency.facts == 0 and folded.adjacency.facts == folded.fact_count  # the delta path vs the CSR
    view = Viewpoint("person:0", serving="person:1", focus=("thing:3",))
    now = org.now.timestamp()
    _same(folded.walk(view, P, now), incremental.walk(view, P, now), folded, incremental)

    from projections.perspective_load import from_frames

    n = folded.fact_count
    facts = pl.DataFrame({
        "fact_id": [folded.fact_ids.at(k) for k in range(n)],
        "subject": [folded.refs[s] for s in folded.src.view], "relation": ["rel"] * n,
        "object": [folded.refs[o] for o in folded.dst.view],
        "scope": [folded.scopes.names[s] for s in folded.scope.view],
        "reason": [None] * n, "confidence": folded.conf.view.astype(float),
        "status": [["current", "invalidated", "archived"][s] for s in folded.status.view],
        "asserted_at": folded.asserted.view,
    })
    entities = pl.DataFrame({"ref": folded.refs, "label": folded.labels, "hub": folded.hub.view.tolist()})
    sessions = pl.DataFrame({"session_id": ["s"], "agent": ["person:0"], "serving": ["person:1"]})
    agent = folded.entity_ids["person:0"]
    used_facts, used_at = folded.uses.by_agent[agent]
    uses = pl.DataFrame({"agent": ["person:0"] * used_facts.size,
                         "fact_id": [folded.fact_ids.at(int(f)) for f in used_facts.view], "used_at": used_at.view})
    bulk = from_frames("acme", entities, facts, sessions, None, uses)
    _same(folded.walk(view, P, now), bulk.walk(view, P, now), folded, bulk)


def test_the_delta_tail_and_a_compaction_give_the_same_walk():
    org = _random_org(5, facts=200)
    index = org.index()  # compacted
    extra = org.copy()
    for k in range(30):
        extra.fact("person:0", "rel", f"thing:{k}")
    for position, topic, data in extra.records[len(org.records):]:
        index.apply(position, topic, data)
    assert index.adjacency.facts < index.fact_count
    view = Viewpoint("person:0", serving="person:1")
    now = extra.now.timestamp()
    before = index.walk(view, P, now)
    index.compact()
    _same(before, index.walk(view, P, now), index, index)


@settings(max_examples=examples(0.67))
@given(st.lists(st.tuples(st.floats(-4, 4), st.integers(0, 4)), max_size=60))
def test_the_vectorized_tiers_equal_the_domain_rule(rows):
    rows.sort(key=lambda r: -r[0])
    activations = np.array([r[0] for r in rows])
    via = np.array([r[1] for r in rows], dtype=np.int64)
    codes = tier_codes(P, activations, via)
    tiering = assign_tiers(P, [Ranked(k, a, n) for k, (a, n) in enumerate(rows)])
    expected = [TIER_CODES[tiering.tiers.get(k, Tier.FORGOTTEN)] for k in range(len(rows))]
    assert codes.tolist() == expected


def test_the_index_stays_under_300_bytes_per_fact():
    org = _random_org(7, facts=2000)
    index = org.index()
    facts_bytes = sum(v for k, v in index.nbytes().items() if k != "entities")
    assert facts_bytes / index.fact_count < 300


def test_an_index_walk_tolerates_unknown_focus_and_reports_it():
    org = Org()
    org.entity("agent:a")
    index = org.index()
    walked = index.walk(Viewpoint("agent:a", focus=("thing:nope",)), P, org.now.timestamp())
    assert walked.unknown_refs == ["thing:nope"] and len(walked.facts) == 0


def test_the_viewers_scope_codes_are_the_visibility_rule():
    org = _random_org(11, facts=300)
    org.session("s2", "person:0", None)
    org.fact("person:0", "rel", "thing:1", scope="session:s2")
    index = org.index()
    for agent in ("person:0", "person:3"):
        for serving in (None, "person:1", "person:2"):
            a = index.entity_ids[agent]
            s = index.entity_ids[serving] if serving else -1
            rule = set(np.nonzero(index.scopes.visible(a, s))[0].tolist())
            assert rule == {0} | set(index.scopes.visible_codes(a, s).tolist())
