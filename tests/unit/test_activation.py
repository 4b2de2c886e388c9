"""The activation mathematics against values computed by hand."""

from __future__ import annotations

import math

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from domain.activation import (
    DEFAULT_PARAMETERS as P,
)
from domain.activation import (
    SECONDS_PER_WEEK,
    Ranked,
    Tier,
    activation,
    assign_tiers,
    base_level,
    demote,
    estimate_tokens,
    fan_share,
    is_wide,
    source_share,
    spread_across,
)

WEEK = SECONDS_PER_WEEK


def test_the_defaults_are_the_design_tables():
    assert (P.source_weight, P.hop_factor, P.depth, P.decay, P.threshold) == (1.0, 0.5, 3, 0.5, -1.5)
    assert (P.full_capacity, P.gist_capacity) == (4, 7)
    deeper = P.deeper()
    assert (deeper.depth, deeper.threshold) == (4, -2.5)


def test_the_source_weight_is_split_evenly():
    assert source_share(P, 4) == 0.25
    with pytest.raises(ValueError):
        source_share(P, 0)


def test_a_node_passes_everything_up_to_e_to_the_s_facts_then_one_over_fan():
    assert fan_share(P, 1) == 1.0
    assert fan_share(P, 4) == 1.0  # e^1.5 = 4.48
    assert fan_share(P, 5) == pytest.approx(4.481689 / 5, abs=1e-6)
    assert fan_share(P, 50) == pytest.approx(0.0896338, abs=1e-7)  # a fan-50 node still passes a little


def test_spread_halves_per_hop_and_dilutes_with_fan_and_weight():
    assert spread_across(P, 0.5, fan=2) == 0.25
    assert spread_across(P, 1 / 3, fan=5, weight=0.5) == pytest.approx(1 / 3 * 0.5 * 0.5 * 0.8963378, abs=1e-7)


def test_base_level_is_the_log_of_summed_power_law_decay_in_weeks():
    now = 100 * WEEK
    assert base_level(P, now, [now - WEEK]) == pytest.approx(0.0)
    assert base_level(P, now, [now - WEEK, now - 4 * WEEK]) == pytest.approx(math.log(1.5))  # 1 + 4^-0.5
    # a use one minute ago counts as one hour old: ln((1/168)^-0.5)
    assert base_level(P, now, [now - 60]) == pytest.approx(0.5 * math.log(168))
    # a use after `now` does not exist yet; no use at all is -inf
    assert base_level(P, now, [now - WEEK, now + WEEK]) == pytest.approx(0.0)
    assert base_level(P, now, []) == -math.inf


def test_every_use_raises_the_base_level():
    now = 10 * WEEK
    uses = [now - 9 * WEEK]
    before = base_level(P, now, uses)
    after = base_level(P, now, uses + [now - 2 * WEEK])
    assert after == pytest.approx(math.log(9 ** -0.5 + 2 ** -0.5))
    assert after > before


def test_activation_adds_base_confidence_strength_and_log_spread():
    assert activation(P, 0.0, 1.0, math.exp(-1.5)) == pytest.approx(0.0)
    expected = math.log(1.5) + math.log(0.8) + 1.5 + math.log(0.125)
    assert expected == pytest.approx(0.4054651 - 0.2231436 + 1.5 - 2.0794415, abs=1e-6)  # -0.397120
    assert activation(P, math.log(1.5), 0.8, 0.125) == pytest.approx(expected)
    assert activation(P, 0.0, 0.0, 0.5) == -math.inf
    assert activation(P, -math.inf, 1.0, 0.5) == -math.inf


def test_chinese_counts_a_token_per_character_and_latin_one_per_four():
    assert estimate_tokens("给李总再出一版报价") == 9
    assert estimate_tokens("hello world") == 3  # 11 characters
    assert estimate_tokens("合同 v3") == 3  # 2 wide + ceil(3 / 4)
    assert estimate_tokens("李总，好") == 4  # full-width comma is wide
    assert estimate_tokens("") == 0


@given(st.text(alphabet=st.one_of(st.characters(), st.sampled_from("给李总，合同ｖ한글カナ—→·")), max_size=80))
@example("0\u2427 \u231a")  # wide by east-asian width, far below U+2E80 (a clean-clone CI run found the first)
def test_the_token_estimate_counts_every_wide_character_as_the_character_by_character_rule_does(text):
    wide = sum(1 for char in text if is_wide(char))
    assert estimate_tokens(text) == wide + math.ceil((len(text) - wide) / 4)


def _ranked(activations: list[float], neighbours: list[int]) -> list[Ranked]:
    return [Ranked(key=k, activation=a, neighbour=n) for k, (a, n) in enumerate(zip(activations, neighbours,
                                                                                    strict=True))]


def test_tiers_are_four_full_seven_gist_then_markers_per_neighbour_then_counts_then_forgotten():
    activations = [5.0 - 0.1 * k for k in range(20)] + [-1.5, -3.0]
    neighbours = [0] * 11 + [1, 1, 1, 1, 1, 2, 2, 2, 2, 2] + [3]
    tiering = assign_tiers(P, _ranked(activations, neighbours))
    tiers = [tiering.tiers.get(k) for k in range(22)]
    assert tiers[:4] == [Tier.FULL] * 4
    assert tiers[4:11] == [Tier.GIST] * 7
    assert tiers[11:14] == [Tier.MARKER] * 3 and tiers[14:16] == [Tier.COUNT] * 2
    assert tiers[16:19] == [Tier.MARKER] * 3 and tiers[19] == Tier.COUNT
    assert tiering.counts == {1: [14, 15], 2: [19]}
    assert tiers[20:] == [None, None] and tiering.forgotten == 2  # A <= tau is forgotten, -1.5 included


def test_nothing_below_the_threshold_is_full_even_with_room():
    tiering = assign_tiers(P, _ranked([-1.0, -2.0], [0, 0]))
    assert tiering.tiers == {0: Tier.FULL} and tiering.forgotten == 1


def test_demotion_goes_one_tier_less_clear():
    assert [demote(t) for t in (Tier.FULL, Tier.GIST, Tier.MARKER, Tier.COUNT)] == [
        Tier.GIST, Tier.MARKER, Tier.COUNT, Tier.COUNT]
