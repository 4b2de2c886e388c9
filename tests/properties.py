"""Hypothesis profiles: `dev` (the default: quick, for a developer's loop) and `ci` (`make test` selects it with
HYPOTHESIS_PROFILE=ci: the thorough run). A property states its cost with `examples(share)`, never a count."""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("dev", max_examples=50, deadline=None)
settings.register_profile("ci", max_examples=300, deadline=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


def examples(share: float) -> int:
    """How many examples a property runs: `share` of the profile's budget (below 1 for a property whose every
    example builds a store, replays a log or serves requests), at least 5."""
    return max(5, round(settings.default.max_examples * share))
