"""The ranking's last step, by hand: what a result shows decides whether it takes one of the k places."""

from __future__ import annotations

from domain.search import DEFAULT_SEARCH_PARAMETERS, Candidate, ItemKind, SearchTier, diversify


def _turn(doc: int, score: float, message: str, window: tuple[str, ...]) -> Candidate:
    return Candidate(doc=doc, tier=SearchTier.EPISODIC, lexical=0.0, semantic=0.0, activation=0.5, recency=0.0,
                     kind=ItemKind.TURN, provenance=frozenset((message,)), shown=frozenset(window), score=score)


def _fact(doc: int, score: float, *messages: str) -> Candidate:
    return Candidate(doc=doc, tier=SearchTier.EPISODIC, lexical=0.0, semantic=0.0, activation=0.5, recency=0.0,
                     provenance=frozenset(messages), score=score)


def _unrelated(a: Candidate, b: Candidate) -> float:
    return 0.0


def _kept(ranked: list[Candidate], k: int, **parameters: object) -> list[tuple[ItemKind, int]]:
    p = DEFAULT_SEARCH_PARAMETERS.model_copy(update=parameters)
    return [c.key for c in diversify(ranked, k, _unrelated, p)]


RANKED = [
    _turn(1, 0.9, "m2", ("m1", "m3")),
    _fact(7, 0.8, "m2"),  # came from the turn above: it shows nothing new
    _fact(8, 0.75, "m3", "m9"),  # m9 is not shown yet
    _turn(5, 0.7, "m6", ("m5", "m7")),
]


def test_a_fact_whose_messages_are_all_shown_waits_for_the_results_that_show_something_new():
    assert _kept(RANKED, 3) == [(ItemKind.TURN, 1), (ItemKind.FACT, 8), (ItemKind.TURN, 5)]


def test_a_fact_that_waited_fills_the_places_left_when_nothing_new_remains():
    assert _kept(RANKED, 4) == [(ItemKind.TURN, 1), (ItemKind.FACT, 8), (ItemKind.TURN, 5), (ItemKind.FACT, 7)]


def test_without_shown_facts_last_a_fact_is_kept_beside_the_turn_it_came_from():
    assert _kept(RANKED, 3, shown_facts_last=False) == [(ItemKind.TURN, 1), (ItemKind.FACT, 7), (ItemKind.FACT, 8)]


def test_a_turn_a_kept_fact_came_from_is_still_skipped():
    ranked = [_fact(7, 0.9, "m2"), _turn(1, 0.8, "m2", ("m1", "m3")), _turn(5, 0.7, "m6", ())]
    assert _kept(ranked, 2) == [(ItemKind.FACT, 7), (ItemKind.TURN, 5)]
