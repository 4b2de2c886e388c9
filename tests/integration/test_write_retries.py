"""A write that loses the race to another writer of its tenant (on SQLite writers do not take turns: the loser's
append conflicts on the stream version) is decided again on the log as it now is and written, as the composition
root's retry policy says (`retry_conflicts`); one that keeps losing, or loses without a policy, is refused as
retryable (ConcurrencyError) and writes nothing. The other writer here writes while the batch is being decided (from
its `then`), so the race is lost every time it is run."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from domain import commands as c
from domain.application.ontology_service import OntologyService
from domain.errors import ConcurrencyError
from domain.ports import BatchResult, Outcome, WriteRetries
from infra.adapters.eventlog import EventsourcingLog
from infra.bootstrap import WRITE_ATTEMPTS, retry_conflicts
from infra.settings import Settings
from tests.conftest import TickingClock

T = "acme"


@pytest.fixture
def log(tmp_path: Path) -> Iterator[EventsourcingLog]:
    log = EventsourcingLog(Settings(home=tmp_path, event_store="sqlite").event_store_env())
    OntologyService(log, clock=TickingClock()).execute(c.CreateTenant(tenant=T))
    yield log
    log.close()


def _entities(log: EventsourcingLog) -> list[str]:
    return sorted(OntologyService(log, clock=TickingClock()).ontology(T).entities)


def _racing(log: EventsourcingLog, races: int) -> Callable[[list[Outcome]], c.Command]:
    """A `then` that has another service write to the tenant the first `races` times it is asked (each time while
    the batch is being decided, after its state was read)."""
    other = OntologyService(log, clock=TickingClock())
    asked: list[int] = []

    def then(outcomes: list[Outcome]) -> c.Command:
        asked.append(1)
        if len(asked) <= races:
            other.execute(c.RegisterEntity(tenant=T, ref=f"thing:other{len(asked)}", label="Other"))
        return c.RegisterEntity(tenant=T, ref="thing:record", label="Record")

    return then


def _counted(calls: list[int], policy: WriteRetries) -> WriteRetries:
    def counted(write: Callable[[], BatchResult]) -> BatchResult:
        calls.append(1)
        return policy(write)

    return counted


def test_a_write_decided_on_a_state_behind_the_log_is_decided_again_at_once_without_asking_the_policy(log) -> None:
    calls: list[int] = []
    behind = OntologyService(log, clock=TickingClock(), retries=_counted(calls, retry_conflicts))
    behind.ontology(T)
    OntologyService(log, clock=TickingClock()).execute(c.RegisterEntity(tenant=T, ref="person:li", label="Li"))
    behind.execute(c.RegisterEntity(tenant=T, ref="person:wang", label="Wang"))
    assert calls == []
    assert sorted(behind.ontology(T).entities) == _entities(log) == ["person:li", "person:wang"]


def test_a_write_that_lost_the_race_is_decided_again_on_the_log_as_it_now_is_and_written(log) -> None:
    calls: list[int] = []
    writer = OntologyService(log, clock=TickingClock(), retries=_counted(calls, retry_conflicts))
    result = writer.execute_batch([c.RegisterEntity(tenant=T, ref="person:wang", label="Wang")],
                                  then=_racing(log, races=1))
    assert calls == [1] and result.accepted == 2
    assert _entities(log) == ["person:wang", "thing:other1", "thing:record"]


def test_a_write_that_keeps_losing_the_race_is_refused_as_retryable_after_the_policys_attempts(log) -> None:
    then = _racing(log, races=1 + WRITE_ATTEMPTS)
    writer = OntologyService(log, clock=TickingClock(), retries=retry_conflicts)
    with pytest.raises(ConcurrencyError, match="gave up after repeated version conflicts"):
        writer.execute_batch([c.RegisterEntity(tenant=T, ref="person:wang", label="Wang")], then=then)
    assert _entities(log) == [f"thing:other{n}" for n in sorted(range(1, 2 + WRITE_ATTEMPTS), key=str)]


def test_without_a_retry_policy_a_write_that_lost_the_race_is_refused_as_retryable_and_writes_nothing(log) -> None:
    writer = OntologyService(log, clock=TickingClock())
    with pytest.raises(ConcurrencyError, match="another writer appended to the tenant while this write was decided"):
        writer.execute_batch([c.RegisterEntity(tenant=T, ref="person:wang", label="Wang")],
                             then=_racing(log, races=1))
    assert _entities(log) == ["thing:other1"]
