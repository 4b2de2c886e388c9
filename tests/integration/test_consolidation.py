"""Consolidation ("sleep"), memory tiers, and worker sessions as relations."""

from __future__ import annotations

from datetime import timedelta

from domain import commands as c
from domain.application.consolidation import consolidate
from domain.application.disuse import archive_disused
from domain.application.entities import merge_entities
from domain.application.recall import MemoryTier, recall
from domain.consolidation import ConsolidationCompleted, ConsolidationFailed, ConsolidationStatus
from domain.facts import FactAsserted, FactPromoted, FactStatus
from domain.sessions import workers_for
from infra.adapters.llm_extractor import LLMExtractor
from projections.ontology_as_of import believed_at
from tests.conftest import TickingClock
from tests.llm_standin import RecordedChatCompletionsServer

T = "acme"


def _org(n) -> None:  # type: ignore[no-untyped-def]
    n.service.execute(c.CreateTenant(tenant=T))
    for ref, label in [("agent:wang-assistant", "Wang's agent"), ("person:wang", "王总"), ("person:li", "李总"),
                       ("memory:monthly", "Li prefers monthly settlement"), ("file:q3", "Q3 quote"),
                       ("memory:fx", "the quote failed because of the exchange rate")]:
        n.service.execute(c.RegisterEntity(tenant=T, ref=ref, label=label))
    n.service.execute(c.StartSession(tenant=T, session_id="wang-main", agent="agent:wang-assistant",
                                     serving="person:wang"))


def _compacted(event_id: str, facts: list[dict], mentions: list[dict] | None = None, through: str = "m9",
               invalidations: list[dict] | None = None) -> dict:
    return {"event_id": event_id, "tenant": T, "type": "session.compacted",
            "payload": {"session_id": "wang-main", "through_message_id": through, "summary": "calls with Li",
                        "mentions": mentions or [], "facts": facts, "invalidations": invalidations or []}}


def test_a_compaction_arriving_by_ingestion_is_consolidated_in_the_background(make_noumena, backend):
    n = make_noumena(backend)
    _org(n)
    result = n.application.ingestor.ingest([_compacted("k1", [
        {"subject": "person:li", "relation": "prefers", "object": "memory:monthly",
         "reason": "said so on the third call", "source": {"message_ids": ["m7"]}},
        {"subject": "file:q3", "relation": "failed_because", "object": "memory:fx", "scope": "org"},
    ])])
    assert result.accepted == 1
    n.on_stored.drain(30)
    state = n.service.ontology(T)
    (compaction,) = state.compactions.values()
    assert compaction.status is ConsolidationStatus.COMPLETED
    assert compaction.counts["asserted"] == 2
    prefers = next(f for f in state.current_facts() if f.relation == "prefers")
    assert prefers.scope == "person:wang"  # extracted facts default to the person served (episodic)
    assert prefers.provenance[0].session_id == "wang-main" and prefers.provenance[0].message_ids == ("m7",)
    assert prefers.provenance[0].actor == "consolidation:structured"
    # a second compaction repeating the fact corroborates it
    n.application.ingestor.ingest([_compacted("k2", [{"subject": "person:li", "relation": "prefers",
                                            "object": "memory:monthly"}], through="m12")])
    n.on_stored.drain(30)
    state = n.service.ontology(T)
    assert state.compactions["wang-main#2"].counts["corroborated"] == 1
    assert len(state.facts[prefers.fact_id].provenance) == 2
    kinds = [type(x.event) for x in n.log.read(0, 10_000)]
    assert kinds.count(ConsolidationCompleted) == 2


def test_promotion_to_the_org_needs_three_independent_persons(make_noumena):
    n = make_noumena("sqlite")
    _org(n)
    for person in ("person:a", "person:b", "person:c"):
        n.service.execute(c.RegisterEntity(tenant=T, ref=person, label=person))
    assertions = [c.AssertFact(tenant=T, subject="person:li", relation="prefers", object="memory:monthly",
                               scope=p, confidence=0.6) for p in ("person:a", "person:b")]
    for assertion in assertions:
        n.service.execute(assertion)
    n.service.execute(assertions[0])  # the same person again is not independent
    assert not [f for f in n.service.ontology(T).current_facts() if f.scope == "org"]
    third = n.service.execute(c.AssertFact(tenant=T, subject="person:li", relation="prefers",
                                           object="memory:monthly", scope="person:c", confidence=0.6))
    kinds = [type(e) for e in third.events]
    assert kinds == [FactAsserted, FactAsserted, FactPromoted]
    promoted = third.events[2]
    assert len(promoted.source_fact_ids) == 3  # type: ignore[attr-defined]
    (org_fact,) = [f for f in n.service.ontology(T).current_facts() if f.scope == "org"]
    assert org_fact.confidence > 0.9 and org_fact.reason and "3 persons" in org_fact.reason


def test_a_session_fact_leaves_perspectives_at_session_end_but_stays_in_the_log(make_noumena):
    clock = TickingClock()
    n = make_noumena("sqlite", clock=clock)
    _org(n)
    n.service.execute(c.AssertFact(tenant=T, subject="person:li", relation="mentioned", object="file:q3",
                                   scope="session:wang-main"))
    during = clock.now
    n.service.execute(c.EndSession(tenant=T, session_id="wang-main"))
    state = n.service.ontology(T)
    (fact,) = [f for f in state.facts.values() if f.scope == "session:wang-main"]
    assert fact.status is FactStatus.ARCHIVED
    events = [x.event for x in n.log.read(0, 10_000)]
    assert believed_at(T, events, during).facts[fact.fact_id].status is FactStatus.CURRENT


def test_a_disused_fact_is_archived_and_a_deeper_recall_brings_it_back(make_noumena):
    clock = TickingClock()
    n = make_noumena("sqlite", clock=clock)
    _org(n)
    used = n.service.execute(c.AssertFact(tenant=T, subject="person:li", relation="prefers",
                                          object="memory:monthly", scope="person:wang")).events[0]
    n.service.execute(c.AssertFact(tenant=T, subject="file:q3", relation="failed_because",
                                   object="memory:fx", scope="person:wang", confidence=0.5))
    kept = n.service.execute(c.AssertFact(tenant=T, subject="person:li", relation="worried_about",
                                          object="memory:fx", scope="org", confidence=0.5)).events[0]
    for k in range(30):  # Wang's later sessions: his episodic memory ages in them, not in days
        clock.now += timedelta(days=10)
        n.service.execute(c.StartSession(tenant=T, session_id=f"later-{k}", agent="agent:wang-assistant",
                                         serving="person:wang"))
    clock.now += timedelta(days=100)
    n.service.execute(c.RecordRecall(tenant=T, agent="agent:wang-assistant", fact_ids=(used.fact_id,),
                                     mode="used"))
    archived = archive_disused(n.service, T, clock.now, timedelta(days=30))
    state = n.service.ontology(T)
    (gone,) = [state.facts[i] for i in archived]
    assert gone.relation == "failed_because" and gone.status is FactStatus.ARCHIVED
    assert state.facts[used.fact_id].status is FactStatus.CURRENT  # recently used: kept
    assert state.facts[kept.fact_id].status is FactStatus.CURRENT  # org: never archived by disuse
    assert recall(n.service, T, "agent:wang-assistant", "person:wang", "file:q3").tier is None
    answer = recall(n.service, T, "agent:wang-assistant", "person:wang", "file:q3", deeper=True)
    assert answer.tier is MemoryTier.EPISODIC and answer.restored == [gone.fact_id]
    assert n.service.ontology(T).facts[gone.fact_id].status is FactStatus.CURRENT


def test_an_ambiguous_mention_never_merges_silently(make_noumena):
    n = make_noumena("sqlite")
    _org(n)
    n.service.execute(c.RegisterEntity(tenant=T, ref="person:li-zong", label="Li Zong"))
    n.application.ingestor.ingest([_compacted("k1", [
        {"subject": "person:li-zongg", "relation": "prefers", "object": "memory:monthly"},
        {"subject": "person:lee", "relation": "prefers", "object": "memory:monthly"},
    ], mentions=[{"ref": "person:li-zongg", "label": "Li Zongg"}, {"ref": "person:lee", "label": "李總"}])])
    n.on_stored.drain(30)
    state = n.service.ontology(T)
    assert state.entities["person:li-zongg"].needs_review  # fuzzy: close, not the same: a person decides
    assert "person:lee" not in state.entities  # 李總 normalizes to 李总: resolved to person:li
    assert {f.subject for f in state.current_facts() if f.relation == "prefers"} == {"person:li-zongg",
                                                                                   "person:li"}
    moved = merge_entities(n.service, T, "person:li-zongg", "person:li-zong")
    state = n.service.ontology(T)
    assert moved == 1 and state.entities["person:li-zongg"].merged_into == "person:li-zong"
    assert {f.subject for f in state.current_facts() if f.relation == "prefers"} == {"person:li-zong",
                                                                                   "person:li"}


def test_an_extractor_failure_is_visible_stores_no_facts_and_can_be_retried(make_noumena):
    n = make_noumena("sqlite")
    _org(n)
    n.service.execute(c.AppendMessage(tenant=T, session_id="wang-main", message_id="m1", role="user",
                                      content="李总说只做月结"))
    n.service.execute(c.CompactSession(tenant=T, session_id="wang-main", through_message_id="m1"))
    good = {"mentions": [{"ref": "person:li", "label": "李总"}],
            "facts": [{"subject": "person:li", "relation": "prefers", "object": "memory:monthly",
                       "reason": "said so", "message_ids": ["m1"], "scope": "org"}]}
    with RecordedChatCompletionsServer(["not json at all", good]) as llm:
        extractor = LLMExtractor(llm.url, "recorded-model", api_key="k", timeout_seconds=1, retries=0)
        failed = consolidate(n.service, T, "wang-main#1", extractor)
        assert failed.status is ConsolidationStatus.FAILED and "content is not JSON" in (failed.reason or "")
        state = n.service.ontology(T)
        assert state.compactions["wang-main#1"].status is ConsolidationStatus.FAILED
        assert not list(state.current_facts())
        retried = consolidate(n.service, T, "wang-main#1", extractor)
        assert llm.requests[0]["authorization"] == "Bearer k"
        assert "李总说只做月结" in llm.requests[0]["body"]["messages"][1]["content"]
    assert retried.status is ConsolidationStatus.COMPLETED
    (fact,) = n.service.ontology(T).current_facts()
    assert fact.scope == "person:wang"  # a model may not write semantic memory
    assert [type(x.event) for x in n.log.read(0, 1000)].count(ConsolidationFailed) == 1


def test_the_llm_extractor_gives_up_after_bounded_retries(make_noumena):
    n = make_noumena("popo")
    _org(n)
    n.service.execute(c.CompactSession(tenant=T, session_id="wang-main", through_message_id="m1"))
    with RecordedChatCompletionsServer([503, "sleep", 502]) as llm:
        extractor = LLMExtractor(llm.url, "m", timeout_seconds=0.5, retries=2, backoff_seconds=0.01)
        report = consolidate(n.service, T, "wang-main#1", extractor)
    assert report.status is ConsolidationStatus.FAILED and "gave up after 3 attempts" in (report.reason or "")


def test_workers_are_relations_a_follow_up_can_be_routed_by(make_noumena):
    n = make_noumena("popo")
    _org(n)
    n.service.execute(c.DispatchWorker(tenant=T, session_id="wang-main", worker_session_id="w-quote",
                                       task="a new quote for Li", about=("person:li", "file:q3")))
    n.service.execute(c.DispatchWorker(tenant=T, session_id="wang-main", worker_session_id="w-done",
                                       task="old task", about=("person:li",)))
    n.service.execute(c.ReportWorker(tenant=T, session_id="w-quote", status="waiting",
                                     summary="waiting on the freight change"))
    n.service.execute(c.ReportWorker(tenant=T, session_id="w-done", status="done", summary="finished"))
    (worker,) = workers_for(n.service.ontology(T), "wang-main", about="person:li")
    assert (worker.session_id, worker.status.value, worker.last_summary) == ("w-quote", "waiting",
                                                                             "waiting on the freight change")


def test_eval_a_question_answered_three_turns_ago_comes_from_the_session_tier(make_noumena):
    """Seed 001: what was just said in this session beats what the organization has long believed."""
    n = make_noumena("sqlite")
    _org(n)
    n.service.execute(c.RegisterEntity(tenant=T, ref="memory:usd", label="quotes in USD"))
    n.service.execute(c.RegisterEntity(tenant=T, ref="memory:cny", label="quotes in CNY"))
    n.service.execute(c.AssertFact(tenant=T, subject="person:li", relation="currency", object="memory:usd",
                                   reason="the account's default", scope="org"))
    script = [("user", "What currency does Li want?"), ("assistant", "Checking."),
              ("user", "Li told me today: CNY from now on."), ("assistant", "Noted: CNY for Li."),
              ("user", "Also book the meeting room."), ("assistant", "Booked."), ("user", "Thanks.")]
    for i, (role, content) in enumerate(script, start=1):
        n.service.execute(c.AppendMessage(tenant=T, session_id="wang-main", message_id=f"t{i}", role=role,
                                          content=content))
        if i == 4:  # the runtime wrote down what it learned, in session memory
            n.service.execute(c.AssertFact(tenant=T, subject="person:li", relation="currency",
                                           object="memory:cny", scope="session:wang-main",
                                           source=c.Source(session_id="wang-main", message_ids=("t3",))))
    answer = recall(n.service, T, "agent:wang-assistant", "person:wang", "person:li", "currency")
    assert answer.tier is MemoryTier.SESSION
    assert [f.object for f in answer.facts] == ["memory:cny"]
    other_agent = recall(n.service, T, "agent:wang-assistant", "person:li", "person:li", "currency")
    assert other_agent.tier is MemoryTier.SEMANTIC  # serving someone else: that session is not theirs


def test_a_compaction_left_pending_by_a_dead_process_is_consolidated_by_the_next(make_noumena, tmp_path):
    from domain.application.ingestion import Ingestor

    first = make_noumena("sqlite", home=tmp_path / "shared")
    _org(first)
    Ingestor(first.service).ingest([_compacted("k1", [{"subject": "person:li", "relation": "prefers",
                                                       "object": "memory:monthly"}])])  # stored, never consolidated
    assert first.service.ontology(T).compactions["wang-main#1"].status is ConsolidationStatus.PENDING
    second = make_noumena("sqlite", home=tmp_path / "shared")
    assert second.consolidation.resume() == 1
    state = second.service.ontology(T)
    assert state.compactions["wang-main#1"].status is ConsolidationStatus.COMPLETED
    kinds = [type(x.event).__name__ for x in second.log.read(0, 1000)]
    started = kinds.index("ConsolidationStarted")
    assert kinds[started:] == ["ConsolidationStarted", "FactAsserted", "ConsolidationCompleted"]  # one write


def test_consolidation_reads_a_whole_state_while_ingestion_writes_the_tenant_on_another_thread(make_noumena):
    """The worker reads the tenant's live state (every entity, for its name index; the session's turns) while
    ingestion applies events to it on other threads. It reads under the service's lock, so it never meets a
    dict that changes size as it iterates ("dictionary changed size during iteration" killed the background
    consolidation thread before), and every compaction is consolidated."""
    from tests.race_support import writer_beside

    n = make_noumena("popo")
    _org(n)
    n.service.execute_batch([c.RegisterEntity(tenant=T, ref=f"person:p{i}", label=f"Person {i}")
                             for i in range(3_000)], all_or_nothing=True)

    def ingest(i: int) -> None:  # another writer: a new entity and a message, as fast as the service takes them
        n.service.execute_batch([
            c.RegisterEntity(tenant=T, ref=f"person:new{i}", label=f"Newcomer {i}"),
            c.AppendMessage(tenant=T, session_id="wang-main", message_id=f"w{i}", role="user",
                            content=f"message {i}")])

    with writer_beside(ingest) as writer:
        for k in range(25):
            n.service.execute(c.CompactSession(tenant=T, session_id="wang-main", through_message_id=f"k{k}",
                                               mentions=({"ref": "person:li", "label": "李总"},
                                                         {"ref": f"person:mention{k}", "label": f"Newcomer {k}"}),
                                               facts=({"subject": "person:li", "relation": "knows",
                                                       "object": f"person:p{k}"},)))
            reports = n.consolidation.run_pending(T)
            assert [r.status for r in reports] == [ConsolidationStatus.COMPLETED], reports

    assert not writer.failures and writer.written > 25
    state = n.service.ontology(T)
    assert len(state.compactions) == 25
    assert {k.status for k in state.compactions.values()} == {ConsolidationStatus.COMPLETED}
