"""Salience by memory tier over a perspective index: the base levels the walk ranks with, the bound its cut-off
uses, and the sentence that says why a fact is as faded as it is.

B = ln sum_j w_j over a fact's uses, w = (1 + age)^-d, each use's age on the clock of the fact's tier
(`domain.activation`, salience "tiers"):

- the fact's standing, from the uses the log shows for every agent: the assertion (at its first use:
  `occurred_at` clamped), each corroboration and correction (`Uses`' log keys), the latest later mention of one
  of its entities (`PerspectiveIndex.mentioned`, entities of `mention_ignored_kinds` and hubs aside); each ages
  on its tier's clock: org facts' not at all (weight 1), person facts' in the served person's episodes after it
  (`Episodes`), session facts' in `session_time_unit_seconds`;
- this agent's recalls, on ACT-R's calendar clock (the testing effect: a boost that fades in weeks).

Only what happened at or before `now` counts, so a view computed at T from an index folded up to T is the view
served at T (as-of).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from domain.activation import ActivationParameters
from projections.perspective_scopes import SCOPE_ORG, SCOPE_PERSON, SCOPE_SESSION
from projections.perspective_uses import CORRECTIONS, CORROBORATIONS, LOG_KEYS

if TYPE_CHECKING:
    from projections.perspective_index import PerspectiveIndex

_NONE = np.zeros(0, dtype=np.float64)


@dataclass(frozen=True)
class Clock:
    """How old a use is on each tier's clock, and what it weighs, at `now` for one viewer."""

    p: ActivationParameters
    now: float
    episodes: np.ndarray
    """The served person's episode moments, sorted (the clock of their episodic facts)."""

    def episodes_since(self, times: np.ndarray) -> np.ndarray:
        """How many of the person's episodes happened after each moment, up to `now`."""
        until = np.searchsorted(self.episodes, self.now, "right")
        return np.maximum(until - np.searchsorted(self.episodes, times, "right"), 0)

    def weights(self, kind: np.ndarray, times: np.ndarray) -> np.ndarray:
        """A log use's w = (1 + age)^-d on its tier's clock (`kind`: its fact's scope kind), 0 after `now`."""
        p = self.p
        seconds = self.now - times
        age = np.where(kind == SCOPE_ORG, 0.0, np.maximum(seconds, 0.0) / p.session_time_unit_seconds)
        person = kind == SCOPE_PERSON
        if person.any():
            age[person] = self.episodes_since(times[person])
        weight = (1.0 + age) ** -p.decay
        weight[seconds < 0] = 0.0
        return weight

    def recall_weights(self, times: np.ndarray) -> np.ndarray:
        """A recall's (t - t_j)^-d, ACT-R's calendar term (ages in `time_unit_seconds`, at least
        `minimum_age_seconds`), 0 after `now`."""
        p = self.p
        seconds = self.now - times
        weight = (np.maximum(seconds, p.minimum_age_seconds) / p.time_unit_seconds) ** -p.decay
        weight[seconds < 0] = 0.0
        return weight


def clock_for(index: PerspectiveIndex, serving: int, now: float, p: ActivationParameters) -> Clock:
    return Clock(p, now, index.episodes.sorted(serving) if serving >= 0 else _NONE)


def latest_mentions(index: PerspectiveIndex, facts: np.ndarray, p: ActivationParameters) -> np.ndarray:
    """Per fact, the latest moment one of its entities was mentioned (-inf: never), entities of the ignored
    kinds and hubs aside."""
    ignored = np.zeros(len(index.kind_names) + 1, dtype=bool)  # by kind code
    for name in p.mention_ignored_kinds:
        if name in index.kind_codes:
            ignored[index.kind_codes[name]] = True
    latest = np.full(len(facts), -math.inf)
    for ends in (index.src.view[facts], index.dst.view[facts]):
        skip = index.hub.view[ends] | ignored[index.kind.view[ends]]
        latest = np.maximum(latest, np.where(skip, -math.inf, index.mentioned.view[ends]))
    return latest


def gathered(uses: tuple[np.ndarray, np.ndarray] | None, facts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(position in `facts`, moment) of every use of these facts in uses sorted by (fact, moment)."""
    if uses is None or not len(uses[0]):
        return np.zeros(0, dtype=np.int64), _NONE
    used_facts, used_at = uses
    lo = np.searchsorted(used_facts, facts, "left")
    found = used_facts[np.minimum(lo, len(used_facts) - 1)] == facts
    if not found.any():  # usually: none of these facts was used
        return np.zeros(0, dtype=np.int64), _NONE
    which = np.flatnonzero(found)
    lo = lo[which]
    lengths = np.searchsorted(used_facts, facts[which], "right") - lo
    n = int(lengths.sum())
    owner = np.repeat(which, lengths)
    offsets = np.repeat(lo - (np.cumsum(lengths) - lengths), lengths) + np.arange(n)
    return owner, used_at[offsets]


def tier_base_levels(index: PerspectiveIndex, agent: int, serving: int, facts: np.ndarray, now: float,
                     p: ActivationParameters, asserted: np.ndarray) -> np.ndarray:
    """B per fact for one viewer at `now`, each use aged on its fact's tier clock."""
    clock = clock_for(index, serving, now, p)
    kind = index.scopes.kind.view[index.scope.view[facts]]
    total = clock.weights(kind, asserted)
    mentioned = latest_mentions(index, facts, p)
    later = mentioned > asserted
    if later.any():
        total[later] += clock.weights(kind[later], mentioned[later])
    for key in (CORROBORATIONS, CORRECTIONS, agent):
        owner, times = gathered(index.uses.sorted(key), facts)
        if len(owner):
            weights = clock.recall_weights(times) if key == agent else clock.weights(kind[owner], times)
            total += np.bincount(owner, weights=weights, minlength=len(facts))
    with np.errstate(divide="ignore"):
        return np.log(total)


def tier_best_base(index: PerspectiveIndex, agent: int, p: ActivationParameters) -> float:
    """The highest B any fact can have for this agent: a log use weighs at most 1 (the assertion, a mention, the
    most corroborations and corrections of one fact), a recall at most a fresh one's (ACT-R's bound, as many as the
    agent's most uses of one fact)."""
    fresh = (p.minimum_age_seconds / p.time_unit_seconds) ** -p.decay
    return math.log(2 + sum(index.uses.most(key) for key in LOG_KEYS) + fresh * index.uses.most(agent))


# ---------------------------------------------------------------------------------------------- saying why


USE_KINDS = ("asserted", "corroborated", "corrected", "recalled", "its entity mentioned")


def salience_notes(index: PerspectiveIndex, facts: np.ndarray, *, agent: int, serving: int, now: float,
                   p: ActivationParameters, ranks: np.ndarray, activations: np.ndarray, forgotten: np.ndarray
                   ) -> list[str]:
    """Per fact, what it last got and when, on its tier's clock, and where that leaves it: "episodic (Li's): last
    used 14 sessions of Li's ago (recalled 2026-05-02) · 3 uses · below the threshold (A -1.82 <= tau -1.5)".
    `ranks`: how many facts out-rank it (0: not said), `forgotten`: whether A <= tau. One pass for all facts."""
    n = len(facts)
    asserted = index.asserted.view[facts]
    last = np.where(asserted <= now, asserted, -math.inf)
    what = np.zeros(n, dtype=np.int64)
    count = (asserted <= now).astype(np.int64)
    for code, key in ((1, CORROBORATIONS), (2, CORRECTIONS), (3, agent)):
        owner, times = gathered(index.uses.sorted(key), facts)
        keep = times <= now
        owner, times = owner[keep], times[keep]
        if len(owner):
            count += np.bincount(owner, minlength=n)
            latest = np.full(n, -math.inf)
            np.maximum.at(latest, owner, times)
            later = latest > last
            last[later], what[later] = latest[later], code
    mentioned = latest_mentions(index, facts, p)
    counted = (mentioned > asserted) & (mentioned <= now)
    count += counted
    later = counted & (mentioned > last)
    last[later], what[later] = mentioned[later], 4
    kind = index.scopes.kind.view[index.scope.view[facts]]
    since = np.zeros(n, dtype=np.int64)
    if serving >= 0 and np.isfinite(last).any():
        since = clock_for(index, serving, now, p).episodes_since(np.where(np.isfinite(last), last, now))
    label = index.labels[serving] if serving >= 0 else ""
    finite = np.isfinite(last)
    dates = np.where(finite, last, 0).astype("datetime64[s]").astype("datetime64[D]").astype(str).tolist()
    notes = []
    for k in range(n):
        used = bool(finite[k])
        moment = float(last[k])
        when = f"{USE_KINDS[int(what[k])]} {dates[k]}" if used else "never"
        uses = f"{int(count[k])} use" + ("" if count[k] == 1 else "s")
        if p.salience == "calendar":
            weeks = (now - moment) / p.time_unit_seconds if used else math.nan
            parts = [f"calendar: last used {weeks:.1f} weeks ago ({when})", uses]
        elif kind[k] == SCOPE_PERSON and serving >= 0:
            e = int(since[k])
            parts = [f"episodic ({label}'s): last used {e} session{'' if e == 1 else 's'} of {label}'s ago ({when})",
                     uses]
        elif kind[k] == SCOPE_SESSION:
            ago = (now - moment) / 86_400.0 if used else math.nan
            parts = [f"session memory: last used {ago:.1f} days ago ({when}); ends with its session", uses]
        else:
            said = f"{dates[k]} ({USE_KINDS[int(what[k])]})" if used else "never"
            parts = [f"semantic (org): does not fade with time; last used {said}", uses]
            if ranks[k] > 0:
                parts.append(f"out-ranked by {int(ranks[k])}")
        if forgotten[k]:
            parts.append(f"below the threshold (A {float(activations[k]):.2f} <= tau {p.threshold:g})")
        notes.append(" · ".join(parts))
    return notes


def salience_note(index: PerspectiveIndex, fact: int, *, agent: int, serving: int, now: float,
                  p: ActivationParameters, rank: int, activation: float, forgotten: bool) -> str:
    """`salience_notes` for one fact."""
    return salience_notes(index, np.array([fact], dtype=np.int64), agent=agent, serving=serving, now=now, p=p,
                          ranks=np.array([rank]), activations=np.array([activation]),
                          forgotten=np.array([forgotten]))[0]
