"""The uses of facts in a perspective index, and the clocks they age on.

`Uses`: per agent, its recalls: which facts it used, and when; under the keys `LOG_KEYS`, the uses the log shows for
every agent (keys `CORROBORATIONS` and `CORRECTIONS`; the assertion is every agent's first use and is not stored here).
The walk reads them sorted by (fact, time) for the base levels, and the most uses of one fact for its cut-off.

`Episodes`: per person, the moments of their own activity (a session serving them started, one of those
sessions compacted): the clock on which that person's episodic facts age (docs/perspectives.md)."""

from __future__ import annotations

import numpy as np

from projections.perspective_columns import Column

CORROBORATIONS, CORRECTIONS = -1, -2
"""The `Uses` keys of the uses the log shows for every agent (never an entity id)."""
LOG_KEYS = (CORROBORATIONS, CORRECTIONS)


class Uses:
    def __init__(self) -> None:
        self.by_agent: dict[int, tuple[Column, Column]] = {}
        """agent entity id -> (fact ids, times) in the order recorded."""
        self._sorted: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._most: dict[int, int] = {}
        self._prepared = False

    def record(self, agent: int, facts: list[int], at: float) -> None:
        columns = self.by_agent.get(agent)
        if columns is None:
            columns = self.by_agent[agent] = (Column(np.int32), Column(np.float64))
        for fact in facts:
            columns[0].append(fact)
            columns[1].append(at)
        # the sorted copy stays: `sorted` merges what was recorded since into it (a few uses, between walks)

    def load(self, agent: int, facts: np.ndarray, times: np.ndarray) -> None:
        """An agent's uses in bulk (building an index at start)."""
        self.by_agent[agent] = (Column(np.int32, data=facts), Column(np.float64, data=times))
        self._forget_derived(agent)

    def merge(self, merged: int, into: int) -> None:
        """`merged`'s uses become `into`'s (the two entities are one)."""
        if merged not in self.by_agent:
            return
        facts, times = self.by_agent.pop(merged)
        columns = self.by_agent.get(into)
        if columns is None:
            columns = self.by_agent[into] = (Column(np.int32), Column(np.float64))
        for fact, moment in zip(facts.view.tolist(), times.view.tolist(), strict=True):
            columns[0].append(fact)
            columns[1].append(moment)
        self._forget_derived(merged)
        self._forget_derived(into)

    def sorted(self, agent: int) -> tuple[np.ndarray, np.ndarray] | None:
        """The agent's uses as (fact ids, times) sorted by fact then time; None if it used nothing."""
        cached = self._sorted.get(agent)
        columns = self.by_agent.get(agent)
        if cached is not None and columns is not None and len(cached[0]) < columns[0].size:
            cached = self._merged(agent, cached, columns)
        if cached is not None:
            return cached
        if columns is None:
            return None
        if not self._prepared:
            self._prepare_all()
            return self._sorted[agent]
        facts, times = columns
        order = np.lexsort((times.view, facts.view))
        cached = self._sorted[agent] = (facts.view[order].astype(np.int64), times.view[order].copy())
        return cached

    def _merged(self, agent: int, cached: tuple[np.ndarray, np.ndarray], columns: tuple[Column, Column]
                ) -> tuple[np.ndarray, np.ndarray] | None:
        """The sorted copy with the uses recorded since merged in at their places (by fact, then time), so it
        is the same arrays a sort of everything gives; a long tail is sorted with the rest instead."""
        facts, times = cached
        tail_facts = columns[0].view[len(facts):].astype(np.int64)
        tail_times = columns[1].view[len(facts):]
        if len(tail_facts) > 256 and len(tail_facts) > len(facts) // 8:
            self._forget_derived(agent)
            return None
        order = np.lexsort((tail_times, tail_facts))
        tail_facts, tail_times = tail_facts[order], tail_times[order]
        lo = np.searchsorted(facts, tail_facts, "left")
        hi = np.searchsorted(facts, tail_facts, "right")
        at = np.array([a + int(np.searchsorted(times[a:b], t, "right"))
                       for a, b, t in zip(lo.tolist(), hi.tolist(), tail_times.tolist(), strict=True)],
                      dtype=np.int64)
        merged = self._sorted[agent] = (np.insert(facts, at, tail_facts), np.insert(times, at, tail_times))
        most = self._most.get(agent)
        if most is not None:
            unique = np.unique(tail_facts)
            runs = np.searchsorted(merged[0], unique, "right") - np.searchsorted(merged[0], unique, "left")
            self._most[agent] = max(most, int(runs.max()))
        return merged

    def most(self, agent: int) -> int:
        """The most times the agent used any one fact."""
        uses = self.sorted(agent)  # (merges what was recorded since, and with it the count)
        most = self._most.get(agent)
        if most is None:
            most = 0
            if uses is not None and len(uses[0]):
                most = int(np.unique(uses[0], return_counts=True)[1].max())
            self._most[agent] = most
        return most

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes + b.nbytes for a, b in self.by_agent.values())

    def _forget_derived(self, agent: int) -> None:
        self._sorted.pop(agent, None)
        self._most.pop(agent, None)

    def _prepare_all(self) -> None:
        """Sort every agent's uses by (fact, time) and count its most used fact, all agents at once (the first
        query of each agent then finds them ready)."""
        self._prepared = True
        agents = [a for a in self.by_agent if a not in self._sorted]
        if not agents:
            return
        sizes = [self.by_agent[a][0].size for a in agents]
        owner = np.repeat(np.arange(len(agents)), sizes)
        facts = np.concatenate([self.by_agent[a][0].view for a in agents])
        times = np.concatenate([self.by_agent[a][1].view for a in agents])
        order = np.lexsort((times, facts, owner))
        owner, facts, times = owner[order], facts[order], times[order]
        bounds = np.zeros(len(agents) + 1, dtype=np.int64)
        np.cumsum(sizes, out=bounds[1:])
        run_start = np.ones(len(facts), dtype=bool)
        run_start[1:] = (facts[1:] != facts[:-1]) | (owner[1:] != owner[:-1])
        starts = np.flatnonzero(run_start)
        runs = np.diff(np.append(starts, len(facts)))
        most = np.zeros(len(agents), dtype=np.int64)
        np.maximum.at(most, owner[starts], runs)
        for k, agent in enumerate(agents):
            lo, hi = int(bounds[k]), int(bounds[k + 1])
            self._sorted[agent] = (facts[lo:hi].astype(np.int64), times[lo:hi])
            self._most[agent] = int(most[k])


class Episodes:
    """Per person entity, the moments of their episodes, kept sorted on demand."""

    def __init__(self) -> None:
        self.by_person: dict[int, Column] = {}
        self._sorted: dict[int, np.ndarray] = {}

    def record(self, person: int, at: float) -> None:
        column = self.by_person.get(person)
        if column is None:
            column = self.by_person[person] = Column(np.float64, capacity=8)
        column.append(at)
        self._sorted.pop(person, None)

    def load(self, person: int, times: np.ndarray) -> None:
        """A person's episodes in bulk (building an index at start)."""
        self.by_person[person] = Column(np.float64, data=times)
        self._sorted.pop(person, None)

    def merge(self, merged: int, into: int) -> None:
        """`merged`'s episodes become `into`'s (the two persons are one)."""
        column = self.by_person.pop(merged, None)
        self._sorted.pop(merged, None)
        if column is not None:
            for moment in column.view.tolist():
                self.record(into, moment)

    def sorted(self, person: int) -> np.ndarray:
        """The person's episode moments, ascending (empty for no one or a person never served)."""
        cached = self._sorted.get(person)
        if cached is None:
            column = self.by_person.get(person)
            cached = np.sort(column.view) if column is not None else np.zeros(0)
            self._sorted[person] = cached
        return cached

    @property
    def nbytes(self) -> int:
        return sum(c.nbytes for c in self.by_person.values())
