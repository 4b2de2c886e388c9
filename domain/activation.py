"""The activation mathematics of a perspective: pure functions and the one parameters object that tunes them.

How a fact's activation is computed (every constant is a field of `ActivationParameters`):

    A = B + ln(confidence) + S + ln(x)

- `x`, the **spread**, is on the multiplicative scale of personalized PageRank. The viewer's position (the
  agent, the person it serves, the things in focus) are the sources; they share W = 1 evenly. Crossing a fact
  from node u multiplies by `hop_factor` (0.5), by the relation's weight, and by u's **fan share**
  `min(1, e^S / f)`, where f is u's number of current facts. A fact's x is the sum over the ways it is reached.
- The viewer's **own facts** (one hop from a source: what the agent, the person it serves and the focus stand
  on) are not diluted by their source's fan: each source's own facts are ranked by their standing
  (B + ln(confidence) + ln(weight)), and the r-th receives the **rank share** `min(1, e^S / r)` instead of
  `min(1, e^S / f)` (`own_share = "rank"`). A source with 1,000 facts shows its strongest as clearly as a source
  with 4; its 30th is as faint as every fact of a fan-30 node. What the source passes on across those facts keeps
  the fan share, so a large fan still stops the spread beyond it (docs/perspectives.md, "Own facts").
- `S + ln(x)` puts the spread on ACT-R's log-odds scale. ACT-R's associative strength S_ji = S - ln(f) is exactly
  `S + ln(1/f)`: the log of a PPR share, shifted by S. Reading it this way keeps ACT-R's first e^S = 4.5
  neighbours at full strength, never clamps to zero (a node with fan 50 still passes 9%), and lets the hop
  factor and the source split multiply in like PPR's damping.
- `B`, the **base level**, is ACT-R's `ln sum_j w_j` over the fact's uses, each dated where it happened
  (`salience = "tiers"`, the default; docs/perspectives.md, "Forgetting by tier"):
  - its standing: the uses the log shows for every agent (its assertion, each corroboration and correction, the
    latest later mention of one of its entities), each weighing w = (1 + age)^-d with its age on the clock of
    the fact's memory tier. Semantic (`org`): no clock (w = 1): an org fact leaves the view by being superseded,
    invalidated or out-ranked, never by the calendar. Episodic (`person:X`): X's own episodes (sessions serving
    X started, and their compactions) since the use: a person silent for months comes back to the same
    standing. Session (`session:S`): days (the seed's time-bound session memory; the session's end archives it).
  - this agent's recalls, on ACT-R's calendar clock ((t - t_j)^-d, weeks, at least an hour): the testing
    effect, a boost that fades in weeks and never takes a fact below its standing.
  `salience = "calendar"` is the model before tiers: the assertion is a calendar use like the recalls.
- `ln(confidence)`: an uncertain fact is proportionally less likely to be needed.

Clarity tiers, from the ranked activations: the top 4 in full, the next 7 as gist, then markers while A > tau
(at most `markers_per_neighbour` per neighbour), then a count per neighbour, and what has A <= tau is forgotten
(only counted). "Thinking deeper" is depth + 1 and tau - 1.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

SECONDS_PER_DAY = 86_400.0
SECONDS_PER_WEEK = 7 * SECONDS_PER_DAY


class ActivationParameters(BaseModel):
    """Every default of the perspective, with its source (docs/design.md, "The perspective's rules"). Tune on real
    data."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    source_weight: float = Field(default=1.0, gt=0)
    """W: the attention the viewer's position spreads, split evenly among the sources (agent, person served,
    focus). Source: ACT-R spreading activation (Anderson & Lebiere 1998), W = 1."""

    hop_factor: float = Field(default=0.5, gt=0, le=1)
    """Multiplier per fact crossed: one hop 0.5, two 0.25, three 0.125. Source: HippoRAG's personalized
    PageRank damping 0.5 (Gutierrez et al. 2024)."""

    depth: int = Field(default=3, ge=1, le=8)
    """Facts farther than this many hops from every source are not reached. Source: the seed ("rarely more than
    three"); HippoRAG's damping makes a fourth hop weigh 1/16."""

    deeper_extra_depth: int = Field(default=1, ge=0)
    """"Think deeper": one more hop. Source: the seed (顺着一条线索多走一步)."""

    deeper_threshold_drop: float = Field(default=1.0, ge=0)
    """"Think deeper": the threshold falls by this much. Source: the seed (把门槛放低); one log-odds unit."""

    associative_strength: float = Field(default=1.5, ge=0)
    """S: ACT-R's maximum associative strength (fitted values 1.5-1.6). It gives the fan share
    min(1, e^S / f) and the offset S in A = B + ln(c) + S + ln(x). Source: ACT-R fan effect (Anderson 1974)."""

    own_share: Literal["rank", "fan"] = "rank"
    """How a source's own facts (one hop from the viewer's position) share its attention in their own activation.
    "rank": ranked by standing (B + ln(confidence) + ln(relation weight)), the r-th strongest gets
    min(1, e^S / r): the fan effect as interference among a cue's associates, the strongest of them first, so
    a source's strongest facts stay clear at any fan while the rest fade as they would at a node of fan r, and
    B still decides (a faded fact falls below tau at rank 1). Source: ACT-R's S - ln(f) read per associate
    (S - ln(r)); the seed (从自己的位置出发: what the viewer stands on is seen first). "fan": min(1, e^S / f)
    like every other node (a source with many facts then shows none of them). The spread
    passed on across those facts keeps the fan share either way: a large fan still stops the walk beyond it."""

    salience: Literal["tiers", "calendar"] = "tiers"
    """How B ages a fact's uses. "tiers": on the clock of the fact's memory tier (the module docstring; seed 001:
    "time-based expiry is the wrong default", each tier has its own eviction rule; seed 004: episodic records
    lose weight when not recalled for long). "calendar": every use ages in `time_unit_seconds` of wall-clock
    time, at least `minimum_age_seconds` (ACT-R's base level as first built; parameters stored without this
    field were served with it, and read back as "calendar")."""

    decay: float = Field(default=0.5, gt=0)
    """d in w_j = (1 + age_j)^-d (standing) and in (t - t_j)^-d (recalls, calendar). Source: ACT-R base-level
    learning, power-law forgetting (Wixted & Ebbesen 1991); d = 0.5 is ACT-R's default. The tiers' (1 + age)
    form is Wickelgren's shifted power law (Wixted & Ebbesen 1991 fit it too): a use of age 0 weighs 1, so a
    fact with one use has B = 0, never more, and its first episode or unit of age costs the most."""

    session_time_unit_seconds: float = Field(default=SECONDS_PER_DAY, gt=0)
    """Tiers: the unit in which a session fact's uses age (days). Source: seed 001, session memory has a
    time-bound TTL; here the session's end archives its facts, and this only lets the facts of a session left
    open for days fade first (a day-old use weighs 0.71, a week-old one 0.35)."""

    mention_ignored_kinds: tuple[str, ...] = ("person", "agent")
    """Tiers: a later mention of a fact's entity counts as a use of the fact (seed 001: what the user no longer
    mentions loses weight), except for entities of these kinds and hubs: a person or an agent is named by every
    fact about them, so a new fact about Li says nothing about Li's older facts. Our choice."""

    time_unit_seconds: float = Field(default=SECONDS_PER_WEEK, gt=0)
    """The calendar clock of recalls (and, in the calendar model, of every use): weeks. ACT-R fits seconds on
    laboratory lists lasting minutes; an organization's relations live for months. A recall a day old adds 2.6
    to the sum, a week old 1, a month old 0.48: the one calendar term of the tiers, and why: the testing effect
    (Roediger & Karpicke 2006) is a boost over days, and a served perspective records a use of its own clear
    facts every hour it is served, so a boost that never faded would freeze a view on whatever it showed first.
    (Calendar model: a never-used fact one hop from one of four sources fades below tau after about four weeks.)"""

    minimum_age_seconds: float = Field(default=3_600.0, gt=0)
    """Calendar uses younger than this count as this old, so a use made a moment ago gives a finite B (one
    hour: a fresh recall is worth at most 168^0.5 = 13 uses of standing)."""

    threshold: float = Field(default=-1.5)
    """tau: markers while A > tau; forgotten (only counted) when A <= tau. Source: ACT-R retrieval threshold
    (fitted models -1.5 to -3)."""

    full_capacity: int = Field(default=4, ge=0)
    """How many facts are shown in full. Source: Cowan's 4 +/- 1 chunks of working memory (Cowan 2001)."""

    gist_capacity: int = Field(default=7, ge=0)
    """How many more are shown as a one-line gist. Source: Miller's 7 +/- 2 (Miller 1956)."""

    markers_per_neighbour: int = Field(default=3, ge=0)
    """Above tau, at most this many markers (name + relation) per neighbour they were reached through; the rest
    become "N more about X". Our choice (to be tuned): a neighbour keeps a few names, not a list."""

    marker_capacity: int = Field(default=40, ge=0)
    """At most this many markers in all, before the token budget cuts further. Our choice, to bound the walk's
    output; the budget is the real limit."""

    cut_off: bool = True
    """Stop the walk at nodes whose facts could not rise above tau even with the agent's freshest possible base
    level (spread < exp(tau - S - B_max)): what lies beyond them would be forgotten. Each path through such a
    node is below tau on its own; only a fact that several of them reach together could have summed above it,
    and the forgotten count leaves out what lies beyond. Our choice (speed: a few hundred facts ranked instead of
    tens of thousands). Off: every fact within the depth is ranked (exhaustive)."""

    minimum_spread: float = Field(default=0.0, ge=0)
    """An absolute floor under the walk's own cut-off. The walk already stops at nodes whose facts could not
    rise above tau even with the agent's freshest possible base level: spread < exp(tau - S - B_max). Our choice
    (none beyond that bound); raise it to trade recall of faint facts for speed."""

    party_kinds: tuple[str, ...] = ("person",)
    """Entity kinds that are parties a hub serves. A hub that is itself the viewer never reaches parties other
    than the one it is serving (privacy by structure, docs/perspectives.md)."""

    @model_validator(mode="before")
    @classmethod
    def _stored_before_tiers(cls, data: Any) -> Any:
        """Parameters stored before `salience` existed (in evidence) were served with the calendar model, and before
        `own_share` existed with the fan share for every node: read them back as such, so a stored perspective
        still reproduces with the rules it was served with."""
        if isinstance(data, dict) and "minimum_age_seconds" in data:
            if "salience" not in data:
                data = {**data, "salience": "calendar"}
            if "own_share" not in data:  # served before own facts were ranked: the fan share for all
                data = {**data, "own_share": "fan"}
        return data

    def deeper(self) -> ActivationParameters:
        """The parameters for "think deeper": one more hop and a lower threshold."""
        return self.model_copy(update={
            "depth": self.depth + self.deeper_extra_depth,
            "threshold": self.threshold - self.deeper_threshold_drop,
        })


DEFAULT_PARAMETERS = ActivationParameters()


# ---------------------------------------------------------------------------------------------- the formulas


def source_share(parameters: ActivationParameters, sources: int) -> float:
    """W_j: each source's share of W (ACT-R: W split evenly among the sources of activation)."""
    if sources <= 0:
        raise ValueError("a perspective needs at least one source")
    return parameters.source_weight / sources


def fan_share(parameters: ActivationParameters, fan: int) -> float:
    """The share of a node's activation that each of its facts receives: min(1, e^S / f); never zero."""
    if fan <= 0:
        return 1.0
    return min(1.0, math.exp(parameters.associative_strength) / fan)


def rank_share(parameters: ActivationParameters, rank: int) -> float:
    """The share of a source's attention its `rank`-th strongest own fact receives (`own_share = "rank"`):
    min(1, e^S / rank), rank from 1; never below the fan share min(1, e^S / f), since rank <= f."""
    return min(1.0, math.exp(parameters.associative_strength) / max(rank, 1))


def spread_across(parameters: ActivationParameters, arriving: float, fan: int, weight: float = 1.0) -> float:
    """What crosses one fact from a node holding `arriving`: arriving x hop factor x relation weight x fan share."""
    return arriving * parameters.hop_factor * weight * fan_share(parameters, fan)


def base_level(parameters: ActivationParameters, now_seconds: float, use_seconds: Iterable[float]) -> float:
    """The calendar model's B = ln sum_j (t - t_j)^-d over the uses made at or before `now` (ages in
    `time_unit_seconds`, at least `minimum_age_seconds`).

    Uses after `now` do not exist yet (an as-of perspective) and are ignored; with no use at all B is -inf.
    """
    floor = parameters.minimum_age_seconds
    unit = parameters.time_unit_seconds
    total = 0.0
    for used in use_seconds:
        age = now_seconds - used
        if age < 0:
            continue
        total += (max(age, floor) / unit) ** -parameters.decay
    return math.log(total) if total > 0 else -math.inf


def use_weight(parameters: ActivationParameters, age: float) -> float:
    """w = (1 + age)^-d: what one use of a fact adds to the tiers' base level at `age` (in its tier's units:
    0 for the semantic tier's log uses, episodes, weeks or days); a use not made yet (age < 0) adds nothing."""
    return (1.0 + age) ** -parameters.decay if age >= 0 else 0.0


def activation(parameters: ActivationParameters, base: float, confidence: float, spread: float) -> float:
    """A = B + ln(confidence) + S + ln(spread); -inf when any factor is zero."""
    if spread <= 0 or confidence <= 0 or base == -math.inf:
        return -math.inf
    return base + math.log(confidence) + parameters.associative_strength + math.log(spread)


# ---------------------------------------------------------------------------------------------- tokens


def is_wide(char: str) -> bool:
    """CJK ideographs, kana, hangul and full-width forms: each is about one token in current tokenizers."""
    code = ord(char)
    return (
        0x2E80 <= code <= 0x9FFF  # CJK radicals, punctuation, kana, CJK ideographs
        or 0xAC00 <= code <= 0xD7AF  # Hangul syllables
        or 0xF900 <= code <= 0xFAFF  # CJK compatibility ideographs
        or 0xFF00 <= code <= 0xFFEF  # full-width forms
        or 0x20000 <= code <= 0x2FA1F  # CJK extensions
        or unicodedata.east_asian_width(char) in ("W", "F")
    )


def estimate_tokens(text: str) -> int:
    """Estimated tokens: one per CJK/kana/hangul character, one per 4 other characters (rounded up).

    BPE tokenizers (cl100k, o200k) spend about 4 characters of English per token but about one token per Chinese
    character; counting every character as a quarter would undercount Chinese four-fold.
    """
    wide = 0 if text.isascii() else sum(1 for char in _MAYBE_WIDE.findall(text) if is_wide(char))
    return wide + math.ceil((len(text) - wide) / 4)


_MAYBE_WIDE = re.compile("[^\x00-\x7f]")
"""The characters `is_wide` may say yes to (every non-ASCII one: east-asian width is W or F for some symbols far
below U+2E80, e.g. U+231A), found by the regex engine, not a Python loop over every character (a served
perspective estimates each of its lines, ~20 per request)."""


# ---------------------------------------------------------------------------------------------- tiers


class Tier(StrEnum):
    FULL = "full"
    GIST = "gist"
    MARKER = "marker"
    COUNT = "count"
    FORGOTTEN = "forgotten"


@dataclass(frozen=True, slots=True)
class Ranked:
    """One reached fact, ranked: what the tiering needs to know about it."""

    key: int
    """The caller's handle for the fact (an index)."""
    activation: float
    neighbour: int
    """The node it was reached through (the "about X" of a count)."""


@dataclass(slots=True)
class Tiering:
    tiers: dict[int, Tier] = field(default_factory=dict)
    counts: dict[int, list[int]] = field(default_factory=dict)
    """neighbour -> the keys counted as "N more about neighbour"."""
    forgotten: int = 0


def assign_tiers(parameters: ActivationParameters, ranked: Sequence[Ranked]) -> Tiering:
    """Cut ranked facts (highest activation first) into the five tiers, before any token budget.

    Full and gist are pure capacity (the strongest 4, the next 7, provided A > tau); markers follow while A > tau,
    at most `markers_per_neighbour` per neighbour and `marker_capacity` in all; the rest above tau is counted per
    neighbour; A <= tau is forgotten.
    """
    result = Tiering()
    per_neighbour: dict[int, int] = {}
    markers = 0
    for position, item in enumerate(ranked):
        if not item.activation > parameters.threshold:
            result.forgotten += 1
            continue
        if position < parameters.full_capacity:
            result.tiers[item.key] = Tier.FULL
        elif position < parameters.full_capacity + parameters.gist_capacity:
            result.tiers[item.key] = Tier.GIST
        elif (markers < parameters.marker_capacity
              and per_neighbour.get(item.neighbour, 0) < parameters.markers_per_neighbour):
            result.tiers[item.key] = Tier.MARKER
            per_neighbour[item.neighbour] = per_neighbour.get(item.neighbour, 0) + 1
            markers += 1
        else:
            result.tiers[item.key] = Tier.COUNT
            result.counts.setdefault(item.neighbour, []).append(item.key)
    return result


def demote(tier: Tier) -> Tier:
    """The next less clear tier: what an item becomes when the budget has no room for it at its own."""
    order = [Tier.FULL, Tier.GIST, Tier.MARKER, Tier.COUNT]
    return order[order.index(tier) + 1] if tier in order[:-1] else Tier.COUNT
