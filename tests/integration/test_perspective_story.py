"""The seed's story (seed 000, 现象): what Wang's agent, the sales agent and the customer-service agent see."""

from __future__ import annotations

from datetime import timedelta

import pytest

from demo.perspective_story import (
    CONTRACT,
    JIA,
    LI,
    MOMENT_1,
    MOMENT_2,
    QUOTE,
    WANG,
    YI,
    PerspectiveStory,
    serve_story,
)
from domain.activation import Tier
from domain.perspective import Perspective


@pytest.fixture(scope="module")
def story(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    it = serve_story(tmp_path_factory.mktemp("story"))
    yield it
    it.close()


def _triples(p: Perspective, *tiers: Tier) -> set[tuple[str, str, str]]:
    return {(i.subject, i.relation, i.object) for i in p.items if not tiers or i.tier in tiers}


def _refs(p: Perspective) -> set[str]:
    refs = {ref for i in p.items for ref in (i.subject, i.object, *i.path)}
    return refs | {g.about for g in p.count_groups}


def test_wangs_agent_asked_about_a_new_quote_for_li_has_the_four_relations_at_full_clarity(story):
    wang = story.served[MOMENT_2[0]]["wang"]
    full = _triples(wang, Tier.FULL)
    assert (QUOTE, "failed_because", "memory:quote-failed-fx") in full  # the failed quote ...
    failed = next(i for i in wang.items if i.relation == "failed_because")
    assert "exchange rate" in failed.object_label and "CNY" in (failed.reason or "")  # ... because of the rate
    assert (CONTRACT, "waiting_on", "ticket:legal/118") in full  # contract v3 waiting on legal
    assert (LI, "prefers", "memory:li-monthly-settlement") in full  # monthly settlement
    assert any(LI in (s, o) for s, _r, o in full)  # Li
    assert "Li prefers monthly settlement" in wang.context and "exchange rate" in wang.context


def test_wangs_agent_sees_wangs_private_facts_while_serving_wang(story):
    wang = story.served[MOMENT_2[0]]["wang"]
    assert {i.scope for i in wang.items} >= {"org", "person:wang"}


def test_the_sales_agent_sees_contract_v3_the_ticket_and_legal_but_nothing_private_to_wang(story):
    for moment in (MOMENT_1[0], MOMENT_2[0]):
        sales = story.served[moment]["sales"]
        refs = _refs(sales)
        assert {CONTRACT, "ticket:legal/118", "team:legal"} <= refs
        assert all(i.scope == "org" for i in sales.items)
        assert (WANG, "discussed_privately_with", LI) not in _triples(sales)
        assert "memory:li-monthly-settlement" not in refs and "personal discount" not in sales.context


def test_the_customer_service_agent_serving_jia_never_sees_yi(story):
    for moment in (MOMENT_1[0], MOMENT_2[0]):
        cs = story.served[moment]["cs-jia"]
        assert YI not in _refs(cs) and "ticket:cs/9" not in _refs(cs)
        assert all(i.scope in ("org", f"person:{JIA.split(':')[1]}") for i in cs.items)
        assert "乙" not in cs.context and "Yi" not in cs.context
        assert cs.forgotten + sum(g.count for g in cs.count_groups) + len(cs.items) == sum(cs.counts.values())
    now = story.served[MOMENT_2[0]]["cs-jia"]
    assert ("person:jia", "reported", "ticket:cs/7") in _triples(now)  # Jia's own ticket, once it exists
    assert ("agent:cs", "knows_policy", "memory:refund-policy") in _triples(now)  # role knowledge


def test_two_moments_differ_as_the_story_moves(story: PerspectiveStory):
    then = story.served[MOMENT_1[0]]["cs-jia"]
    assert ("person:jia", "reported", "ticket:cs/7") not in _triples(then)  # reported on day 10
    wang_then = story.served[MOMENT_1[0]]["wang"]
    # new on day 9 and shown clearly; an org fact's standing does not hang on its age (docs/perspectives.md,
    # "Forgetting by tier"), so being new alone does not put it above the relations Wang's agent already uses
    assert (CONTRACT, "stage", "stage:legal-review") in _triples(wang_then, Tier.GIST)
    assert (CONTRACT, "stage", "stage:drafting") not in _triples(wang_then)  # superseded: gone


def test_an_as_of_perspective_matches_what_was_served_at_that_moment(story: PerspectiveStory):
    from demo.story import TENANT

    served = story.served[MOMENT_1[0]]["sales"]
    # a millisecond before: the recalls recorded at the moment itself (by serving) come after what was served
    again = story.perspectives.perspective_for(TENANT, "agent:sales", focus=[CONTRACT],
                                               as_of=MOMENT_1[1] - timedelta(milliseconds=1))
    assert [(i.fact_id, i.tier) for i in again.items] == [(i.fact_id, i.tier) for i in served.items]
    assert [i.activation for i in again.items] == pytest.approx([i.activation for i in served.items], abs=1e-5)
    reproduced = story.perspectives.reproduce(served)
    assert reproduced.context == served.context
