"""The event log contract: the same stories, run against POPO, a SQLite file and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from domain import commands as c
from domain.application.ontology_service import OntologyService
from domain.errors import FactNotCurrent, InvalidInput, UnknownEntity, UnknownSession, UnknownTenant
from domain.facts import FactAsserted, FactCorroborated, FactInvalidated, FactStatus
from domain.ports import TrackingPosition
from domain.values import corroborated_confidence

T = "acme"


def _seed(service: OntologyService) -> None:
    service.execute(c.CreateTenant(tenant=T))
    for ref, label in [("person:li", "李总"), ("person:wang", "王总"), ("stage:draft", "draft"),
                       ("stage:legal", "legal review"), ("file:contract-v3", "contract v3")]:
        service.execute(c.RegisterEntity(tenant=T, ref=ref, label=label))


def test_a_functional_relation_supersedes_the_previous_fact_in_one_write(make_noumena, backend):
    n = make_noumena(backend)
    _seed(n.service)
    first = n.service.execute(c.AssertFact(tenant=T, subject="file:contract-v3", relation="stage",
                                           object="stage:draft", reason="first draft"))
    before = n.log.max_position()
    second = n.service.execute(c.AssertFact(tenant=T, subject="file:contract-v3", relation="stage",
                                            object="stage:legal", reason="sent to legal",
                                            source=c.Source(session_id=None, actor="agent:wang")))
    old_id = first.events[0].fact_id  # type: ignore[attr-defined]
    invalidated, asserted = second.events
    assert isinstance(invalidated, FactInvalidated) and isinstance(asserted, FactAsserted)
    assert invalidated.fact_id == old_id and invalidated.superseded_by == asserted.fact_id
    assert invalidated.provenance.actor == "agent:wang"
    assert asserted.supersedes == old_id
    logged = n.log.read(before, 100)
    assert [type(x.event) for x in logged] == [FactInvalidated, FactAsserted]
    state = OntologyService(n.log, clock=lambda: datetime.now(UTC)).ontology(T)
    assert state.facts[old_id].status is FactStatus.INVALIDATED
    assert state.facts[asserted.fact_id].status is FactStatus.CURRENT


def test_asserting_the_same_fact_again_corroborates_it(make_noumena, backend):
    n = make_noumena(backend)
    _seed(n.service)
    first = n.service.execute(c.AssertFact(tenant=T, subject="person:li", relation="knows", object="person:wang",
                                           confidence=0.6))
    again = n.service.execute(c.AssertFact(tenant=T, subject="person:wang", relation="knows",
                                           object="person:li", confidence=0.5,
                                           source=c.Source(actor="agent:sales")))
    (event,) = again.events
    assert isinstance(event, FactCorroborated)
    assert event.fact_id == first.events[0].fact_id  # type: ignore[attr-defined]
    assert event.confidence == pytest.approx(corroborated_confidence(0.6, 0.5)) == pytest.approx(0.8)
    state = n.service.ontology(T)
    assert len(state.facts) == 1 and len(state.facts[event.fact_id].provenance) == 2


def test_invalidating_a_fact_that_is_not_current_names_its_state(make_noumena, backend):
    n = make_noumena(backend)
    _seed(n.service)
    n.service.execute(c.AssertFact(tenant=T, subject="file:contract-v3", relation="stage", object="stage:draft"))
    n.service.execute(c.AssertFact(tenant=T, subject="file:contract-v3", relation="stage", object="stage:legal"))
    with pytest.raises(FactNotCurrent) as raised:
        n.service.execute(c.InvalidateFact(tenant=T, subject="file:contract-v3", relation="stage",
                                           object="stage:draft", reason="wrong"))
    assert "invalidated" in str(raised.value) and "superseded by" in str(raised.value)


def test_facts_need_registered_entities_of_the_same_tenant(make_noumena, backend):
    n = make_noumena(backend)
    _seed(n.service)
    n.service.execute(c.CreateTenant(tenant="other"))
    n.service.execute(c.RegisterEntity(tenant="other", ref="person:zhao", label="赵"))
    with pytest.raises(UnknownEntity) as raised:
        n.service.execute(c.AssertFact(tenant=T, subject="person:li", relation="knows", object="person:zhao"))
    assert raised.value.field == "object" and "person:zhao" in str(raised.value)
    with pytest.raises(UnknownTenant):
        n.service.execute(c.RegisterEntity(tenant="nobody", ref="person:x", label="x"))


def test_registering_twice_and_repeating_an_event_id_write_nothing(make_noumena, backend):
    n = make_noumena(backend)
    _seed(n.service)
    position = n.log.max_position()
    assert n.service.execute(c.RegisterEntity(tenant=T, ref="person:li", label="李总")).events == []
    fact = c.AssertFact(tenant=T, subject="person:li", relation="knows", object="person:wang", event_id="e-1")
    assert len(n.service.execute(fact).events) == 1
    assert n.service.execute(fact).events == []
    assert n.log.max_position() == position + 1


def test_the_state_rebuilt_from_the_log_equals_the_state_that_wrote_it(make_noumena, backend):
    n = make_noumena(backend)
    _seed(n.service)
    n.service.execute(c.StartSession(tenant=T, session_id="s1", agent="person:wang", serving="person:li"))
    n.service.execute(c.AssertFact(tenant=T, subject="person:li", relation="knows", object="person:wang",
                                   scope="session:s1", valid_from=datetime(2026, 1, 1, tzinfo=UTC)))
    n.service.execute(c.DispatchWorker(tenant=T, session_id="s1", worker_session_id="w1", task="quote",
                                       about=("person:li",)))
    n.service.execute(c.EndSession(tenant=T, session_id="s1"))
    written = n.service.ontology(T)
    rebuilt = OntologyService(n.log, clock=lambda: datetime.now(UTC)).ontology(T)
    assert rebuilt.version == written.version
    assert {k: (f.status, f.confidence, f.valid_from) for k, f in rebuilt.facts.items()} == {
        k: (f.status, f.confidence, f.valid_from) for k, f in written.facts.items()}
    assert [f.status for f in rebuilt.facts.values()] == [FactStatus.ARCHIVED]  # session memory ended
    assert rebuilt.sessions["w1"].parent_session_id == "s1"


def test_a_tracked_position_is_stored_once(make_noumena, backend):
    n = make_noumena(backend)
    _seed(n.service)
    cmd = c.RegisterEntity(tenant=T, ref="person:zhang", label="张")
    first = n.service.execute_batch([cmd], tracking=TrackingPosition("kafka:events:0", 41))
    assert first.accepted == 1 and not first.already_tracked
    again = n.service.execute_batch([c.RegisterEntity(tenant=T, ref="person:zhou", label="周")],
                                    tracking=TrackingPosition("kafka:events:0", 41))
    assert again.already_tracked and "person:zhou" not in n.service.ontology(T).entities
    assert n.log.tracked_position("kafka:events:0") == 41


def test_an_all_or_nothing_batch_with_one_bad_command_writes_nothing(make_noumena, backend):
    n = make_noumena(backend)
    _seed(n.service)
    position = n.log.max_position()
    result = n.service.execute_batch([
        c.RegisterEntity(tenant=T, ref="person:zhang", label="张"),
        c.AssertFact(tenant=T, subject="person:zhang", relation="knows", object="person:li"),
        c.AppendMessage(tenant=T, session_id="missing", message_id="m1", role="user", content="hi"),
    ], all_or_nothing=True)
    assert isinstance(result.outcomes[2].error, UnknownSession)
    assert n.log.max_position() == position
    assert "person:zhang" not in n.service.ontology(T).entities  # the tentative state was rolled back


@pytest.mark.parametrize("backend_name", ["sqlite", "postgres"])
def test_two_writers_on_one_store_never_lose_an_event(make_noumena, backend_name, tmp_path):
    home = tmp_path / "shared"
    a = make_noumena(backend_name, home=home)
    b = make_noumena(backend_name, home=home)
    _seed(a.service)
    for i in range(20):
        writer = a if i % 2 else b
        writer.service.execute(c.RegisterEntity(tenant=T, ref=f"thing:{i}", label=f"thing {i}"))
    assert {f"thing:{i}" for i in range(20)} <= set(a.service.ontology(T).entities)
    assert a.service.ontology(T).version == b.service.ontology(T).version


@pytest.mark.parametrize("backend_name", ["sqlite", "postgres"])
def test_a_writer_decides_on_what_another_writer_wrote_since_its_last_write(make_noumena, backend_name, tmp_path):
    """A writer decides a batch on its state as it left it, without reading the log first; what the other writer
    appended meanwhile must still count: a rejection or a no-op is decided again on the caught-up state."""
    home = tmp_path / "shared"
    a = make_noumena(backend_name, home=home)
    b = make_noumena(backend_name, home=home)
    _seed(a.service)
    b.service.execute(c.RegisterEntity(tenant=T, ref="thing:b", label="b's"))  # b's state is now its own
    a.service.execute(c.RegisterEntity(tenant=T, ref="thing:a", label="a's"))
    a.service.execute(c.RegisterEntity(tenant=T, ref="person:li", label="李总 (Li)"))  # renamed by a
    fact = b.service.execute(c.AssertFact(tenant=T, subject="thing:a", relation="owned_by", object="person:li"))
    assert isinstance(fact.events[0], FactAsserted)  # not UnknownEntity: b saw a's entity
    again = b.service.execute(c.RegisterEntity(tenant=T, ref="person:li", label="李总"))
    assert again.events  # not a no-op on b's old state: the name a gave is replaced
    assert a.service.ontology(T).entities["person:li"].label == "李总"


def test_timestamps_need_a_zone_and_valid_time_must_move_forward():
    with pytest.raises(ValueError, match="timezone"):
        c.AssertFact(tenant=T, subject="person:li", relation="knows", object="person:wang",
                     valid_from=datetime(2026, 1, 1))
    start = datetime(2026, 1, 1, tzinfo=UTC)
    with pytest.raises(ValueError, match="valid_to must be after valid_from"):
        c.AssertFact(tenant=T, subject="person:li", relation="knows", object="person:wang", valid_from=start,
                     valid_to=start - timedelta(days=1))
    with pytest.raises(ValueError, match="less than or equal to 1"):
        c.AssertFact(tenant=T, subject="person:li", relation="knows", object="person:wang", confidence=1.5)


def test_the_writer_clock_must_carry_a_zone(make_noumena):
    n = make_noumena("popo", clock=lambda: datetime(2026, 1, 1))
    with pytest.raises(InvalidInput, match="time zone"):
        n.service.execute(c.CreateTenant(tenant=T))
