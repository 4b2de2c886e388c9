"""What `forget person:Z` erases, and what it keeps, as one rule (docs/forgetting.md): nothing more is written into
Z's erased sessions (late consolidations included); in an org fact between two people each party's own words are
sealed for that party; labels of things created in Z's sessions or linked only to Z go with Z. On SQLite and
PostgreSQL."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

import pytest
from eventsourcing.persistence import StoredEvent

from domain import commands as c
from domain.application.consolidation import consolidate
from domain.application.ontology_service import OntologyService
from domain.consolidation import CompactionInput, ExtractedFact, ExtractedMention, Extraction
from domain.entities import EntityRegistered
from domain.errors import SubjectWasForgotten
from domain.facts import FactAsserted, FactCorroborated
from domain.forgetting import FORGOTTEN, SubjectForgotten, fact_key
from domain.ports import Pending
from domain.values import Provenance
from infra.adapters import event_json
from infra.adapters.mapper import stream_id
from infra.bootstrap import Noumena
from tests.conftest import TickingClock

T = "acme"
STORES = ["sqlite", "postgres"]


def _people(service: OntologyService) -> None:
    run = service.execute
    run(c.CreateTenant(tenant=T))
    for ref, label in (("person:y", "Y"), ("person:z", "Zed MARKER-Z-NAME"), ("agent:a", "agent A"),
                       ("file:doc", "a doc")):
        run(c.RegisterEntity(tenant=T, ref=ref, label=label))
    run(c.StartSession(tenant=T, session_id="s-z", agent="agent:a", serving="person:z"))
    run(c.DispatchWorker(tenant=T, session_id="s-z", worker_session_id="w-z", task="look it up"))
    run(c.StartSession(tenant=T, session_id="s-y", agent="agent:a", serving="person:y"))


def _fresh(noumena: Noumena) -> OntologyService:
    """The log read back by a new service: what any process would fold, not a cache."""
    return OntologyService(noumena.log, clock=TickingClock())


# ---------------------------------------------------------------- nothing is written into Z's sessions any more


@pytest.mark.parametrize("store", STORES)
def test_after_forgetting_a_person_every_write_into_their_sessions_is_refused(make_noumena, store):
    noumena = make_noumena(store)
    service = noumena.service
    _people(service)
    service.execute(c.AssertFact(tenant=T, subject="person:z", relation="reads", object="file:doc",
                                 scope="person:z", reason="MARKER-Z-EPISODIC"))
    (episodic,) = service.ontology(T).facts
    noumena.application.forgetting.forget(T, "person:z")
    late = {
        "scope": c.AssertFact(tenant=T, subject="agent:a", relation="reads", object="file:doc",
                              reason="MARKER-Z-LATE-SCOPED", scope="session:s-z"),
        "scope ": c.AssertFact(tenant=T, subject="agent:a", relation="reads", object="file:doc",
                               reason="MARKER-Z-LATE-WORKER-SCOPED", scope="session:w-z"),
        "source.session_id": c.AssertFact(tenant=T, subject="agent:a", relation="reads", object="file:doc",
                                          reason="MARKER-Z-LATE-DRAWN", scope="org",
                                          source=c.Source(session_id="s-z", message_ids=("m1",))),
        "session_id": c.AppendMessage(tenant=T, session_id="w-z", message_id="m9", role="user",
                                      content="MARKER-Z-LATE-MESSAGE"),
        "parent_session_id": c.StartSession(tenant=T, session_id="w-late", agent="agent:a", kind="worker",
                                            parent_session_id="s-z", task="MARKER-Z-LATE-TASK"),
    }
    for field, command in late.items():
        with pytest.raises(SubjectWasForgotten) as refused:
            service.execute(command)
        assert refused.value.field == field.strip() and refused.value.ref == "person:z"
    with pytest.raises(SubjectWasForgotten) as refused:  # nor is an episodic fact about them promoted
        service.execute(c.PromoteFact(tenant=T, fact_id=episodic, approved_by="person:admin"))
    assert refused.value.field == "fact_id"
    # the same writes into Y's sessions pass: the rule is about the forgotten person's sessions only
    service.execute(c.AssertFact(tenant=T, subject="agent:a", relation="reads", object="file:doc",
                                 reason="KEEP-Y-SCOPED", scope="session:s-y"))
    reasons = {f.reason for f in _fresh(noumena).ontology(T).facts.values()}
    assert reasons == {"KEEP-Y-SCOPED", FORGOTTEN}
    # registered anew, the person (and the sessions that served them) are open again, with new keys
    service.execute(c.RegisterEntity(tenant=T, ref="person:z", label="Zed again"))
    service.execute(c.AssertFact(tenant=T, subject="agent:a", relation="reads", object="file:doc",
                                 reason="NEW-Z-SCOPED", scope="session:s-z"))
    assert "NEW-Z-SCOPED" in {f.reason for f in _fresh(noumena).ontology(T).facts.values()}


class _HeldExtractor:
    """A real extractor's shape (domain.consolidation.Extractor) that waits, mid-extraction, until the test lets
    it go: the forget happens while it runs."""

    name = "held"

    def __init__(self) -> None:
        self.started, self.go = threading.Event(), threading.Event()

    def extract(self, work: CompactionInput) -> Extraction:
        self.started.set()
        assert self.go.wait(30)
        return Extraction(
            mentions=[ExtractedMention(ref="ticket:z-1", label="MARKER-Z-TICKET damaged goods")],
            facts=[ExtractedFact(subject="agent:a", relation="handles", object="ticket:z-1",
                                 reason="MARKER-Z-CONSOLIDATED said in the call", scope="org")],
            explicit=True)


@pytest.mark.parametrize("store", STORES)
def test_a_consolidation_started_before_the_forget_writes_nothing_after_it(make_noumena, store):
    noumena = make_noumena(store)
    service = noumena.service
    _people(service)
    service.execute(c.AppendMessage(tenant=T, session_id="s-z", message_id="m1", role="user",
                                    content="MARKER-Z-MESSAGE my parcel arrived broken"))
    service.execute(c.CompactSession(tenant=T, session_id="s-z", through_message_id="m1", summary="a call"))
    (compaction,) = service.ontology(T).compactions
    extractor = _HeldExtractor()
    outcome: list[BaseException | object] = []

    def run() -> None:
        try:
            outcome.append(consolidate(service, T, compaction, extractor))
        except BaseException as error:  # noqa: BLE001 (handed to the test's thread)
            outcome.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    assert extractor.started.wait(30)
    noumena.application.forgetting.forget(T, "person:z")
    extractor.go.set()
    thread.join(30)
    assert isinstance(outcome[0], SubjectWasForgotten) and outcome[0].field == "compaction_id"
    events = [x.event for x in noumena.log.read(0, 10_000)]
    assert isinstance(events[-1], SubjectForgotten), events[-1]  # nothing was written after the forget
    state = _fresh(noumena).ontology(T)
    assert "ticket:z-1" not in state.entities and not state.facts
    assert noumena.consolidation.run_pending(T) == []  # and the erased compaction is no longer pending


# ---------------------------------------------------------------- each party's own words in an org fact


def _knows(noumena: Noumena) -> str:
    """`person:y knows person:z`, an org fact: asserted from Y's session in Y's words, corroborated from Z's in
    Z's, invalidated by an agent quoting no one."""
    run = noumena.service.execute
    run(c.AssertFact(tenant=T, subject="person:y", relation="knows", object="person:z", scope="org",
                     reason="KEEP-Y-WORDS we met at the fair", source=c.Source(session_id="s-y")))
    run(c.AssertFact(tenant=T, subject="person:y", relation="knows", object="person:z", scope="org",
                     reason="MARKER-Z-WORDS Y is my neighbour", source=c.Source(session_id="w-z")))
    run(c.AssertFact(tenant=T, subject="person:z", relation="trusts", object="person:y", scope="org",
                     reason="MARKER-Z-ACTOR-WORDS", source=c.Source(actor="person:z")))
    run(c.AssertFact(tenant=T, subject="person:y", relation="met", object="person:z", scope="org",
                     reason="MARKER-UNATTRIBUTED-WORDS"))
    (fact,) = [f.fact_id for f in noumena.service.ontology(T).facts.values() if f.relation == "knows"
               and f.subject == "person:y"]
    return fact


def _reasons(noumena: Noumena) -> dict[str, tuple[str, ...]]:
    """Every fact's reasons in the log (its assertion's, then its corroborations'), as they read now."""
    found: dict[str, tuple[str, ...]] = {}
    for x in noumena.log.read(0, 10_000):
        event = x.event
        if isinstance(event, FactAsserted | FactCorroborated) and event.reason is not None:
            found[event.fact_id] = found.get(event.fact_id, ()) + (event.reason,)
    return found


@pytest.mark.parametrize("store", STORES)
def test_forgetting_one_party_of_an_org_fact_keeps_the_other_partys_own_words(make_noumena, store):
    noumena = make_noumena(store)
    _people(noumena.service)
    _knows(noumena)
    texts = lambda: [r for reasons in _reasons(noumena).values() for r in reasons]  # noqa: E731
    assert {"KEEP-Y-WORDS we met at the fair", "MARKER-Z-WORDS Y is my neighbour"} <= set(texts())
    noumena.application.forgetting.forget(T, "person:z")
    after = texts()
    assert "KEEP-Y-WORDS we met at the fair" in after  # Y's own words about knowing Z stay
    assert not [r for r in after if "MARKER" in r], after  # Z's go, and words no one can be named for go too
    assert after.count(FORGOTTEN) == 3
    state = _fresh(noumena).ontology(T)
    assert state.entities["person:z"].label == FORGOTTEN and state.entities["person:y"].label == "Y"
    # forgetting Y as well erases Y's words
    noumena.application.forgetting.forget(T, "person:y")
    assert set(texts()) == {FORGOTTEN}


@pytest.mark.parametrize("store", STORES)
def test_forgetting_the_author_or_the_fact_erases_the_authors_words(make_noumena, store):
    noumena = make_noumena(store)
    _people(noumena.service)
    fact = _knows(noumena)
    noumena.application.forgetting.forget(T, "person:y")
    reasons = _reasons(noumena)[fact]
    assert reasons == (FORGOTTEN, "MARKER-Z-WORDS Y is my neighbour")  # Y's go with Y, Z's stay
    again = make_noumena(store, home=noumena.settings.home.parent / "again")
    _people(again.service)
    fact = _knows(again)
    again.application.forgetting.forget(T, f"fact:{fact}")  # forgetting the fact erases every party's words in it
    assert _reasons(again)[fact] == (FORGOTTEN, FORGOTTEN)
    others = [r for f, rs in _reasons(again).items() if f != fact for r in rs]
    assert "MARKER-Z-ACTOR-WORDS" in others and "MARKER-UNATTRIBUTED-WORDS" in others


# ---------------------------------------------------------------- labels that are the forgotten person's words


class _TicketExtractor:
    """An extractor's shape (domain.consolidation.Extractor): finds a ticket in the conversation."""

    name = "tickets"

    def extract(self, work: CompactionInput) -> Extraction:
        return Extraction(
            mentions=[ExtractedMention(ref="ticket:z-1", label="Zed: MARKER-Z-TICKET damaged goods, private "
                                                                "address change")],
            facts=[ExtractedFact(subject="agent:a", relation="handles", object="ticket:z-1", reason="from the call",
                                 scope="org")])


@pytest.mark.parametrize("store", STORES)
def test_labels_of_things_created_in_a_persons_sessions_or_linked_only_to_them_go_with_them(make_noumena, store):
    noumena = make_noumena(store)
    service = noumena.service
    run = service.execute
    _people(service)
    run(c.AppendMessage(tenant=T, session_id="s-z", message_id="m1", role="user", content="my parcel is broken"))
    run(c.CompactSession(tenant=T, session_id="s-z", through_message_id="m1", summary="a call"))
    (compaction,) = service.ontology(T).compactions
    consolidate(service, T, compaction, _TicketExtractor())
    for ref, label in (("ticket:z-2", "MARKER-Z-SECOND-TICKET refund"), ("ticket:shared", "KEEP-SHARED-TICKET"),
                       ("file:z-notes", "MARKER-Z-NOTES"), ("ticket:nobodys", "KEEP-NOBODYS-TICKET")):
        run(c.RegisterEntity(tenant=T, ref=ref, label=label, aliases=(label + " alias",)))
    run(c.AssertFact(tenant=T, subject="person:z", relation="opened", object="ticket:z-2", scope="org"))
    run(c.AssertFact(tenant=T, subject="agent:a", relation="wrote", object="file:z-notes", scope="org",
                     source=c.Source(session_id="w-z")))  # linked to Z by the session it was drawn from
    run(c.AssertFact(tenant=T, subject="person:z", relation="opened", object="ticket:shared", scope="org"))
    run(c.AssertFact(tenant=T, subject="agent:a", relation="handles", object="ticket:shared", scope="person:y"))
    state = service.ontology(T)
    assert state.entities["ticket:z-1"].label.startswith("Zed: MARKER-Z-TICKET")
    noumena.application.forgetting.forget(T, "person:z")
    entities = _fresh(noumena).ontology(T).entities
    for ref in ("ticket:z-1", "ticket:z-2", "file:z-notes"):
        assert (entities[ref].label, entities[ref].aliases) == (FORGOTTEN, ()), ref
    assert entities["ticket:shared"].label == "KEEP-SHARED-TICKET"  # linked to Y too: Y still knows it by name
    assert entities["ticket:nobodys"].label == "KEEP-NOBODYS-TICKET"
    assert entities["agent:a"].label == "agent A" and entities["file:doc"].label == "a doc"
    stored = b"".join(x.state for x in noumena.log.recorder.select_events(stream_id(T)))  # type: ignore[attr-defined]
    assert b"MARKER" not in stored and b"KEEP-SHARED-TICKET" not in stored  # every such label is sealed


@pytest.mark.parametrize("store", STORES)
def test_forgetting_a_session_erases_the_labels_of_what_was_named_in_it(make_noumena, store):
    noumena = make_noumena(store)
    service = noumena.service
    _people(service)
    service.execute(c.RegisterEntity(tenant=T, ref="ticket:w-1", label="MARKER-W-TICKET", session_id="w-z"))
    service.execute(c.RegisterEntity(tenant=T, ref="person:named", label="KEEP-A-PERSON-NAMED", session_id="w-z"))
    wired = noumena.application.ingestor.ingest([{  # the wire format says where a producer named it too
        "event_id": "e-ticket", "tenant": T, "type": "entity.registered",
        "payload": {"ref": "ticket:wired", "label": "MARKER-WIRED-TICKET", "session_id": "s-z"}}],
        all_or_nothing=True)
    assert wired.rejected == [] and wired.accepted == 1, wired.rejected
    noumena.application.forgetting.forget(T, "session:s-z")  # takes its worker w-z along
    entities = _fresh(noumena).ontology(T).entities
    assert entities["ticket:w-1"].label == FORGOTTEN and entities["ticket:wired"].label == FORGOTTEN
    assert entities["person:named"].label == "KEEP-A-PERSON-NAMED"  # a person's name is theirs, never a session's
    assert entities["person:z"].label == "Zed MARKER-Z-NAME"


# ---------------------------------------------------------------- logs written before these rules


@pytest.mark.parametrize("store", STORES)
def test_a_log_written_before_these_rules_reads_and_forgets_as_it_was_written(make_noumena, store):
    """Events stored by earlier versions: an entity registration without `session_id` whose ticket label is in
    the clear, and Y's reason in `person:y knows person:z` sealed under the key both people owned. They read as
    written; a forget of Z erases that reason (its key was Z's too) and cannot reach the label (it was never
    sealed); what is written from now on follows the new rules beside them."""
    noumena = make_noumena(store)
    _people(noumena.service)
    version = noumena.service.ontology(T).version
    old_ticket = EntityRegistered(tenant=T, recorded_at=datetime(2026, 9, 1, tzinfo=UTC), ref="ticket:old",
                                  label="OLD-CLEAR-TICKET")
    noumena.log.recorder.insert_events([StoredEvent(  # type: ignore[attr-defined]
        originator_id=stream_id(T), originator_version=version + 1, topic=event_json.topic_of(old_ticket),
        state=event_json.encode(old_ticket, without={"session_id"}))])  # (the shape of an earlier version)
    fact_id = "0" * 32
    old_fact = FactAsserted(tenant=T, recorded_at=datetime(2026, 9, 1, tzinfo=UTC), fact_id=fact_id,
                            subject="person:y", relation="knows", object="person:z", scope="org",
                            reason="OLD-Y-WORDS", confidence=0.7, provenance=Provenance(session_id="s-y"))
    noumena.log.append([Pending(T, version + 2, old_fact, fact_key(T, fact_id, "org", "person:y", "person:z"))])
    noumena.service.reload(T)
    state = _fresh(noumena).ontology(T)
    assert state.entities["ticket:old"].label == "OLD-CLEAR-TICKET" and state.facts[fact_id].reason == "OLD-Y-WORDS"
    noumena.service.execute(c.AssertFact(tenant=T, subject="person:y", relation="knows", object="person:z",
                                         scope="org", reason="NEW-Y-WORDS", source=c.Source(session_id="s-y")))
    noumena.application.forgetting.forget(T, "person:z")
    assert _reasons(noumena)[fact_id] == (FORGOTTEN, "NEW-Y-WORDS")  # the old rule for the old event, the new
    assert _fresh(noumena).ontology(T).entities["ticket:old"].label == "OLD-CLEAR-TICKET"  # for the new one
