"""Properties of valid-time timelines (docs/timelines.md), against a plain reference: a functional slot's
timeline painted day by day, each day owned by at most one value.

1. For random assertions and invalidations of a functional relation, the value holding at every valid instant
   is the reference's, at most one fact holds there, and the current value is the reference's; the state
   rebuilt from the log says the same.
2. For random writes of every kind that touches a timeline (assertions in several scopes with promotion,
   invalidations and corrections of ended facts, `CorrectFact`, archive and restore, merges), no two values of a
   functional slot ever overlap, a slot's current value is the one that starts last, and every
   `superseded_by` names a fact of the same slot.

The as-of-equals-replay property for these events is in tests/integration/test_projection_as_of.py.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from domain import commands as c
from domain.application.entities import merge_entities
from domain.application.ontology_service import OntologyService
from domain.errors import DomainError, InvalidInput
from domain.facts import FactState, FactStatus
from domain.ontology import Ontology
from infra.adapters.eventlog import EventsourcingLog
from infra.bootstrap import bootstrap
from infra.settings import Settings
from tests.projection_support import ManualClock
from tests.properties import examples

T = "tl"
BASE = datetime(2026, 3, 1, tzinfo=UTC)
GRID = 60
"""Days checked: 0 .. GRID. Every bound a script can produce is a whole day below GRID - 1, so day GRID stands
for 'from the last bound on, for ever'."""
SUBJECTS = ("thing:x", "thing:y")
OBJECTS = ("stage:a", "stage:b", "stage:c")


def day(n: int) -> datetime:
    return BASE + timedelta(days=n)


def day_of(moment: datetime) -> int:
    delta = moment - BASE
    assert delta % timedelta(days=1) == timedelta(0)
    return delta // timedelta(days=1)


@dataclass
class Slot:
    """One functional (subject, relation, scope): which value owns each day, and which value is current."""

    cells: dict[int, int] = field(default_factory=dict)
    objects: dict[int, str] = field(default_factory=dict)
    current: int | None = None
    _ids: int = 0

    def _new(self, obj: str) -> int:
        self._ids += 1
        self.objects[self._ids] = obj
        return self._ids

    def days(self, value: int) -> list[int]:
        return sorted(d for d, v in self.cells.items() if v == value)

    def alive(self) -> set[int]:
        return set(self.cells.values())

    def at(self, d: int) -> str | None:
        return self.objects[self.cells[d]] if d in self.cells else None

    def assert_(self, obj: str, a: int, b: int | None) -> str:
        if b is not None and b <= a:
            return "refused"
        if self.current is not None and self.objects[self.current] == obj:
            return "corroborated"
        if a in self.cells and self.objects[self.cells[a]] == obj:
            return "corroborated"
        starts = {v: self.days(v)[0] for v in self.alive()}
        if b is None:  # until the next value starts, else for ever
            b = min((s for s in starts.values() if s > a), default=GRID + 1)
        for v in self.alive():
            owned = self.days(v)
            if owned[0] < a and owned[-1] >= b:  # split: the part after continues as another value
                rest = self._new(self.objects[v])
                for d in owned:
                    if d >= b:
                        self.cells[d] = rest
                if self.current == v:
                    self.current = rest
        new = self._new(obj)
        for d in range(a, b):
            self.cells[d] = new
        latest = max(self.alive(), key=lambda v: self.days(v)[0])
        if latest == new:
            self.current = new
        elif self.current not in self.alive():
            self.current = None
        return "asserted"

    def invalidate(self, obj: str, end: int) -> str:
        if self.current is None or self.objects[self.current] != obj:
            return "refused"
        owned = self.days(self.current)
        if end <= owned[0]:
            return "refused"
        for d in owned:
            if d >= end:
                del self.cells[d]
        self.current = None
        return "ended"


def slot_facts(state: Ontology, subject: str, scope: str = "org") -> list[FactState]:
    return [f for f in state.facts.values() if (f.subject, f.relation, f.scope) == (subject, "stage", scope)
            and f.status is not FactStatus.ARCHIVED]


def holds(fact: FactState, moment: datetime) -> bool:
    return (fact.valid_from is None or fact.valid_from <= moment) and (fact.valid_to is None or moment < fact.valid_to)


# ------------------------------------------------------------------------------------ 1. against the reference

days = st.integers(0, 20)
step = st.tuples(
    st.sampled_from(["assert", "assert", "assert", "invalidate"]), st.sampled_from(SUBJECTS),
    st.sampled_from(OBJECTS), st.none() | days, st.none() | st.integers(1, 24), st.none() | days,
    st.sampled_from([0, 0, 1]),
)


def _reference_story(script: list[tuple]) -> None:  # type: ignore[type-arg]
    clock = ManualClock(day(0))
    with _service(clock) as (service, log):
        _reference_run(service, log, clock, script)


def _reference_run(service: OntologyService, log: EventsourcingLog, clock: ManualClock,
                   script: list[tuple]) -> None:  # type: ignore[type-arg]
    service.execute(c.CreateTenant(tenant=T))
    for ref in SUBJECTS + OBJECTS:
        service.execute(c.RegisterEntity(tenant=T, ref=ref, label=ref))
    reference = {s: Slot() for s in SUBJECTS}
    for kind, subject, obj, valid_from, valid_to, occurred, advance in script:
        clock.now += timedelta(days=advance)
        occurred_at = None if occurred is None else day(occurred)
        if kind == "assert":
            start = valid_from if valid_from is not None else occurred if occurred is not None else day_of(clock.now)
            if valid_from is not None and valid_to is not None and valid_to <= valid_from:
                valid_to = None  # (refused by the command itself; the rule's refusal is what is tested here)
            expected = reference[subject].assert_(obj, start, valid_to)
            command: c.Command = c.AssertFact(
                tenant=T, subject=subject, relation="stage", object=obj, occurred_at=occurred_at,
                valid_from=None if valid_from is None else day(valid_from),
                valid_to=None if valid_to is None else day(valid_to))
        else:
            end = occurred if occurred is not None else day_of(clock.now)
            expected = reference[subject].invalidate(obj, end)
            command = c.InvalidateFact(tenant=T, subject=subject, relation="stage", object=obj, reason="ended",
                                       occurred_at=occurred_at)
        try:
            service.execute(command)
            outcome = "accepted"
        except DomainError as error:
            outcome = "refused"
            if kind == "assert":
                assert isinstance(error, InvalidInput) and error.field == "valid_to"
        assert outcome == ("refused" if expected == "refused" else "accepted"), (command, expected)
        _agrees(service.ontology(T), reference)
    _agrees(OntologyService(log, clock=clock).ontology(T), reference)  # rebuilt from the log


def _agrees(state: Ontology, reference: dict[str, Slot]) -> None:
    for subject, slot in reference.items():
        facts = slot_facts(state, subject)
        for d in range(GRID + 1):
            holding = [f.object for f in facts if holds(f, day(d))]
            assert len(holding) <= 1, f"{subject} on day {d}: {holding}"
            assert (holding[0] if holding else None) == slot.at(d), f"{subject} on day {d}"
        current = [f.object for f in facts if f.status is FactStatus.CURRENT]
        assert current == ([slot.objects[slot.current]] if slot.current is not None else [])


@contextmanager
def _service(clock: ManualClock) -> Iterator[tuple[OntologyService, EventsourcingLog]]:
    """The real service on the in-memory (POPO) event store, with the test's clock."""
    with tempfile.TemporaryDirectory(prefix="timelines-") as home:
        app = bootstrap(Settings(home=Path(home), event_store="popo"), clock=clock)
        try:
            yield app.service, app.log
        finally:
            app.close()


@settings(max_examples=examples(1.0), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(script=st.lists(step, max_size=30))
def test_the_value_at_every_valid_instant_is_the_reference_timelines(script) -> None:  # type: ignore[no-untyped-def]
    _reference_story(script)


# ------------------------------------------------------------------------------------ 2. invariants of every writer

SCOPES = ("org", "person:a", "person:b", "person:c")
write = st.one_of(
    st.tuples(st.just("assert"), st.sampled_from(SUBJECTS), st.sampled_from(OBJECTS), st.sampled_from(SCOPES),
              st.none() | days, st.none() | st.integers(1, 24)),
    st.tuples(st.just("invalidate"), st.sampled_from(SUBJECTS), st.sampled_from(OBJECTS), st.sampled_from(SCOPES),
              st.none() | days),
    st.tuples(st.just("correct"), st.sampled_from(SUBJECTS), st.sampled_from(OBJECTS), st.sampled_from(SCOPES),
              st.none() | days, st.none() | st.integers(1, 24)),
    st.tuples(st.sampled_from(["archive", "restore"]), st.integers(0, 30)),
    st.tuples(st.just("merge")),
    st.tuples(st.just("promote"), st.integers(0, 30)),
)


def _command(w: tuple, state: Ontology) -> c.Command | None:  # type: ignore[type-arg]
    kind = w[0]
    if kind == "assert":
        _, subject, obj, scope, valid_from, valid_to = w
        if valid_from is not None and valid_to is not None and valid_to <= valid_from:
            valid_to = None
        return c.AssertFact(tenant=T, subject=subject, relation="stage", object=obj, scope=scope,
                            valid_from=None if valid_from is None else day(valid_from),
                            valid_to=None if valid_to is None else day(valid_to))
    if kind == "invalidate":
        _, subject, obj, scope, valid_to = w
        return c.InvalidateFact(tenant=T, subject=subject, relation="stage", object=obj, scope=scope,
                                reason="ended", valid_to=None if valid_to is None else day(valid_to))
    if kind == "correct":
        _, subject, obj, scope, valid_from, valid_to = w
        if valid_from is None and valid_to is None:
            valid_to = 24
        if valid_from is not None and valid_to is not None and valid_to <= valid_from:
            valid_from = None
        return c.CorrectFact(tenant=T, subject=subject, relation="stage", object=obj, scope=scope, reason="fix",
                             valid_from=None if valid_from is None else day(valid_from),
                             valid_to=None if valid_to is None else day(valid_to))
    ids = sorted(state.facts)
    if kind in ("archive", "restore", "promote"):
        if not ids:
            return None
        fact_id = ids[w[1] % len(ids)]
        if kind == "archive":
            return c.ArchiveFact(tenant=T, fact_id=fact_id, cause="disuse")
        if kind == "restore":
            return c.RestoreFact(tenant=T, fact_id=fact_id, cause="recalled")
        return c.PromoteFact(tenant=T, fact_id=fact_id, approved_by="lead")
    return None


def _invariants(state: Ontology) -> None:
    slots = {(f.subject, f.relation, f.scope) for f in state.facts.values()}
    for slot in slots:
        values = [f for f in state.facts.values() if (f.subject, f.relation, f.scope) == slot
                  and f.status is not FactStatus.ARCHIVED
                  and not (f.valid_to is not None and f.valid_from is not None and f.valid_to <= f.valid_from)]
        values.sort(key=lambda f: f.valid_from)  # type: ignore[arg-type, return-value]
        for before, after in zip(values, values[1:], strict=False):
            assert before.valid_to is not None and before.valid_to <= after.valid_from, f"overlap in {slot}"
        current = [f for f in values if f.status is FactStatus.CURRENT]
        assert len(current) <= 1, f"two current values in {slot}"
        if current:
            assert current[0] is values[-1], f"the current value of {slot} is not the one that starts last"
    for fact in state.facts.values():
        assert fact.valid_from is not None  # nothing holds "since ever" any more
        if fact.status is FactStatus.CURRENT:  # the indexes the rules read agree with the statuses
            assert state.current_by_key[state.key_for(*fact.key)] == fact.fact_id
            assert state.functional_current[(fact.subject, fact.relation, fact.scope)] == fact.fact_id
        elif fact.status is FactStatus.INVALIDATED:
            assert state.current_by_key.get(state.key_for(*fact.key)) != fact.fact_id
        if fact.superseded_by is not None:
            follower = state.facts[fact.superseded_by]
            assert (follower.subject, follower.relation, follower.scope) == (fact.subject, fact.relation, fact.scope)


@settings(max_examples=examples(0.5), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(script=st.lists(write, max_size=30), advances=st.lists(st.sampled_from([0, 0, 1]), min_size=30, max_size=30))
def test_every_writer_keeps_functional_timelines_without_overlaps(script, advances) -> None:  # type: ignore[no-untyped-def]
    clock = ManualClock(day(0))
    with _service(clock) as (service, log):
        _writers_run(service, log, clock, script, advances)


def _writers_run(service: OntologyService, log: EventsourcingLog, clock: ManualClock, script: list[tuple],
                 advances: list[int]) -> None:  # type: ignore[type-arg]
    service.execute(c.CreateTenant(tenant=T))
    for ref in SUBJECTS + OBJECTS + ("person:a", "person:b", "person:c"):
        service.execute(c.RegisterEntity(tenant=T, ref=ref, label=ref))
    for w, advance in zip(script, advances, strict=False):
        clock.now += timedelta(days=advance)
        state = service.ontology(T)
        try:
            if w[0] == "merge":
                merge_entities(service, T, "thing:y", "thing:x")
            else:
                command = _command(w, state)
                if command is not None:
                    service.execute(command)
        except DomainError:
            pass
        _invariants(service.ontology(T))
    rebuilt = OntologyService(log, clock=clock).ontology(T)
    live = service.ontology(T)
    as_rows = [(f.fact_id, f.object, f.scope, f.valid_from, f.valid_to, f.status, f.superseded_by, f.ranges)
               for f in sorted(live.facts.values(), key=lambda f: f.fact_id)]
    assert as_rows == [(f.fact_id, f.object, f.scope, f.valid_from, f.valid_to, f.status, f.superseded_by, f.ranges)
                       for f in sorted(rebuilt.facts.values(), key=lambda f: f.fact_id)]
