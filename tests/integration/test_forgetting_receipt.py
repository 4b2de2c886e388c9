"""A forget answers with its receipt (keys, events affected, files rewritten, an id recorded in the log), a
forgotten person is closed to writes until registered anew, and import rejects files lose the lines attributable
to the forgotten subject. (`noumena forget` printing the receipt: tests/e2e/test_forget_cli.py.)"""

from __future__ import annotations

import json

import pytest

from consumers.file_import import import_file, rejects_path_for
from domain import commands as c
from domain.errors import SubjectWasForgotten
from domain.forgetting import SubjectForgotten
from infra.bootstrap import serve
from projections.purge import forgotten_positions
from tests.conftest import TickingClock

T = "acme"


def _plant(noumena) -> None:  # type: ignore[no-untyped-def]
    run = noumena.service.execute
    run(c.CreateTenant(tenant=T))
    for ref in ("person:x", "person:y", "agent:a", "file:doc"):
        run(c.RegisterEntity(tenant=T, ref=ref, label=f"label of {ref}"))
    run(c.StartSession(tenant=T, session_id="s-x", agent="agent:a", serving="person:x"))
    run(c.AppendMessage(tenant=T, session_id="s-x", message_id="m1", role="user", content="hello"))
    for n in range(3):
        run(c.AssertFact(tenant=T, subject="person:x", relation=f"r{n}", object="file:doc", reason=f"why {n}",
                         scope="person:x"))
    run(c.AssertFact(tenant=T, subject="person:y", relation="r", object="file:doc", reason="y's", scope="person:y"))


def test_the_receipt_names_what_was_erased_and_its_id_is_in_the_log(make_noumena, backend):
    noumena = make_noumena(backend, clock=TickingClock())
    _plant(noumena)
    report = noumena.application.forgetting.forget(T, "person:x").receipt
    assert report.receipt_id.startswith("fgt-") and report.keys_deleted >= 2
    # the entity label, the message and three reasons were sealed with the deleted keys
    assert report.events_affected == 5
    assert report.erased_with == ("session:s-x",)
    assert {line.split(":")[0] for line in report.files_rewritten} >= {"evidence", "import rejects"}
    (event,) = [x.event for x in noumena.log.read(0, 10_000) if isinstance(x.event, SubjectForgotten)]
    assert (event.receipt_id, event.subject, event.keys_deleted, event.erased_with) == (
        report.receipt_id, "person:x", report.keys_deleted, ("session:s-x",))
    assert event.recorded_at == report.recorded_at


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_a_serving_process_finds_the_events_affected_by_key_name_and_its_projector_searches_nothing(
        make_noumena, store):
    """A process serving requests counts and finds the events the deleted keys sealed by their key names, in the
    store (SQL: no event is opened in the process other tenants' requests need), and hands their positions to its
    projector, which blanks them in the live read model without searching the log: they are exactly the events
    that now read `[forgotten]`."""
    noumena = make_noumena(store, clock=TickingClock())
    _plant(noumena)
    served = serve(noumena, kafka=False)
    try:
        report = served.application.forgetting.forget(T, "person:x").receipt
        assert served.follower is not None and served.follower.searches == 0
    finally:
        served.stop()
    assert report.events_affected == 5 and report.keys_deleted >= 2
    count, positions = noumena.log.sealed_with(noumena.log.keys.deleted, tenant=T, positions=True)
    assert count == 5 and positions == forgotten_positions(noumena.log, noumena.log.max_position())
    assert noumena.log.count_sealed_with(noumena.log.keys.deleted, tenant=T) == 5


def test_a_forgotten_person_cannot_be_written_about_until_registered_anew(make_noumena, backend):
    noumena = make_noumena(backend)
    _plant(noumena)
    report = noumena.application.forgetting.forget(T, "person:x").receipt
    run = noumena.service.execute
    for command, field in ((c.AssertFact(tenant=T, subject="agent:a", relation="knows", object="person:x"), "object"),
                           (c.AssertFact(tenant=T, subject="agent:a", relation="r", object="file:doc",
                                         scope="person:x"), "scope"),
                           (c.StartSession(tenant=T, session_id="s-x2", agent="agent:a", serving="person:x"),
                            "serving"),
                           (c.AppendMessage(tenant=T, session_id="s-x", message_id="m2", role="user",
                                            content="more"), "session_id")):
        with pytest.raises(SubjectWasForgotten, match=f"person:x was forgotten \\(forget receipt "
                                                      f"{report.receipt_id}\\)") as raised:
            run(command)
        assert raised.value.field == field
    run(c.AssertFact(tenant=T, subject="agent:a", relation="knows", object="person:y"))  # others are open
    run(c.RegisterEntity(tenant=T, ref="person:x", label="X, registered anew"))
    run(c.AssertFact(tenant=T, subject="agent:a", relation="knows", object="person:x", reason="new"))
    fact = [f for f in noumena.service.ontology(T).facts.values() if f.object == "person:x"]
    assert [f.reason for f in fact] == ["new"]


def test_forgetting_redacts_the_rejected_lines_that_name_the_subject_in_every_rejects_file(make_noumena, tmp_path):
    noumena = make_noumena("sqlite")
    _plant(noumena)
    source = tmp_path / "input.jsonl"
    lines = [
        {"event_id": "e1", "tenant": T, "type": "fact.asserted",
         "payload": {"subject": "person:x", "relation": "likes", "object": "file:nope", "reason": "MARKER-X-1"}},
        {"event_id": "e2", "tenant": T, "type": "message.appended",
         "payload": {"session_id": "s-x", "message_id": "m9", "role": "bogus", "content": "MARKER-X-2"}},
        {"event_id": "e3", "tenant": T, "type": "fact.asserted",
         "payload": {"subject": "person:y", "relation": "likes", "object": "file:nope", "reason": "KEEP-Y"}},
        {"event_id": "e4", "tenant": "other", "type": "fact.asserted",
         "payload": {"subject": "person:x", "relation": "likes", "object": "file:nope", "reason": "KEEP-OTHER"}},
    ]
    source.write_text("".join(json.dumps(line) + "\n" for line in lines))
    report = import_file(source, noumena.application.ingestor, home=noumena.settings.home)
    assert report.rejected == 4
    rejects = rejects_path_for(source)
    assert b"MARKER-X-1" in rejects.read_bytes() and b"MARKER-X-2" in rejects.read_bytes()
    receipt = noumena.application.forgetting.forget(T, "person:x").receipt
    assert "import rejects: 1" in receipt.files_rewritten
    data = rejects.read_bytes()
    assert b"MARKER-X" not in data and b"KEEP-Y" in data and b"KEEP-OTHER" in data
    rows = [json.loads(line) for line in data.splitlines()]
    assert [r["line"] for r in rows] == [1, 2, 3, 4] and [r["input"] for r in rows][:2] == ["[forgotten]"] * 2


def test_the_store_counts_events_per_key_name_as_reading_each_events_header_does(make_noumena, backend):
    from infra.adapters.keys.derivation import derived_name
    from infra.adapters.sealed_format import read_sealed

    noumena = make_noumena(backend, clock=TickingClock())
    _plant(noumena)
    noumena.service.execute(c.CreateTenant(tenant="other"))
    noumena.service.execute(c.RegisterEntity(tenant="other", ref="person:z", label="z's label"))
    noumena.application.forgetting.forget(T, "person:y")
    by_header: dict[str | None, dict[str, int]] = {None: {}, T: {}, "other": {}}
    for logged in noumena.log.recorder.select_notifications(start=0, limit=10_000):
        if 0 in logged.state:
            name = read_sealed(logged.state).key_name
            for where in (None, logged.originator_id.removeprefix("tenant:")):
                by_header[where][name] = by_header[where].get(name, 0) + 1
    assert len(by_header[T]) >= 3 and by_header["other"]
    for tenant, expected in by_header.items():
        assert noumena.log.key_name_counts(tenant) == expected
    # the receipt's rule, event by event: sealed with a deleted key, or with a member of a deleted group key
    # whose own key was not kept
    deleted, keys = set(getattr(noumena.log.keys, "deleted", ())), noumena.log.keys
    affected = sum(count for name, count in by_header[T].items() if name in deleted or (
        (member := derived_name(name)) is not None and member[1] in deleted and keys.get(name) is None))
    assert noumena.log.count_sealed_with(deleted, tenant=T) == affected > 0
