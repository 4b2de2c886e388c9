"""Valid-time timelines of functional relations (docs/timelines.md), told as stories through the real service,
the real SQLite event log, the wire format and the DuckDB projection."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pydantic import ValidationError

from domain import commands as c
from domain.application.ingestion import Ingestor
from domain.application.ontology_service import OntologyService
from domain.application.wire import WireError, parse_envelope
from domain.errors import FactNotCurrent, InvalidInput
from domain.events import event_class_for, upcast
from domain.facts import FactCorrected, FactCorroborated, FactInvalidated, FactState, FactStatus
from domain.ontology import Ontology
from infra.bootstrap import Noumena, bootstrap
from infra.settings import Settings
from projections.ontology_as_of import believed_at
from projections.projector import Projector
from tests.projection_support import ManualClock

T = "acme"
K = "file:contract"
BASE = datetime(2026, 1, 1, tzinfo=UTC)


def day(n: int) -> datetime:
    return BASE + timedelta(days=n)


@pytest.fixture
def clock() -> ManualClock:
    """Transaction time of `app`, moved by hand."""
    return ManualClock(day(100))


@pytest.fixture
def app(tmp_path: Path, clock: ManualClock):  # type: ignore[no-untyped-def]
    noumena = bootstrap(Settings(home=tmp_path / "home", event_store="sqlite"), clock=clock)
    noumena.service.execute(c.CreateTenant(tenant=T))
    for ref in (K, "stage:draft", "stage:review", "stage:signed", "stage:suspended", "person:a", "person:b",
                "person:c", "ticket:t", "status:open", "status:done"):
        noumena.service.execute(c.RegisterEntity(tenant=T, ref=ref, label=ref))
    yield noumena
    noumena.close()


def stage(app: Noumena, value: str, valid_from: datetime | None = None, valid_to: datetime | None = None,
          **more: object) -> list:
    return app.service.execute(c.AssertFact(tenant=T, subject=K, relation="stage", object=f"stage:{value}",
                                            valid_from=valid_from, valid_to=valid_to, **more)).events


def timeline(state: Ontology, subject: str = K, relation: str = "stage", scope: str = "org"
             ) -> list[tuple[str, datetime | None, datetime | None, str]]:
    """The slot's values that are not archived, by start: (value, from, to, status)."""
    facts = [f for f in state.facts.values() if (f.subject, f.relation, f.scope) == (subject, relation, scope)
             and f.status is not FactStatus.ARCHIVED]
    facts.sort(key=lambda f: (f.valid_from, f.asserted_at))
    return [(f.object.split(":")[1], f.valid_from, f.valid_to, f.status.value) for f in facts]


def holding(state: Ontology, instant: datetime, subject: str = K, relation: str = "stage", scope: str = "org"
            ) -> list[str]:
    return [f.object for f in state.facts.values()
            if (f.subject, f.relation, f.scope) == (subject, relation, scope) and f.status is not FactStatus.ARCHIVED
            and (f.valid_from is None or f.valid_from <= instant) and (f.valid_to is None or instant < f.valid_to)]


def test_an_assertion_without_valid_from_starts_at_the_sources_clock_else_at_the_recorded_time(app) -> None:
    stage(app, "draft", occurred_at=day(3))
    stage(app, "review")  # no clock from the source: the recorded time, day 100
    state = app.service.ontology(T)
    assert timeline(state) == [("draft", day(3), day(100), "invalidated"), ("review", day(100), None, "current")]
    assert holding(state, day(2)) == []  # not "since ever"
    assert holding(state, day(50)) == ["stage:draft"]


def test_a_value_placed_in_the_past_is_inserted_and_each_cut_is_an_event_with_provenance(app) -> None:
    stage(app, "draft", day(1))
    stage(app, "signed", day(30))
    events = stage(app, "review", day(10), event_id="late-review", source=c.Source(actor="crm"))
    state = app.service.ontology(T)
    assert timeline(state) == [("draft", day(1), day(10), "invalidated"),
                               ("review", day(10), day(30), "invalidated"),
                               ("signed", day(30), None, "current")]
    review = next(f for f in state.facts.values() if f.object == "stage:review")
    draft = next(f for f in state.facts.values() if f.object == "stage:draft")
    signed = next(f for f in state.facts.values() if f.object == "stage:signed")
    assert (draft.superseded_by, review.superseded_by, review.supersedes) == (review.fact_id, signed.fact_id,
                                                                              draft.fact_id)
    cut = [e for e in events if isinstance(e, FactCorrected)]
    assert [(e.fact_id, e.valid_to, e.provenance.actor, e.provenance.event_id) for e in cut] == [
        (draft.fact_id, day(10), "crm", "late-review")]
    for instant in (day(0), day(1), day(9), day(10), day(29), day(30), day(99)):
        assert len(holding(state, instant)) <= 1


def test_a_value_with_an_end_inside_the_current_one_splits_it_and_what_follows_stays_current(app) -> None:
    stage(app, "signed", day(1))
    stage(app, "suspended", day(10), day(20))
    state = app.service.ontology(T)
    assert timeline(state) == [("signed", day(1), day(10), "invalidated"),
                               ("suspended", day(10), day(20), "invalidated"),
                               ("signed", day(20), None, "current")]
    assert holding(state, day(15)) == ["stage:suspended"]
    assert holding(state, day(25)) == ["stage:signed"]
    remainder = state.facts[state.functional_current[(K, "stage", "org")]]
    assert remainder.supersedes == next(f.fact_id for f in state.facts.values() if f.object == "stage:suspended")


def test_a_newer_value_starting_at_the_same_instant_leaves_the_older_one_holding_at_no_instant(app) -> None:
    stage(app, "draft", day(5))
    stage(app, "review", day(5))
    state = app.service.ontology(T)
    assert timeline(state) == [("draft", day(5), day(5), "invalidated"), ("review", day(5), None, "current")]
    assert holding(state, day(5)) == ["stage:review"]


def test_a_value_asserted_again_inside_its_past_interval_corroborates_that_fact(app) -> None:
    stage(app, "draft", day(1))
    stage(app, "signed", day(30))
    events = stage(app, "draft", day(3))
    assert [type(e) for e in events] == [FactCorroborated]
    assert len(timeline(app.service.ontology(T))) == 2


def test_as_of_a_transaction_time_before_an_insertion_the_old_timeline_is_what_was_believed(app, clock, tmp_path):
    stage(app, "draft", day(1))
    stage(app, "signed", day(30))
    before = clock.now
    clock.now += timedelta(hours=1)
    stage(app, "review", day(10))
    events = [logged.event for logged in app.log.read(0, 1_000_000)]
    assert holding(believed_at(T, events, before), day(15)) == ["stage:draft"]
    assert holding(believed_at(T, events), day(15)) == ["stage:review"]
    with Projector(app.log, tmp_path / "p.duckdb") as projector:
        projector.catch_up()
        sql = "SELECT object FROM facts_as_of($1, valid_at := $2) WHERE relation = 'stage'"
        assert projector.con.execute(sql, [before, day(15)]).fetchall() == [("stage:draft",)]
        assert projector.con.execute(sql, [clock.now, day(15)]).fetchall() == [("stage:review",)]
        assert projector.con.execute(sql, [clock.now, day(5)]).fetchall() == [("stage:draft",)]


def test_an_invalidation_naming_an_earlier_valid_to_corrects_an_ended_fact_also_on_the_wire(app) -> None:
    stage(app, "draft", day(1))
    stage(app, "signed", day(30))
    envelope = {"event_id": "fix-1", "tenant": T, "type": "fact.invalidated",
                "payload": {"subject": K, "relation": "stage", "object": "stage:draft",
                            "reason": "the draft was abandoned earlier", "valid_to": day(20).isoformat()}}
    result = Ingestor(app.service).ingest([json.dumps(envelope)])
    assert result.rejected == [] and result.stored_events == 1
    state = app.service.ontology(T)
    assert timeline(state) == [("draft", day(1), day(20), "invalidated"), ("signed", day(30), None, "current")]
    assert holding(state, day(25)) == []
    # the same end again is no correction: the fact is not current, and the rejection names a wire field
    again = Ingestor(app.service).ingest([json.dumps({**envelope, "event_id": "fix-2"})])
    assert [r.field for r in again.rejected] == ["payload.subject"]
    assert "not current" in again.rejected[0].reason and "earlier valid_to" in again.rejected[0].reason


def test_a_fact_corrected_on_the_wire_moves_its_interval_and_cuts_the_neighbour_it_reaches(app) -> None:
    stage(app, "draft", day(1))
    stage(app, "signed", day(30))
    envelope = {"event_id": "fix-3", "tenant": T, "type": "fact.corrected",
                "payload": {"subject": K, "relation": "stage", "object": "stage:signed",
                            "reason": "signed earlier than we thought", "valid_from": day(12).isoformat()}}
    result = Ingestor(app.service).ingest([json.dumps(envelope)])
    assert result.rejected == []
    assert timeline(app.service.ontology(T)) == [("draft", day(1), day(12), "invalidated"),
                                                 ("signed", day(12), None, "current")]
    with pytest.raises(WireError) as refused:
        parse_envelope({**envelope, "payload": {k: v for k, v in envelope["payload"].items() if k != "valid_from"}})
    assert refused.value.field == "payload"


def test_an_invalidation_with_a_later_valid_to_than_the_facts_own_is_cut_back(app) -> None:
    stage(app, "suspended", day(1), day(10))
    events = app.service.execute(c.InvalidateFact(tenant=T, subject=K, relation="stage", object="stage:suspended",
                                                  reason="lifted", valid_to=day(40))).events
    assert [(type(e), e.valid_to) for e in events] == [(FactInvalidated, day(10))]


def test_promotion_supersedes_the_org_value_of_a_functional_relation(app, tmp_path) -> None:
    app.service.execute(c.AssertFact(tenant=T, subject="ticket:t", relation="status", object="status:open",
                                     valid_from=day(1)))
    for person in ("person:a", "person:b", "person:c"):
        app.service.execute(c.AssertFact(tenant=T, subject="ticket:t", relation="status", object="status:done",
                                         scope=person, valid_from=day(40)))
    state = app.service.ontology(T)
    assert timeline(state, "ticket:t", "status") == [("open", day(1), day(40), "invalidated"),
                                                     ("done", day(40), None, "current")]
    with Projector(app.log, tmp_path / "p.duckdb") as projector:
        projector.catch_up()
        current = projector.con.execute("SELECT object FROM facts_as_of(now()) WHERE scope = 'org'"
                                        " AND subject = 'ticket:t' AND relation = 'status'").fetchall()
        assert current == [("status:done",)]


def test_approving_an_older_value_for_the_org_inserts_it_before_the_org_value_it_does_not_replace(app) -> None:
    app.service.execute(c.AssertFact(tenant=T, subject="ticket:t", relation="status", object="status:done",
                                     valid_from=day(40)))
    episodic = app.service.execute(c.AssertFact(tenant=T, subject="ticket:t", relation="status",
                                                object="status:open", scope="person:a", valid_from=day(1)))
    app.service.execute(c.PromoteFact(tenant=T, fact_id=episodic.events[0].fact_id, approved_by="lead"))
    assert timeline(app.service.ontology(T), "ticket:t", "status") == [("open", day(1), day(40), "invalidated"),
                                                                       ("done", day(40), None, "current")]


def test_corroboration_keeps_each_sources_valid_range_in_the_history_and_fact_changes(app, tmp_path) -> None:
    stage(app, "signed", day(10), source=c.Source(actor="crm"))
    events = stage(app, "signed", day(12), day(50), source=c.Source(actor="mail"))
    assert [(type(e), e.valid_from, e.valid_to) for e in events] == [(FactCorroborated, day(12), day(50))]
    fact = next(iter(app.service.ontology(T).facts.values()))
    assert isinstance(fact, FactState)
    assert fact.ranges == [(day(10), None), (day(12), day(50))]
    assert (fact.valid_from, fact.valid_to) == (day(10), None)  # the first source's range; others never move it
    with Projector(app.log, tmp_path / "p.duckdb") as projector:
        projector.catch_up()
        rows = projector.con.execute("SELECT change, actor, valid_from, valid_to FROM fact_changes"
                                     " WHERE fact_id = ? ORDER BY position", [fact.fact_id]).fetchall()
    assert rows == [("asserted", "crm", day(10), None), ("corroborated", "mail", day(12), day(50))]


def test_a_corroboration_stored_as_v1_before_ranges_were_recorded_still_reads(app) -> None:
    cls, version = event_class_for("fact.corroborated.v1")
    old = {"tenant": T, "recorded_at": day(1).isoformat(), "fact_id": "f" * 32, "previous_confidence": 0.8,
           "confidence": 0.96, "provenance": {"actor": "crm"}}
    assert (cls, version) == (FactCorroborated, 1) and FactCorroborated.version == 2
    event = cls.model_validate(upcast(cls.topic, version, old))
    assert isinstance(event, FactCorroborated) and (event.valid_from, event.valid_to) == (None, None)
    assert event_class_for("fact.corrected.v1")[0] is FactCorrected


@pytest.mark.parametrize("when", ["0001-01-01T00:00:00+08:00", "9999-12-31T23:00:00-05:00", "0999-12-31T23:59:59Z",
                                  "9000-01-01T00:00:00Z"])
def test_far_dates_are_refused_naming_the_field(app, when: str) -> None:
    with pytest.raises(ValidationError) as refused:
        c.AssertFact(tenant=T, subject=K, relation="stage", object="stage:draft", valid_from=when)
    assert refused.value.errors()[0]["loc"] == ("valid_from",)
    with pytest.raises(ValidationError):
        c.InvalidateFact(tenant=T, fact_id="x", reason="r", valid_to=when)
    envelope = {"event_id": "far", "tenant": T, "type": "fact.asserted", "occurred_at": when,
                "payload": {"subject": K, "relation": "stage", "object": "stage:draft"}}
    with pytest.raises(WireError) as wire:
        parse_envelope(envelope)
    assert wire.value.field == "occurred_at"
    envelope = {**envelope, "occurred_at": None, "payload": {**envelope["payload"], "valid_to": when}}
    with pytest.raises(WireError) as wire:
        parse_envelope(envelope)
    assert wire.value.field == "payload.valid_to"


def test_a_valid_to_before_the_default_start_is_refused_naming_valid_to(app) -> None:
    with pytest.raises(InvalidInput) as refused:
        stage(app, "draft", valid_to=day(5), occurred_at=day(9))
    assert refused.value.field == "valid_to" and "occurred_at" in refused.value.message


def test_an_archived_value_is_not_restored_once_its_timeline_moved_on(app) -> None:
    draft = stage(app, "draft", day(1))[0]
    app.service.execute(c.ArchiveFact(tenant=T, fact_id=draft.fact_id, cause="disuse"))
    stage(app, "signed", day(30))
    with pytest.raises(InvalidInput) as refused:
        app.service.execute(c.RestoreFact(tenant=T, fact_id=draft.fact_id, cause="recalled"))
    assert refused.value.field == "fact_id" and "timeline moved on" in refused.value.message


def test_a_non_current_fact_named_by_key_is_rejected_naming_subject_not_fact_id(app) -> None:
    stage(app, "draft", day(1))
    stage(app, "signed", day(30))
    with pytest.raises(FactNotCurrent) as refused:
        app.service.execute(c.InvalidateFact(tenant=T, subject=K, relation="stage", object="stage:draft",
                                             reason="gone"))
    assert refused.value.field == "subject"


def test_the_state_rebuilt_from_the_log_has_the_same_timeline(app) -> None:
    stage(app, "signed", day(1))
    stage(app, "suspended", day(10), day(20))
    stage(app, "review", day(5))
    app.service.execute(c.CorrectFact(tenant=T, subject=K, relation="stage", object="stage:suspended",
                                      reason="longer", valid_to=day(25)))
    rebuilt = OntologyService(app.log, clock=lambda: datetime.now(UTC)).ontology(T)
    assert timeline(rebuilt) == timeline(app.service.ontology(T)) == [
        ("signed", day(1), day(5), "invalidated"), ("review", day(5), day(10), "invalidated"),
        ("suspended", day(10), day(25), "invalidated"), ("signed", day(25), None, "current")]


def test_a_log_holding_a_v1_corroboration_still_folds_and_projects(app, tmp_path) -> None:
    import sqlite3

    stage(app, "signed", day(10))
    stage(app, "signed", day(12))
    home = app.settings.home
    db = sqlite3.connect(home / "events.sqlite")
    try:
        (rowid, state), = db.execute("SELECT rowid, state FROM stored_events WHERE topic = 'fact.corroborated.v2'")
        payload = json.loads(state)
        assert payload.pop("valid_from") and "valid_to" in payload
        payload.pop("valid_to")
        db.execute("UPDATE stored_events SET topic = 'fact.corroborated.v1', state = ? WHERE rowid = ?",
                   [json.dumps(payload).encode(), rowid])
        db.commit()
    finally:
        db.close()
    fact = next(iter(OntologyService(app.log, clock=lambda: day(200)).ontology(T).facts.values()))
    assert fact.ranges == [(day(10), None), (None, None)] and len(fact.provenance) == 2
    with Projector(app.log, tmp_path / "p.duckdb") as projector:
        projector.catch_up()
        assert projector.con.execute("SELECT change, valid_from FROM fact_changes ORDER BY position").fetchall() \
            == [("asserted", day(10)), ("corroborated", None)]


def test_a_correction_that_splits_a_value_of_the_same_key_gives_its_remainder_an_id_no_later_fact_takes(app) -> None:
    """A corrected fact moved inside a later value of its own key splits it; the remainder is a new fact. It was
    numbered as if the corrected fact had been asserted anew, so the next assertion of that key took the same
    id and overwrote it (seen as a projection that differed from its rebuild, depending on batch boundaries)."""
    first = stage(app, "draft", day(1), day(2))[-1].fact_id
    stage(app, "review", day(2), day(3))
    stage(app, "draft", day(3))  # the draft again: a second fact of the same key
    corrected = app.service.execute(c.CorrectFact(tenant=T, fact_id=first, reason="moved", valid_from=day(5),
                                                  valid_to=day(6))).events
    (remainder,) = [e for e in corrected if type(e).__name__ == "FactAsserted"]
    assert (remainder.valid_from, remainder.valid_to) == (day(6), None)
    state = app.service.ontology(T)
    for fact in [f for f in state.facts.values() if f.object == "stage:draft" and f.status is FactStatus.CURRENT]:
        app.service.execute(c.InvalidateFact(tenant=T, fact_id=fact.fact_id, reason="no draft any more"))
    again = stage(app, "draft", day(-10), day(-5))[-1]  # asserted anew: no draft is current

    asserted = [x.event.fact_id for x in app.log.read(0, 10_000) if type(x.event).__name__ == "FactAsserted"]
    assert len(asserted) == len(set(asserted)) == 5
    assert again.fact_id != remainder.fact_id
    assert app.service.ontology(T).facts[remainder.fact_id].valid_from == day(6)  # not overwritten
