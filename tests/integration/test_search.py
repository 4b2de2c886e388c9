"""Recall by content through the real event log: words and meaning, Chinese and mixed text, tiers, privacy, as-of,
forgetting, the context block, and the entry points."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from domain.commands import AssertFact, CreateTenant, InvalidateFact, RegisterEntity, StartSession
from domain.errors import InvalidInput, UnknownEntity, UnknownSearch
from domain.recalls import RecallsCoalesced
from infra.adapters.embedders import embedder_from
from infra.settings import Settings
from projections.contexts import Contexts
from projections.perspective_index import PerspectiveIndex, fold
from projections.perspectives import Perspectives
from projections.searches import Searches, blocked_parties, visible_among, visible_facts
from tests.conftest import TickingClock
from tests.properties import examples

T = "acme"
EMBEDDER = embedder_from(Settings())


def _fact(noumena, subject: str, relation: str, obj: str, reason: str | None = None, scope: str = "org") -> str:  # type: ignore[no-untyped-def]
    outcome = noumena.service.execute(AssertFact(tenant=T, subject=subject, relation=relation, object=obj,
                                                 reason=reason, scope=scope))
    return outcome.events[-1].fact_id  # type: ignore[attr-defined,no-any-return]


def _org(noumena) -> dict[str, str]:  # type: ignore[no-untyped-def]
    run = noumena.service.execute
    run(CreateTenant(tenant=T))
    for ref, label in (("agent:sales", "sales agent"), ("agent:cs", "customer service"), ("person:li", "李总"),
                       ("person:zhang", "张总"), ("person:caroline", "Caroline"),
                       ("memory:pay", "李总 prefers monthly settlement"),
                       ("memory:pet", "Caroline adopted a dog named Oscar"),
                       ("memory:ship", "张总要求每周五发货"),
                       ("memory:secret", "Zhang is negotiating a private discount")):
        run(RegisterEntity(tenant=T, ref=ref, label=label, hub=ref == "agent:cs"))
    return {
        "pay": _fact(noumena, "person:li", "prefers", "memory:pay", "said so on the third call"),
        "pet": _fact(noumena, "person:caroline", "has", "memory:pet", "she talks about walking him"),
        "ship": _fact(noumena, "person:zhang", "requires", "memory:ship", "写在合同附件里"),
        "secret": _fact(noumena, "person:zhang", "discussed", "memory:secret", "private call",
                        scope="person:zhang"),
        "serves_li": _fact(noumena, "agent:cs", "serves", "person:li", "customer service for all customers"),
        "serves_zhang": _fact(noumena, "agent:cs", "serves", "person:zhang", "customer service for all customers"),
    }


@pytest.fixture
def served(make_noumena, tmp_path):  # type: ignore[no-untyped-def]
    clock = TickingClock(datetime(2026, 3, 1, tzinfo=UTC), step=timedelta(seconds=1))
    noumena = make_noumena("sqlite", clock=clock)
    facts = _org(noumena)
    perspectives = Perspectives(noumena.log, clock)
    searches = Searches(perspectives, clock, embedder=EMBEDDER)
    return noumena, searches, facts, clock


def _ids(answer) -> list[str]:  # type: ignore[no-untyped-def]
    return [item.fact_id for item in answer.items]


def test_a_request_naming_no_entity_finds_the_fact_by_its_words(served):
    _noumena, searches, facts, _clock = served
    answer = searches.search_for(T, "agent:sales", "how does Li want to pay? monthly?")
    assert _ids(answer)[0] == facts["pay"]
    assert answer.items[0].scores["lexical"] > 0 and answer.answered_by is not None


def test_meaning_finds_a_fact_that_shares_no_word_with_the_request(served):
    _noumena, searches, facts, _clock = served
    answer = searches.search_for(T, "agent:sales", "puppy")
    assert answer.semantic == "exact"
    assert _ids(answer)[0] == facts["pet"]
    assert answer.items[0].scores["lexical"] == 0 and answer.items[0].scores["semantic"] > 0


def test_chinese_queries_find_chinese_and_mixed_memories(served):
    _noumena, searches, facts, _clock = served
    assert _ids(searches.search_for(T, "agent:sales", "李总 结算"))[0] == facts["pay"]
    assert _ids(searches.search_for(T, "agent:sales", "什么时候发货"))[0] == facts["ship"]
    assert _ids(searches.search_for(T, "agent:sales", "合同附件"))[0] == facts["ship"]


def test_a_person_scoped_fact_is_found_only_while_serving_that_person_and_answers_from_its_tier(served):
    noumena, searches, facts, _clock = served
    noumena.service.execute(RegisterEntity(tenant=T, ref="agent:pa", label="personal agent"))
    other = searches.search_for(T, "agent:pa", "private discount", serving="person:li")
    assert facts["secret"] not in _ids(other)
    own = searches.search_for(T, "agent:pa", "private discount", serving="person:zhang")
    assert _ids(own)[0] == facts["secret"] and own.answered_by == "episodic" and own.items[0].tier == "episodic"


def test_a_hub_agent_serving_one_customer_never_finds_another_customers_facts(served):
    _noumena, searches, facts, _clock = served
    answer = searches.search_for(T, "agent:cs", "发货 shipping Friday", serving="person:li")
    assert facts["ship"] not in _ids(answer) and facts["serves_zhang"] not in _ids(answer)


def test_an_invalidated_fact_leaves_the_results_and_as_of_search_still_sees_it(served):
    noumena, searches, facts, clock = served
    before = clock.now
    searches.search_for(T, "agent:sales", "monthly settlement")
    noumena.service.execute(InvalidateFact(tenant=T, fact_id=facts["pay"], reason="Li now pays per order"))
    assert facts["pay"] not in _ids(searches.search_for(T, "agent:sales", "monthly settlement"))
    past = searches.search_for(T, "agent:sales", "monthly settlement", as_of=before)
    assert _ids(past)[0] == facts["pay"]


def test_serving_records_a_looked_up_use_and_keeps_evidence_that_explains_it(served):
    noumena, _searches, facts, _clock = served
    memory = noumena.application
    answer = memory.reading.search_for(T, "agent:sales", "monthly settlement", k=3)
    assert answer.recall_held and answer.recall_position is None
    explained = memory.reading.explain_search(T, answer.search_id)
    assert explained.items == answer.items and explained.recall_held
    memory.reading.flush_recalls()
    [event] = [e.event for e in noumena.log.read(0, 10_000) if isinstance(e.event, RecallsCoalesced)]
    assert [(agent, mode, fact_id) for agent, mode, fact_id, _at in event.used()] == [
        ("agent:sales", "looked_up", fact_id) for fact_id in _ids(answer)]
    with pytest.raises(UnknownSearch):
        memory.reading.explain_search("another-tenant", answer.search_id)


def test_bad_requests_name_what_is_wrong(served):
    _noumena, searches, _facts, _clock = served
    with pytest.raises(InvalidInput) as empty:
        searches.search_for(T, "agent:sales", "   ")
    assert empty.value.field == "query"
    with pytest.raises(UnknownEntity) as unknown:
        searches.search_for(T, "agent:nobody", "pay")
    assert unknown.value.field == "agent"
    with pytest.raises(InvalidInput) as naive:
        searches.search_for(T, "agent:sales", "pay", as_of=datetime(2026, 1, 1))
    assert naive.value.field == "as_of"


def test_without_an_embedder_search_is_lexical_and_says_so(served):
    noumena, _searches, facts, clock = served
    lexical = Searches(Perspectives(noumena.log, clock), clock, embedder=None)
    answer = lexical.search_for(T, "agent:sales", "monthly settlement")
    assert answer.semantic == "off" and _ids(answer)[0] == facts["pay"]
    assert all(item.scores["semantic"] == 0 for item in answer.items)


def test_forgetting_a_person_leaves_no_text_of_theirs_in_the_index_or_the_evidence(served, tmp_path):
    noumena, searches, facts, _clock = served
    served_before = noumena.application.reading.search_for(T, "agent:sales", "monthly settlement")
    assert _ids(served_before)[0] == facts["pay"]
    evidence = [tmp_path / "home" / name for name in ("evidence.sqlite", "evidence.sqlite-wal")]
    assert any(b"settlement" in path.read_bytes() for path in evidence)  # the query is kept ...
    noumena.application.forgetting.forget(T, "person:li")  # ... and blanked with the answer
    answer = searches.search_for(T, "agent:sales", "monthly settlement")
    assert facts["pay"] not in [i.fact_id for i in answer.items if "monthly" in i.text]
    pindex, index = searches.index(T)
    assert "settlement" not in index.vocabulary and "month" not in index.vocabulary
    for path in evidence:
        raw = path.read_bytes() if path.exists() else b""
        assert b"monthly" not in raw and "李总".encode() not in raw and b"settlement" not in raw


def test_after_a_forget_the_index_read_again_in_the_background_equals_one_seeded_from_the_log(served):
    """A forget drops the tenant's search index; it is read again from the log in a thread of its own (holding no
    lock, so other tenants' reads go on), with what the perspective service applies meanwhile kept for it: once
    installed, its answers are those of an index seeded from the log afresh."""
    noumena, searches, facts, clock = served
    assert _ids(searches.search_for(T, "agent:sales", "dog"))[0] == facts["pet"]
    noumena.application.forgetting.forget(T, "person:li")
    searches.perspectives.catch_up()  # (applies the forget: the index is dropped, read again when next needed)
    _fact(noumena, "person:zhang", "asked_for", "memory:ship", "before the holidays")
    searches.perspectives.catch_up()  # (not applied to a dropped index: read from the log with the rest)
    searches.wait_seeded(T, 0)  # (what a search does first: the log is read again, in the background)
    _fact(noumena, "person:caroline", "likes", "memory:pet", "walks him in the park every morning")
    searches.perspectives.catch_up()  # (kept beside the seed while it reads, or applied to the installed index)
    assert searches.wait_seeded(T, 60)
    fresh = Searches(Perspectives(noumena.log, clock), clock, embedder=EMBEDDER)
    for query in ("park every morning", "holidays", "monthly settlement", "dog", "发货", "customer service"):
        again = searches.search_for(T, "agent:sales", query)
        assert [(i.fact_id, i.score) for i in again.items] == [
            (i.fact_id, i.score) for i in fresh.search_for(T, "agent:sales", query).items], query
    assert "settlement" not in searches.index(T)[1].vocabulary


def test_as_of_search_equals_a_search_over_the_log_replayed_to_that_time(served):
    noumena, searches, facts, clock = served
    middle = clock.now
    _fact(noumena, "person:li", "asked_for", "memory:pay", "monthly invoices again")
    noumena.service.execute(InvalidateFact(tenant=T, fact_id=facts["pet"], reason="rehomed"))
    for query in ("monthly settlement", "dog", "发货"):
        past = searches.search_for(T, "agent:sales", query, as_of=middle)
        replay = Searches(Perspectives(_Cut(noumena.log, middle), lambda: middle), lambda: middle,
                          embedder=EMBEDDER)
        again = replay.search_for(T, "agent:sales", query)
        assert [(i.fact_id, i.score) for i in past.items] == [(i.fact_id, i.score) for i in again.items]


class _Cut:
    """The real log, read only up to a transaction time (what a replay to T reads)."""

    def __init__(self, log, until: datetime) -> None:  # type: ignore[no-untyped-def]
        self._log, self._until = log, until

    def read_raw(self, after: int, limit: int):  # type: ignore[no-untyped-def]
        from projections.source import decode

        out = []
        for position, topic, state in self._log.read_raw(after, limit):
            record = decode(position, topic, state)
            stamp = record.data.get("recorded_at")
            if stamp and datetime.fromisoformat(str(stamp)) > self._until:
                break
            out.append((position, topic, state))
        return out


def test_context_for_shows_facts_recalled_by_the_message_with_their_ids(served, tmp_path):
    noumena, searches, facts, clock = served
    noumena.service.execute(StartSession(tenant=T, session_id="main-li", agent="agent:sales", serving="person:li"))
    contexts = Contexts(searches.perspectives, noumena.service, noumena.log, clock,
                        searches=searches)
    context = contexts.context_for(T, "main-li", "how does he want to pay? monthly?")
    assert context.search is not None and facts["pay"] in [i.fact_id for i in context.search.items]
    shown = {fid for block in context.blocks for line in block.lines if "[#" in line.text for fid in line.fact_ids}
    assert facts["pay"] in shown
    in_perspective = {i.fact_id for i in context.perspective.items}  # type: ignore[union-attr]
    # the preference is about the person served: the perspective reaches it, so it is shown once, there
    assert facts["pay"] in in_perspective and facts["pay"] not in context.recalled_fact_ids
    # recalled by the message: what the search found and neither the constraints nor the perspective show
    found = {i.fact_id for i in context.search.items}
    assert context.recalled_fact_ids
    assert set(context.recalled_fact_ids) == found - in_perspective - set(context.constraint_fact_ids)
    assert set(context.recalled_fact_ids) <= shown
    assert len(shown) <= context.parameters.max_facts_shown


# ---------------------------------------------------------------------------------------------- privacy property

PERSONS = ["person:a", "person:b", "person:c"]
AGENTS = ["agent:x", "agent:y", "agent:hub"]
WORDS = ["invoice", "monthly", "dog", "contract", "发货", "报价"]


@st.composite
def organizations(draw):  # type: ignore[no-untyped-def]
    """Random facts between agents, persons and memories, in random scopes, some ended; random sessions."""
    records: list[tuple[int, str, dict]] = []

    def add(topic: str, **data) -> None:  # type: ignore[no-untyped-def]
        data.update(tenant=T, recorded_at=datetime(2026, 1, 1, tzinfo=UTC).isoformat())
        records.append((len(records) + 1, topic, data))

    for ref in PERSONS + AGENTS:
        add("entity.registered", ref=ref, label=ref, aliases=[], hub=ref == "agent:hub")
    sessions = []
    for k in range(draw(st.integers(0, 3))):
        agent, person = draw(st.sampled_from(AGENTS)), draw(st.sampled_from(PERSONS + [None]))
        add("session.started", session_id=f"s{k}", agent=agent, kind="main", serving=person)
        sessions.append(f"session:s{k}")
    ids = []
    for k in range(draw(st.integers(1, 14))):
        subject = draw(st.sampled_from(PERSONS + AGENTS))
        obj = draw(st.sampled_from(PERSONS + AGENTS + [f"memory:m{k}"]))
        if obj.startswith("memory:"):
            add("entity.registered", ref=obj, label=" ".join(draw(st.lists(st.sampled_from(WORDS), min_size=1,
                                                                            max_size=3))), aliases=[], hub=False)
        scope = draw(st.sampled_from(["org", *PERSONS, *sessions]))
        fact_id = f"{k:032x}"
        add("fact.asserted", fact_id=fact_id, subject=subject, relation="about", object=obj, scope=scope,
            reason=" ".join(draw(st.lists(st.sampled_from(WORDS), max_size=2))) or None, confidence=0.9,
            provenance={"session_id": None, "message_ids": []})
        ids.append(fact_id)
        if draw(st.booleans()) and draw(st.booleans()):
            add("fact.invalidated", fact_id=fact_id, reason="ended", provenance={})
    return records


def _allowed(records, agent: str, serving: str | None) -> set[str]:  # type: ignore[no-untyped-def]
    """The reference: what the perspective's rules let this viewer ever see (written from DESIGN.md, not from
    the index): current; org, or the served person's scope, or a session of this agent serving the same person
    or no one; and a hub agent never sees a fact touching another person it has facts with."""
    sessions = {d["session_id"]: (d["agent"], d.get("serving")) for _p, t, d in records if t == "session.started"}
    facts = {d["fact_id"]: d for _p, t, d in records if t == "fact.asserted"}
    ended = {d["fact_id"] for _p, t, d in records if t == "fact.invalidated"}
    blocked: set[str] = set()
    if agent == "agent:hub":
        for d in facts.values():
            for end, other in ((d["subject"], d["object"]), (d["object"], d["subject"])):
                if end == agent and other.startswith("person:") and other != serving:
                    blocked.add(other)
    allowed = set()
    for fact_id, d in facts.items():
        scope = d["scope"]
        if fact_id in ended:
            continue
        if scope.startswith("person:") and scope != serving:
            continue
        if scope.startswith("session:"):
            owner = sessions.get(scope.removeprefix("session:"))
            if owner is None or owner[0] != agent or owner[1] not in (None, serving):
                continue
        if d["subject"] in blocked or d["object"] in blocked:
            continue
        allowed.add(fact_id)
    return allowed


@settings(max_examples=examples(0.2), suppress_health_check=[HealthCheck.too_slow])
@given(organizations(), st.sampled_from(AGENTS), st.sampled_from(PERSONS + [None]),
       st.lists(st.sampled_from(WORDS), min_size=1, max_size=3))
def test_search_never_returns_a_fact_the_viewers_perspective_rules_forbid(records, agent, serving, words):
    import numpy as np

    from projections.search_index import SearchIndex
    from projections.search_text import Analyzer

    index = SearchIndex(T, Analyzer(), None)
    pindex = fold(T, records, then=lambda p, position, topic, data: index.apply(p, position, topic, data))
    allowed = _allowed(records, agent, serving)
    agent_id = pindex.lookup(agent)
    serving_id = pindex.lookup(serving) if serving else -1
    visible = visible_facts(pindex, agent_id, serving_id, len(index.doc_len))
    assert {pindex.fact_ids.at(d) for d in range(len(visible)) if visible[d]} == allowed
    docs, _scores = index.bm25(Analyzer().terms(" ".join(words)), 1.2, 0.3)
    found = {pindex.fact_ids.at(int(d)) for d in docs if visible[int(d)]}
    assert found <= allowed
    # the same rules asked of given documents only (how a search beyond the exact limit checks its candidates)
    among = visible_among(pindex, agent_id, serving_id, len(index.doc_len))
    assert (among(np.arange(len(visible))) == visible).all()
    best, _scores = index.bm25_top(Analyzer().terms(" ".join(words)), 1.2, 0.3, 400, among, exact=40)
    assert {pindex.fact_ids.at(int(d)) for d in best} == found  # few: every match is read


def test_the_bm25_scores_equal_bm25s_on_a_fixed_corpus():
    import bm25s
    import numpy as np

    from projections.search_index import SearchIndex
    from projections.search_text import Analyzer

    texts = ["monthly settlement for Li", "Caroline adopted a dog", "the dog likes long walks every day",
             "quote failed because of the exchange rate", "Li prefers monthly invoices and monthly reports"]
    analyzer = Analyzer()
    index = SearchIndex(T, analyzer, None)
    records = [(1, "entity.registered", {"tenant": T, "ref": "agent:x", "label": "x", "aliases": [], "hub": False})]
    for k, text in enumerate(texts):
        records.append((len(records) + 1, "entity.registered",
                        {"tenant": T, "ref": f"memory:{k}", "label": text, "aliases": [], "hub": False}))
        records.append((len(records) + 1, "fact.asserted",
                        {"tenant": T, "fact_id": f"{k:032x}", "subject": f"memory:{k}", "relation": "is",
                         "object": f"memory:{k}", "scope": "org", "reason": None, "confidence": 1.0,
                         "provenance": {}}))
    pindex = fold(T, records, then=lambda p, position, topic, data: index.apply(p, position, topic, data))
    assert isinstance(pindex, PerspectiveIndex)
    # each document is its statement: label, relation, label again (a self-loop): the same text for bm25s
    corpus = [analyzer.terms(index.statement(pindex, d)) for d in range(len(texts))]
    retriever = bm25s.BM25(k1=1.2, b=0.3, method="lucene")
    retriever.index(bm25s.tokenization.Tokenized(
        ids=[[vocab for vocab in _ids_of(doc, corpus)] for doc in corpus], vocab=_vocab(corpus)), show_progress=False)
    query = analyzer.terms("monthly dog")
    docs, ours = index.bm25(query, 1.2, 0.3)
    theirs = retriever.get_scores([_vocab(corpus)[t] for t in query if t in _vocab(corpus)])
    np.testing.assert_allclose(ours, np.asarray(theirs)[docs], rtol=1e-5)


def _vocab(corpus: list[list[str]]) -> dict[str, int]:
    vocab: dict[str, int] = {}
    for doc in corpus:
        for term in doc:
            vocab.setdefault(term, len(vocab))
    return vocab


def _ids_of(doc: list[str], corpus: list[list[str]]) -> list[int]:
    vocab = _vocab(corpus)
    return [vocab[t] for t in doc]


def test_blocked_parties_are_the_other_persons_a_hub_agent_has_facts_with(served):
    _noumena, searches, _facts, _clock = served
    pindex, _index = searches.index(T)
    blocked = {pindex.refs[int(e)] for e in blocked_parties(pindex, pindex.lookup("agent:cs"),
                                                            pindex.lookup("person:li"))}
    assert blocked == {"person:zhang"}


def test_search_json_is_what_the_wire_promises(served):
    from projections.searches import search_json

    _noumena, searches, facts, _clock = served
    data = json.loads(json.dumps(search_json(searches.search_for(T, "agent:sales", "monthly"))))
    assert set(data) >= {"search_id", "answered_by", "items"}
    assert set(data["items"][0]) >= {"rank", "fact_id", "subject", "relation", "object", "text", "scope",
                                     "valid_from", "score", "scores", "session_id", "message_ids"}
    assert set(data["items"][0]["scores"]) == {"lexical", "semantic", "activation", "recency", "entity", "time",
                                               "context", "session"}
    assert data["items"][0]["kind"] == "fact" and data["items"][0]["message_id"] is None


def test_a_search_over_an_index_loaded_from_the_read_model_equals_one_over_the_log(make_noumena, tmp_path):
    from domain.commands import AppendMessage
    from projections.projector import Projector

    clock = TickingClock(datetime(2026, 3, 1, tzinfo=UTC), step=timedelta(seconds=1))
    noumena = make_noumena("sqlite", clock=clock)
    facts = _org(noumena)
    noumena.service.execute(StartSession(tenant=T, session_id="call-3", agent="agent:sales", serving="person:li"))
    noumena.service.execute(AppendMessage(tenant=T, session_id="call-3", message_id="m1", role="user",
                                          content="we will wire the money by telegraphic transfer at month end"))
    wired = noumena.service.execute(AssertFact(
        tenant=T, subject="person:li", relation="pays_by", object="memory:pay", reason="from the call",
        scope="person:li",  # (an org fact's document takes no session's words: everyone sees it)
        source={"session_id": "call-3", "message_ids": ["m1"]})).events[-1].fact_id  # type: ignore[attr-defined]
    with Projector(noumena.log, tmp_path / "read.duckdb") as projector:
        projector.catch_up()
    folded = Searches(Perspectives(noumena.log, clock), clock, embedder=EMBEDDER)
    started = Perspectives(noumena.log, clock)
    assert started.start_from_read_model(tmp_path / "read.duckdb")
    loaded = Searches(started, clock, embedder=EMBEDDER)
    for query in ("telegraphic transfer", "monthly settlement", "发货", "dog"):
        a = folded.search_for(T, "agent:sales", query, serving="person:li")
        b = loaded.search_for(T, "agent:sales", query, serving="person:li")
        assert [(i.fact_id, i.message_ids) for i in a.items] == [(i.fact_id, i.message_ids) for i in b.items], query
        assert [i.score for i in a.items] == pytest.approx([i.score for i in b.items], abs=1e-5)  # DuckDB: µs
    found = loaded.search_for(T, "agent:sales", "telegraphic transfer", serving="person:li")
    # found by the words of the message it came from (the read model keeps no message text); the turn itself shows
    # that message first, so the fact comes after the results that show something new
    assert (found.items[0].kind, found.items[0].message_ids) == ("turn", ["m1"])
    assert ("fact", wired, ["m1"]) in [(i.kind, i.fact_id, i.message_ids) for i in found.items[1:]]
    assert facts["pay"] != wired


def test_the_exact_filter_keeps_only_facts_touching_the_named_entities(served):
    _noumena, searches, facts, _clock = served
    answer = searches.search_for(T, "agent:sales", "monthly settlement dog", about=["person:caroline"])
    assert _ids(answer) == [facts["pet"]] and answer.about == ["person:caroline"]
    with pytest.raises(UnknownEntity) as unknown:
        searches.search_for(T, "agent:sales", "pay", about=["person:nobody"])
    assert unknown.value.field == "about"

