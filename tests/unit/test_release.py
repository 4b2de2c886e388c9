"""A dropped structure is emptied container by container (domain/release.py): every dict, set and list handed over
ends empty, whatever its size against the step; anything else handed over is left as it is."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from domain.release import STEP, release_in_background, take_apart
from tests.properties import examples
from tests.race_support import wait_until


@settings(max_examples=examples(0.5))
@given(st.integers(min_value=0, max_value=3 * STEP + 7))
def test_every_container_handed_over_ends_empty_and_nothing_else_changes(n: int) -> None:
    facts = {f"f{i}": {"reason": i} for i in range(n)}
    seen, turns = {f"e{i}" for i in range(n)}, [(i, f"m{i}") for i in range(n)]
    kept_entry = facts.get("f0")
    shared = ("an analyzer", {"words": 1})
    take_apart([facts, seen, turns, shared, 42])
    assert facts == {} and seen == set() and turns == []
    assert shared == ("an analyzer", {"words": 1})  # (a tuple is not a container this takes apart)
    assert n == 0 or kept_entry == {"reason": 0}  # (a value read before stays whole for whoever kept it)


def test_in_background_the_caller_goes_on_and_the_containers_end_empty() -> None:
    postings = [list(range(10)) for _ in range(5 * STEP)]
    vocabulary = {f"w{i}": i for i in range(5 * STEP)}
    release_in_background([postings, vocabulary])
    wait_until(lambda: not postings and not vocabulary, 30, "the released containers are emptied")
