"""What the viewer stands on stays visible at any fan (docs/perspectives.md, "Own facts"): an agent, or the person
it serves, with N facts of its own (N from 1 to 1,000) always shows its strongest ones clearly, within the
budget; and a large fan still stops the spread: neither a hub's neighbours nor those of a fan-50+ node two hops
away flood the view."""

from __future__ import annotations

import math
from datetime import UTC, datetime

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from domain.activation import DEFAULT_PARAMETERS, Tier
from projections.perspective_fact_ids import id_hash
from projections.perspective_index import TIERS_BY_CODE, Viewpoint
from projections.perspectives import build_perspective
from tests.perspective_support import Org
from tests.properties import examples

CONFIDENCES = (0.5, 0.8, 0.95)
FAN_BY_SHARE = DEFAULT_PARAMETERS.model_copy(update={"own_share": "fan"})


def _organization(n: int, owner: str, strong: dict[int, int], confidence: dict[int, float], hub_fan: int,
                  big_fan: int) -> tuple[Org, list[str], set[str]]:
    """agent:a serving person:p; `owner` (one of them) has n facts `knows person:w<k>` (in p's scope when the
    owner is p), fact k corroborated strong[k] times; a's facts also reach a hub (hub_fan facts to persons) and
    thing:big (big_fan facts to things). Returns the org, the owner's own facts, the facts beyond hub and big."""
    org = Org()
    for ref in ("agent:a", "person:p", "agent:desk", "thing:big"):
        org.entity(ref, hub=ref == "agent:desk")
    scope = "person:p" if owner == "person:p" else "org"
    own = []
    for k in range(n):
        org.entity(f"person:w{k}")
        own.append(org.fact(owner, "knows", f"person:w{k}", scope=scope, confidence=confidence.get(k, 0.8)))
    beyond = set()
    own.append(org.fact("agent:a", "knows", "agent:desk"))
    for j in range(hub_fan):
        org.entity(f"person:q{j}")
        beyond.add(org.fact("agent:desk", "serves", f"person:q{j}"))
    own.append(org.fact("agent:a", "knows", "thing:big"))
    for j in range(big_fan):
        org.entity(f"thing:t{j}")
        beyond.add(org.fact("thing:big", "about", f"thing:t{j}"))
    for k, times in strong.items():
        for _ in range(times):
            org.corroborate(own[k], confidence=confidence.get(k, 0.8))
    org.advance(30)
    return org, own, beyond


@settings(max_examples=examples(0.1), suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(n=st.integers(1, 1000), owner=st.sampled_from(["agent:a", "person:p"]), data=st.data(),
       hub_fan=st.integers(0, 300), big_fan=st.integers(50, 300), budget=st.sampled_from([1_200, 400]))
@example(n=400, owner="agent:a", data=None, hub_fan=300, big_fan=300, budget=1_200)
@example(n=1000, owner="person:p", data=None, hub_fan=0, big_fan=50, budget=400)
def test_an_agent_with_any_fan_sees_its_strongest_own_facts_within_the_budget(n, owner, data, hub_fan, big_fan,
                                                                               budget):
    picks = st.dictionaries(st.integers(0, n - 1), st.integers(1, 3), max_size=min(n, 12))
    strong = data.draw(picks) if data is not None else {k: 1 + k % 3 for k in range(0, n, max(1, n // 10))}
    levels = st.dictionaries(st.integers(0, n - 1), st.sampled_from(CONFIDENCES), max_size=min(n, 12))
    confidence = data.draw(levels) if data is not None else {k: CONFIDENCES[k % 3] for k in range(0, n, 7)}
    org, own, beyond = _organization(n, owner, strong, confidence, hub_fan, big_fan)
    index = org.index()
    view = Viewpoint("agent:a", serving="person:p")
    walked = index.walk(view, DEFAULT_PARAMETERS, org.now.timestamp())
    tiers = {index.fact_ids.at(int(f)): TIERS_BY_CODE[int(t)] for f, t in zip(walked.facts, walked.tiers, strict=True)}

    # each source's own facts by standing (uses x confidence; ties: the id hash, all asserted at one moment):
    # the owner's n, and agent:a's links to the hub and to thing:big
    corroborated = [strong.get(k, 0) for k in range(n)] + [0, 0]

    def by_standing(keys: list[int]) -> list[str]:
        def standing(k: int) -> float:
            return math.log(1 + corroborated[k]) + math.log(confidence.get(k, 0.8) if k < n else 0.8)
        return [own[k] for k in sorted(keys, key=lambda k: (-round(standing(k), 9), id_hash(own[k])))]

    sources = {"agent:a": by_standing(list(range(n + 2)))} if owner == "agent:a" else {
        "person:p": by_standing(list(range(n))), "agent:a": by_standing([n, n + 1])}
    total = n + 2
    clear = {f for f, t in tiers.items() if t in (Tier.FULL, Tier.GIST)}
    assert len(clear) == min(total, 11)
    assert sum(1 for t in tiers.values() if t is Tier.FULL) == min(total, 4)
    for ranked in sources.values():  # what a source shows clearly is its strongest: a prefix of its ranking
        shown = [f in clear for f in ranked]
        assert shown == sorted(shown, reverse=True)
    assert clear <= set(own)
    # nothing beyond the hub is reached; nothing beyond thing:big rises above the threshold
    assert all(tiers.get(f, Tier.FORGOTTEN) is Tier.FORGOTTEN for f in beyond)
    assert not any(index.refs[int(v)] == "agent:desk" for v in walked.via)

    served = build_perspective(index, walked, view, tenant=org.tenant, as_of=None, deeper=False,
                               served_at=datetime.now(UTC), budget_tokens=budget)
    assert served.context_tokens <= budget
    full = [f for f, t in tiers.items() if t is Tier.FULL]  # ranked: strongest first
    served_full = [i.fact_id for i in served.items if i.tier is Tier.FULL]
    assert served_full == full[:len(served_full)] and served_full  # the budget blurs the weakest first
    assert len(served.items) <= 4 + 7 + DEFAULT_PARAMETERS.marker_capacity


def test_the_fan_share_alone_lost_a_large_fan_and_the_rank_share_keeps_a_faded_fact_faded():
    """The rule before (own facts diluted by the source's fan, `own_share = "fan"`) shows nothing of an agent with
    400 facts; the rank share shows its strongest. And B still decides: a person's fact faded by 30 later
    sessions of that person stays forgotten at rank 1, however few facts the person has."""
    org, own, _ = _organization(400, "agent:a", {}, {}, 0, 50)
    index = org.index()
    view = Viewpoint("agent:a", serving="person:p")
    before = index.walk(view, FAN_BY_SHARE, org.now.timestamp())
    assert before.count(Tier.FULL) == before.count(Tier.GIST) == before.count(Tier.MARKER) == 0
    now = index.walk(view, DEFAULT_PARAMETERS, org.now.timestamp())
    assert (now.count(Tier.FULL), now.count(Tier.GIST)) == (4, 7)
    # ranks 1-18 clear tau: the r-th (B = 0, confidence 0.8) has A = ln 0.8 + S + ln(0.5 x 0.5 x e^S / r) > -1.5
    # while r < 18.01: 3 markers about agent:a, the rest of the 18 counted, the other 384 of its 402 forgotten
    # (thing:big's 50 are not even reached: the walk stops at a node that cannot lift a fact over tau)
    assert (now.count(Tier.MARKER), now.count(Tier.COUNT), now.count(Tier.FORGOTTEN)) == (3, 4, 384)

    faded = Org()
    for ref in ("agent:a", "person:li", "thing:jazz"):
        faded.entity(ref)
    faded.session("s0", "agent:a", "person:li")
    jazz = faded.fact("person:li", "likes", "thing:jazz", scope="person:li")
    for k in range(1, 31):
        faded.advance(1)
        faded.session(f"s{k}", "agent:a", "person:li")
    index = faded.index()
    walked = index.walk(Viewpoint("agent:a", serving="person:li"), DEFAULT_PARAMETERS, faded.now.timestamp())
    tiers = {index.fact_ids.at(int(f)): TIERS_BY_CODE[int(t)] for f, t in zip(walked.facts, walked.tiers, strict=True)}
    assert tiers[jazz] is Tier.FORGOTTEN  # B = ln 31^-0.5 = -1.72: A = -1.72 + 1.5 + ln 0.25 = -1.61 at rank 1


def test_stored_parameters_without_own_share_read_back_with_the_fan_share():
    """Evidence stored before the rank share reproduces with the rule it was served with."""
    stored = DEFAULT_PARAMETERS.model_dump(exclude={"own_share"})
    assert type(DEFAULT_PARAMETERS).model_validate(stored).own_share == "fan"
    assert type(DEFAULT_PARAMETERS).model_validate(stored).salience == "tiers"
    before_tiers = DEFAULT_PARAMETERS.model_dump(exclude={"own_share", "salience"})
    assert type(DEFAULT_PARAMETERS).model_validate(before_tiers).model_dump(include={"own_share", "salience"}) == {
        "own_share": "fan", "salience": "calendar"}
    assert type(DEFAULT_PARAMETERS).model_validate(DEFAULT_PARAMETERS.model_dump()).own_share == "rank"
