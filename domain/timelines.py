"""Valid-time timelines of functional relations: placing a value never lets two values hold at one instant.

A functional relation has one value per (subject, relation, scope) at every valid instant. The values a slot
ever held (its facts that are not archived) form its *timeline*: half-open intervals `[valid_from, valid_to)`
that never overlap (`None` is open: since ever, until further notice). Placing a value `[a, b)` into it works
as XTDB's `put` does:

- without an end, the value holds until the next value of the timeline starts (or, if none starts later,
  until further notice);
- the newest statement wins over the range it states: a neighbour reaching into `[a, b)` is cut back to
  where the new value starts, one starting inside it moves its start to where the new value ends, one inside
  it entirely is left with an empty interval (it held at no instant), and one spanning it is split: it keeps
  its part before, and its part after continues as a new fact of the same value;
- the value that starts last is the slot's current one (if it was not ended); the others are invalidated,
  each `superseded_by` the value that follows it.

`place` computes the timeline after a placement; the rules turn the differences into events. Pure: no I/O.
See docs/timelines.md for the rules with their defaults and examples.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from domain.facts import FactState, FactStatus

NEW = "<new>"
"""The id the placed value carries in a plan before the rules number it."""
REMAINDER = "<remainder>"
"""The id of the part after the placed value of a neighbour it splits."""


def starts_before(a: datetime | None, b: datetime | None) -> bool:
    """Start `a` is before start `b` (None: since ever)."""
    if a is None:
        return b is not None
    return b is not None and a < b


def ends_after(a: datetime | None, b: datetime | None) -> bool:
    """End `a` is after end `b` (None: until further notice)."""
    if a is None:
        return b is not None
    return b is not None and a > b


def is_empty(start: datetime | None, end: datetime | None) -> bool:
    """An interval that holds at no instant (`valid_to <= valid_from`), left by a value a newer one covered."""
    return start is not None and end is not None and end <= start


def overlaps(s1: datetime | None, e1: datetime | None, s2: datetime | None, e2: datetime | None) -> bool:
    if is_empty(s1, e1) or is_empty(s2, e2):
        return False
    return (s1 is None or e2 is None or s1 < e2) and (s2 is None or e1 is None or s2 < e1)


def holds_at(start: datetime | None, end: datetime | None, instant: datetime) -> bool:
    return (start is None or start <= instant) and (end is None or instant < end)


@dataclass
class Entry:
    """One value of a timeline, before or after a placement."""

    fact_id: str
    start: datetime | None
    end: datetime | None
    current: bool
    superseded_by: str | None = None
    split_from: str | None = None
    """For the remainder: the fact it continues."""


@dataclass
class Plan:
    """A timeline after placing one value: every entry whose interval, status or successor changed."""

    placed: Entry
    changed: list[Entry] = field(default_factory=list)
    """Existing facts, with their new bounds, status and successor."""
    remainder: Entry | None = None
    left: str | None = None
    """The value the placed one follows directly (it now ends where the placed one starts)."""
    previous_current: str | None = None


def timeline(state_facts: dict[str, FactState], fact_ids: list[str], exclude: str | None = None) -> list[FactState]:
    """The values of a slot: its facts that are not archived, in order of their start (empty ones left out)."""
    values = [state_facts[i] for i in fact_ids if i != exclude]
    values = [f for f in values if f.status is not FactStatus.ARCHIVED and not is_empty(f.valid_from, f.valid_to)]
    values.sort(key=lambda f: (f.valid_from is not None, f.valid_from or datetime.min, f.asserted_at))
    return values


def place(values: list[FactState], placed_id: str, start: datetime | None, end: datetime | None,
          placed_is_new: bool, placed_current: bool) -> Plan:
    """Place `[start, end)` (end None: until the next value starts) among `values` (the slot's timeline without
    the placed fact). `placed_current`: whether an existing placed fact is current now (a new one may become)."""
    if end is None:
        later = [f.valid_from for f in values if f.valid_from is not None and starts_before(start, f.valid_from)]
        end = min(later) if later else None
    previous_current = next((f.fact_id for f in values if f.status is FactStatus.CURRENT), None)
    after: list[Entry] = []
    changed: dict[str, Entry] = {}
    remainder: Entry | None = None
    left: str | None = None
    for f in values:
        entry = Entry(f.fact_id, f.valid_from, f.valid_to, f.status is FactStatus.CURRENT, f.superseded_by)
        if overlaps(f.valid_from, f.valid_to, start, end):
            before = starts_before(f.valid_from, start)
            beyond = end is not None and ends_after(f.valid_to, end)
            if before and beyond:  # spans the new value: split
                remainder = Entry(REMAINDER, end, f.valid_to, entry.current, f.superseded_by, split_from=f.fact_id)
                entry.end, left = start, f.fact_id
            elif before:
                entry.end, left = start, f.fact_id
            elif beyond:
                entry.start = end
            else:  # covered: held at no instant
                entry.end = f.valid_from
                entry.superseded_by = placed_id
            changed[f.fact_id] = entry
        after.append(entry)
    placed = Entry(placed_id, start, end, placed_current)
    after.append(placed)
    if remainder is not None:
        after.append(remainder)
    live = [e for e in after if not is_empty(e.start, e.end)]
    latest = max(live, key=lambda e: (e.start is not None, e.start or datetime.min))
    # The value that starts last is the current one: a new value, the remainder of the current one, or the
    # current one itself; an ended value that starts last leaves the slot without a current value.
    for e in after:
        now_current = e is latest and (e.current or (e is placed and placed_is_new))
        if e.current != now_current:
            e.current = now_current
            if e is not placed and e is not remainder:
                changed[e.fact_id] = e
    for e in live:  # a value that is not current (now) is superseded by the one that starts next
        if not e.current and (e.fact_id in changed or e is placed or e is remainder):
            follower = _follower(live, e)
            if follower is not None:
                e.superseded_by = follower.fact_id
    return Plan(placed, list(changed.values()), remainder, left, previous_current)


def _follower(live: list[Entry], e: Entry) -> Entry | None:
    """The value that starts next after `e` starts."""
    later = [x for x in live if x is not e and starts_before(e.start, x.start)]
    return min(later, key=lambda x: x.start) if later else None  # type: ignore[arg-type, return-value]
