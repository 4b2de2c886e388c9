"""The rule that writes coalesced recalls, with nothing but the domain: at most one use per agent, fact and hour,
at the moment of its first use; an hour the ontology already holds a use in takes none; unknown agents and facts
are refused naming the use."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from domain import commands as c
from domain.errors import UnknownEntity, UnknownFact
from domain.ontology import Ontology
from domain.recalls import RecallMode, RecallsCoalesced
from domain.rules import decide

T = "acme"
NINE = datetime(2026, 10, 1, 9, 0, tzinfo=UTC)


def _state() -> tuple[Ontology, str]:
    state = Ontology(tenant=T)
    for command in (c.CreateTenant(tenant=T), c.RegisterEntity(tenant=T, ref="agent:a", label="A"),
                    c.RegisterEntity(tenant=T, ref="person:li", label="Li"),
                    c.AssertFact(tenant=T, subject="agent:a", relation="serves", object="person:li")):
        for event in decide(state, command, NINE - timedelta(days=1)):
            state.apply(event)
    (fact_id,) = state.facts
    return state, fact_id


def _use(fact_id: str, at: datetime, agent: str = "agent:a") -> c.ServedUse:
    return c.ServedUse(agent=agent, fact_id=fact_id, mode=RecallMode.PUSHED, at=at)


def _record(state: Ontology, *uses: c.ServedUse) -> list[RecallsCoalesced]:
    events = decide(state, c.RecordCoalescedRecalls(tenant=T, uses=uses), NINE + timedelta(hours=5))
    for event in events:
        state.apply(event)
    return events  # type: ignore[return-value]


def test_uses_in_one_hour_become_one_use_at_the_first_moment() -> None:
    state, fact_id = _state()
    (event,) = _record(state, _use(fact_id, NINE + timedelta(minutes=7, seconds=3.5)),
                       _use(fact_id, NINE + timedelta(minutes=40)), _use(fact_id, NINE + timedelta(minutes=59)))
    assert event.used() == [("agent:a", RecallMode.PUSHED, fact_id, NINE + timedelta(minutes=7, seconds=3))]
    assert state.recall_uses[fact_id]["agent:a"] == [NINE + timedelta(minutes=7, seconds=3)]


def test_each_hour_keeps_its_own_first_use() -> None:
    state, fact_id = _state()
    (event,) = _record(state, _use(fact_id, NINE + timedelta(minutes=59)), _use(fact_id, NINE + timedelta(minutes=61)))
    assert [at for *_rest, at in event.used()] == [NINE + timedelta(minutes=59), NINE + timedelta(minutes=61)]


def test_an_hour_that_already_holds_a_use_takes_no_other() -> None:
    state, fact_id = _state()
    _record(state, _use(fact_id, NINE + timedelta(minutes=5)))
    assert _record(state, _use(fact_id, NINE + timedelta(minutes=50))) == []
    (event,) = _record(state, _use(fact_id, NINE + timedelta(minutes=50), agent="person:li"))  # another agent
    assert [agent for agent, *_rest in event.used()] == ["person:li"]


def test_an_unknown_agent_or_fact_is_refused_naming_the_use() -> None:
    state, fact_id = _state()
    with pytest.raises(UnknownEntity) as agent:
        _record(state, _use(fact_id, NINE), _use(fact_id, NINE, agent="agent:nobody"))
    assert agent.value.field == "uses[1].agent"
    with pytest.raises(UnknownFact) as fact:
        _record(state, _use("no-such-fact", NINE))
    assert fact.value.field == "uses[0].fact_id"
    assert state.recall_uses == {}
