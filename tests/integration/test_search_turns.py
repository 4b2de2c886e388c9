"""Turns as episodic records: every message is found by its words, visible exactly as its session is, as of any
time, and forgotten with its session or person (documents, statistics, evidence)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from domain.commands import AppendMessage, AssertFact, CreateTenant, RegisterEntity, StartSession
from domain.search import DEFAULT_SEARCH_PARAMETERS, ItemKind
from infra.adapters.embedders import embedder_from
from infra.settings import Settings
from projections.perspective_index import fold
from projections.perspectives import Perspectives
from projections.search_index import SearchIndex
from projections.search_text import Analyzer
from projections.searches import Searches, turn_candidates
from tests.conftest import TickingClock
from tests.integration.test_search import AGENTS, PERSONS, WORDS, _Cut  # (the same organization's names)
from tests.properties import examples

T = "acme"
EMBEDDER = embedder_from(Settings())


def _said(noumena, session_id: str, message_id: str, content: str) -> None:  # type: ignore[no-untyped-def]
    noumena.service.execute(AppendMessage(tenant=T, session_id=session_id, message_id=message_id, role="user",
                                          content=content))


def _org(noumena) -> None:  # type: ignore[no-untyped-def]
    run = noumena.service.execute
    run(CreateTenant(tenant=T))
    for ref, label in (("agent:sales", "sales agent"), ("agent:other", "other agent"), ("person:li", "Li"),
                       ("person:zhang", "Zhang")):
        run(RegisterEntity(tenant=T, ref=ref, label=label))
    run(StartSession(tenant=T, session_id="call-li", agent="agent:sales", serving="person:li"))
    run(StartSession(tenant=T, session_id="call-zhang", agent="agent:sales", serving="person:zhang"))
    run(StartSession(tenant=T, session_id="other-li", agent="agent:other", serving="person:li"))
    _said(noumena, "call-li", "li-1", "Hello, it is about the invoice again")
    _said(noumena, "call-li", "li-2", "We will pay the quokka invoice by wire transfer at month end")
    _said(noumena, "call-li", "li-3", "Thanks, I will tell accounting")
    _said(noumena, "call-zhang", "zhang-1", "Our platypus shipment must leave on Fridays")
    _said(noumena, "other-li", "other-1", "Li told another agent about the quokka budget")


def _turns(answer) -> list[str]:  # type: ignore[no-untyped-def]
    return [item.message_id for item in answer.items if item.kind is ItemKind.TURN]


def test_a_deployment_that_extracts_nothing_finds_what_was_said_with_its_session_and_time(make_noumena):
    clock = TickingClock(datetime(2026, 3, 1, tzinfo=UTC), step=timedelta(seconds=1))
    noumena = make_noumena("sqlite", clock=clock)
    _org(noumena)
    searches = Searches(Perspectives(noumena.log, clock), clock, embedder=EMBEDDER)
    answer = searches.search_for(T, "agent:sales", "how will they pay the invoice?", serving="person:li")
    first = answer.items[0]
    assert (first.kind, first.message_id, first.session_id, first.fact_id) == (ItemKind.TURN, "li-2", "call-li", None)
    assert first.text == "We will pay the quokka invoice by wire transfer at month end"
    assert first.role == "user" and first.occurred_at is not None and first.scope == "session:call-li"
    # shown with the turns around it, and those are named in its message ids
    assert [t.message_id for t in first.around] == ["li-1", "li-3"] and first.message_ids == ["li-2", "li-1", "li-3"]
    assert answer.answered_by is not None and answer.answered_by.value == "episodic"


def test_turns_are_visible_exactly_as_their_session_is(make_noumena):
    clock = TickingClock(datetime(2026, 3, 1, tzinfo=UTC), step=timedelta(seconds=1))
    noumena = make_noumena("sqlite", clock=clock)
    _org(noumena)
    searches = Searches(Perspectives(noumena.log, clock), clock, embedder=EMBEDDER)
    assert "li-2" in _turns(searches.search_for(T, "agent:sales", "quokka", serving="person:li"))
    # the same agent serving someone else, or no one; another agent serving the same person
    assert _turns(searches.search_for(T, "agent:sales", "quokka", serving="person:zhang")) == []
    assert _turns(searches.search_for(T, "agent:sales", "quokka")) == []
    assert _turns(searches.search_for(T, "agent:other", "quokka", serving="person:li")) == ["other-1"]
    assert _turns(searches.search_for(T, "agent:sales", "platypus", serving="person:zhang")) == ["zhang-1"]


def test_as_of_search_over_turns_equals_a_search_over_the_log_replayed_to_that_time(make_noumena):
    clock = TickingClock(datetime(2026, 3, 1, tzinfo=UTC), step=timedelta(seconds=1))
    noumena = make_noumena("sqlite", clock=clock)
    _org(noumena)
    middle = clock.now
    _said(noumena, "call-li", "li-4", "Change of plan: the quokka invoice is paid by card")
    _said(noumena, "call-li", "li-5", "And the platypus order doubles")
    noumena.service.execute(AssertFact(tenant=T, subject="person:li", relation="pays_by", object="person:zhang",
                                       reason="quokka card", source={"session_id": "call-li",
                                                                     "message_ids": ["li-4"]}))
    searches = Searches(Perspectives(noumena.log, clock), clock, embedder=EMBEDDER)
    for query in ("quokka invoice", "platypus", "card"):
        past = searches.search_for(T, "agent:sales", query, serving="person:li", as_of=middle)
        replay = Searches(Perspectives(_Cut(noumena.log, middle), lambda: middle), lambda: middle,
                          embedder=EMBEDDER)
        again = replay.search_for(T, "agent:sales", query, serving="person:li")
        assert [(i.kind, i.fact_id, i.message_ids, i.score) for i in past.items] == \
            [(i.kind, i.fact_id, i.message_ids, i.score) for i in again.items]
        assert not {"li-4", "li-5"} & {m for i in past.items for m in i.message_ids}
    now = searches.search_for(T, "agent:sales", "quokka card", serving="person:li")
    assert "li-4" in _turns(now)


def _every_file(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file()]


def test_forgetting_a_person_erases_their_turn_documents_statistics_and_kept_searches(make_noumena, tmp_path):
    clock = TickingClock(datetime(2026, 3, 1, tzinfo=UTC), step=timedelta(seconds=1))
    noumena = make_noumena("sqlite", clock=clock)
    _org(noumena)
    searches = Searches(Perspectives(noumena.log, clock), clock, embedder=EMBEDDER)
    served = noumena.application.reading.search_for(T, "agent:sales", "quokka invoice", serving="person:li")
    assert "li-2" in _turns(served)
    home = tmp_path / "home"
    assert any(b"wire transfer" in p.read_bytes() for p in _every_file(home))  # the kept search held the turn
    _pindex, index = searches.index(T)
    assert "quokka" in index.turns.vocabulary and index.turns.live_docs == 5

    noumena.application.forgetting.forget(T, "person:li")  # erases the sessions that served Li: call-li and other-li

    assert _turns(searches.search_for(T, "agent:sales", "quokka invoice", serving="person:li")) == []
    _pindex, index = searches.index(T)
    turns = index.turns
    assert turns.message_ids == ["zhang-1"] and index.turn_of("zhang-1") == 0 and index.turn_of("li-2") is None
    assert "quokka" not in turns.vocabulary and "wire" not in turns.vocabulary and "forgotten" not in turns.vocabulary
    kept_terms = Analyzer().terms("Our platypus shipment must leave on Fridays")
    assert (turns.live_docs, turns.total_len, list(turns.doc_len)) == (1, len(kept_terms), [len(kept_terms)])
    assert b"quokka" not in index.messages.buffer and b"wire transfer" not in index.messages.buffer
    for path in _every_file(home):
        raw = path.read_bytes()
        assert b"quokka" not in raw and b"wire transfer" not in raw and b"accounting" not in raw, path.name
    assert _turns(searches.search_for(T, "agent:sales", "platypus", serving="person:zhang")) == ["zhang-1"]


# ---------------------------------------------------------------------------------------------- privacy property



@st.composite
def conversations(draw):  # type: ignore[no-untyped-def]
    """Random sessions (agents, persons served or none, workers) with random messages, some facts."""
    records: list[tuple[int, str, dict]] = []

    def add(topic: str, **data) -> None:  # type: ignore[no-untyped-def]
        data.update(tenant=T, recorded_at=datetime(2026, 1, 1, tzinfo=UTC).isoformat())
        records.append((len(records) + 1, topic, data))

    for ref in PERSONS + AGENTS:
        add("entity.registered", ref=ref, label=ref, aliases=[], hub=ref == "agent:hub")
    sessions = []
    for k in range(draw(st.integers(1, 4))):
        agent, person = draw(st.sampled_from(AGENTS)), draw(st.sampled_from(PERSONS + [None]))
        add("session.started", session_id=f"s{k}", agent=agent, kind="main", serving=person)
        sessions.append(f"s{k}")
        if draw(st.booleans()):
            add("worker.dispatched", session_id=f"s{k}", worker_session_id=f"w{k}", task="work", about=[])
            sessions.append(f"w{k}")
    for k in range(draw(st.integers(1, 16))):
        words = draw(st.lists(st.sampled_from(WORDS), min_size=1, max_size=4))
        add("message.appended", session_id=draw(st.sampled_from(sessions)), message_id=f"m{k}", role="user",
            content=" ".join(words))
    for k in range(draw(st.integers(0, 3))):
        add("fact.asserted", fact_id=f"{k:032x}", subject=draw(st.sampled_from(PERSONS + AGENTS)), relation="about",
            object=draw(st.sampled_from(PERSONS)), scope="org", reason=draw(st.sampled_from(WORDS)),
            confidence=0.9, provenance={"session_id": None, "message_ids": []})
    return records


def _visible_messages(records, agent: str, serving: str | None) -> set[str]:  # type: ignore[no-untyped-def]
    """The reference, from DESIGN.md's session scope (not from the index): a session's messages are seen by its
    agent (a worker's: its main session's agent, for the person that session serves), while serving the person it
    serves, or when it served no one."""
    owners: dict[str, tuple[str, str | None]] = {}
    for _p, topic, d in records:
        if topic == "session.started":
            owners[d["session_id"]] = (d["agent"], d.get("serving"))
        elif topic == "worker.dispatched" and d["worker_session_id"] not in owners:
            owners[d["worker_session_id"]] = owners[d["session_id"]]
    return {d["message_id"] for _p, topic, d in records if topic == "message.appended"
            and owners[d["session_id"]][0] == agent and owners[d["session_id"]][1] in (None, serving)}


@settings(max_examples=examples(0.2), suppress_health_check=[HealthCheck.too_slow])
@given(conversations(), st.sampled_from(AGENTS), st.sampled_from(PERSONS + [None]),
       st.lists(st.sampled_from(WORDS), min_size=1, max_size=3), st.integers(0, 2))
def test_search_never_returns_or_shows_a_turn_whose_session_the_viewer_may_not_see(records, agent, serving, words,
                                                                                    reach):
    index = SearchIndex(T, Analyzer(), None)
    pindex = fold(T, records, then=lambda p, position, topic, data: index.apply(p, position, topic, data))
    allowed = _visible_messages(records, agent, serving)
    agent_id = pindex.lookup(agent)
    serving_id = pindex.lookup(serving) if serving else -1
    turns = index.turns
    visible = turns.allowed(pindex, agent_id, serving_id)(np.arange(len(turns.message_ids), dtype=np.int64))
    assert {turns.message_ids[d] for d in np.flatnonzero(visible)} == allowed
    p = DEFAULT_SEARCH_PARAMETERS.model_copy(update={"window_before": reach, "window_after": reach,
                                                     "context_before": reach, "context_after": reach})
    seeds = [(1.0, list(range(len(turns.message_ids))))]  # every turn a fact's source: all their neighbours near
    found = turn_candidates(pindex, turns, agent_id, serving_id, None, Analyzer().terms(" ".join(words)), None, p,
                            datetime(2026, 2, 1, tzinfo=UTC).timestamp(), 40, fact_seeds=seeds)
    shown = {m for c in found for m in c.provenance | c.shown}
    assert shown <= allowed
    # every visible message holding a query word is found
    terms = set(Analyzer().terms(" ".join(words)))
    holding = {d["message_id"] for _p, t, d in records if t == "message.appended"
               and terms & set(Analyzer().terms(d["content"]))}
    assert holding & allowed <= {m for c in found for m in c.provenance}


def test_a_context_shows_a_recalled_turn_with_its_window_and_names_no_fact_for_it(make_noumena):
    from projections.contexts import Contexts

    clock = TickingClock(datetime(2026, 3, 1, tzinfo=UTC), step=timedelta(seconds=1))
    noumena = make_noumena("sqlite", clock=clock)
    _org(noumena)
    noumena.service.execute(StartSession(tenant=T, session_id="now-li", agent="agent:sales", serving="person:li"))
    searches = Searches(Perspectives(noumena.log, clock), clock, embedder=EMBEDDER)
    contexts = Contexts(searches.perspectives, noumena.service, noumena.log, clock, searches=searches)
    context = contexts.context_for(T, "now-li", "how will Li pay the quokka invoice?")
    lines = [line for block in context.blocks for line in block.lines]
    recalled = next(line for line in lines if line.message_ids == ["li-2"])
    assert recalled.text.startswith("- [li-2] (call-li, 2026-03-01) user: We will pay the quokka invoice")
    assert recalled.fact_ids == [] and "li-2" not in context.recalled_fact_ids
    window = [line.message_ids for line in lines if line.text.startswith("  · [")]
    assert ["li-1"] in window and ["li-3"] in window
    # another agent's session with the same words is not recalled
    assert not any("other-1" in line.message_ids for line in lines)


@settings(max_examples=examples(0.5))
@given(st.lists(st.lists(st.sampled_from(WORDS + ["x", "y"]), min_size=1, max_size=6), min_size=1, max_size=30),
       st.lists(st.sampled_from(WORDS + ["x"]), min_size=1, max_size=3), st.data())
def test_scoring_a_viewers_own_turns_directly_equals_the_full_bm25_among_them(texts, query, data):
    from projections.search_turns import TurnIndex

    turns = TurnIndex(Analyzer())
    docs = []
    for k, words in enumerate(texts):
        pindex = fold(T, [])
        turns.add(pindex, {"session_id": "s", "message_id": f"m{k}", "role": "user"}, " ".join(words))
        docs.append(k)
    mine = np.array(sorted(data.draw(st.sets(st.sampled_from(docs)))), dtype=np.int64)
    terms = Analyzer().terms(" ".join(query))
    everywhere, scores = turns.bm25(terms, 1.2, 0.3)
    expected = {int(d): float(s) for d, s in zip(everywhere, scores, strict=True) if int(d) in set(mine.tolist())}
    found, found_scores = turns.bm25_among(terms, 1.2, 0.3, mine, 400)
    assert dict(zip(found.tolist(), found_scores.tolist(), strict=True)) == pytest.approx(expected, rel=1e-5)
    assert list(found_scores) == sorted(found_scores, reverse=True)


def test_after_a_merge_a_session_serving_the_merged_person_is_seen_serving_the_one_it_became(make_noumena):
    from domain.commands import MergeEntities

    clock = TickingClock(datetime(2026, 3, 1, tzinfo=UTC), step=timedelta(seconds=1))
    noumena = make_noumena("sqlite", clock=clock)
    _org(noumena)
    run = noumena.service.execute
    run(RegisterEntity(tenant=T, ref="person:li-duplicate", label="Li (from the web form)"))
    run(StartSession(tenant=T, session_id="form-li", agent="agent:sales", serving="person:li-duplicate"))
    _said(noumena, "form-li", "form-1", "The wombat contract goes to legal")
    searches = Searches(Perspectives(noumena.log, clock), clock, embedder=EMBEDDER)
    assert _turns(searches.search_for(T, "agent:sales", "wombat", serving="person:li")) == []
    run(MergeEntities(tenant=T, merged_ref="person:li-duplicate", into_ref="person:li"))
    assert _turns(searches.search_for(T, "agent:sales", "wombat", serving="person:li")) == ["form-1"]
    assert _turns(searches.search_for(T, "agent:sales", "wombat", serving="person:zhang")) == []


def test_the_exact_filter_keeps_the_turns_of_sessions_with_the_named_agent_or_person(make_noumena):
    clock = TickingClock(datetime(2026, 3, 1, tzinfo=UTC), step=timedelta(seconds=1))
    noumena = make_noumena("sqlite", clock=clock)
    _org(noumena)
    searches = Searches(Perspectives(noumena.log, clock), clock, embedder=EMBEDDER)
    ask = searches.search_for
    assert _turns(ask(T, "agent:sales", "platypus", serving="person:zhang", about=["person:zhang"])) == ["zhang-1"]
    assert _turns(ask(T, "agent:sales", "platypus", serving="person:zhang", about=["agent:sales"])) == ["zhang-1"]
    assert _turns(ask(T, "agent:sales", "platypus", serving="person:zhang", about=["person:li"])) == []


def test_a_questions_own_words_do_not_rank_the_turns_that_ask_something(make_noumena):
    clock = TickingClock(datetime(2026, 3, 1, tzinfo=UTC), step=timedelta(seconds=1))
    noumena = make_noumena("sqlite", clock=clock)
    _org(noumena)
    _said(noumena, "call-zhang", "zhang-2", "What would you do next? How could we help?")
    searches = Searches(Perspectives(noumena.log, clock), clock, embedder=None)

    def lexical(query: str) -> dict[str, float]:
        answer = searches.search_for(T, "agent:sales", query, serving="person:zhang")
        return {item.message_id or "": item.scores["lexical"] for item in answer.items if item.kind is ItemKind.TURN}

    # "what", "would", "do" say how it asks: the platypus shipment is what it is about
    asked = lexical("What would Zhang do about the platypus shipment?")
    assert asked["zhang-1"] > 0 and asked.get("zhang-2", 0.0) == 0.0
    # counted as any word (function_weight 1), the turn that only asks something matches them
    searches.parameters = searches.parameters.model_copy(update={"function_weight": 1.0})
    assert lexical("What would Zhang do about the platypus shipment?")["zhang-2"] > 0
    # a request made of such words alone still finds by them
    searches.parameters = DEFAULT_SEARCH_PARAMETERS
    assert lexical("what would you do?")["zhang-2"] > 0


def test_a_turn_of_a_session_that_matches_as_a_whole_ranks_above_the_same_words_said_elsewhere(make_noumena):
    clock = TickingClock(datetime(2026, 3, 1, tzinfo=UTC), step=timedelta(seconds=1))
    noumena = make_noumena("sqlite", clock=clock)
    run = noumena.service.execute
    run(CreateTenant(tenant=T))
    for ref, label in (("agent:sales", "sales agent"), ("person:li", "Li")):
        run(RegisterEntity(tenant=T, ref=ref, label=label))
    # the same closing words in two sessions, beyond the context's reach of anything else that matches; only the
    # second session talks about the quokka invoice as a whole
    said = {"cats": ["The cat is sick again", "Sorry to hear it", "She is at the vet", "Good luck",
                     "We settle by wire"],
            "invoices": ["The quokka invoice came today", "Noted", "Anything else", "Not really",
                         "We settle by wire"]}
    for session, lines in said.items():
        run(StartSession(tenant=T, session_id=session, agent="agent:sales", serving="person:li"))
        for k, line in enumerate(lines):
            _said(noumena, session, f"{session}-{k}", line)
    searches = Searches(Perspectives(noumena.log, clock), clock, embedder=None)
    searches.parameters = searches.parameters.model_copy(update={"window_before": 0, "window_after": 0})

    def ranked() -> list[str]:
        answer = searches.search_for(T, "agent:sales", "quokka invoice settle wire", serving="person:li")
        return [item.message_id or "" for item in answer.items if item.message_id in ("cats-4", "invoices-4")]

    assert ranked() == ["invoices-4", "cats-4"]
    # without the session's match the two score alike (the earlier turn first)
    searches.parameters = searches.parameters.model_copy(update={"session_weight": 0.0})
    assert ranked() == ["cats-4", "invoices-4"]


def test_a_word_no_turn_holds_moves_the_lexical_weight_to_the_meaning(make_noumena):
    from projections.search_lexical import idf
    from projections.searches import word_coverage

    clock = TickingClock(datetime(2026, 3, 1, tzinfo=UTC), step=timedelta(seconds=1))
    noumena = make_noumena("sqlite", clock=clock)
    _org(noumena)
    searches = Searches(Perspectives(noumena.log, clock), clock, embedder=EMBEDDER)
    turns = searches.index(T)[1].turns
    n = turns.live_docs
    quokka = idf(n, 2)  # (li-2 and other-1 hold it)
    assert word_coverage(turns, ["quokka", "zeppelin"]) == pytest.approx(quokka / (quokka + idf(n, 0)))
    # every word held, or none (the lexical match is then the names' alone): nothing moves
    assert word_coverage(turns, ["quokka", "invoic"]) == word_coverage(turns, ["zeppelin"]) == 1.0
    assert word_coverage(turns, []) == 1.0

    def best_lexical(query: str) -> float:
        answer = searches.search_for(T, "agent:sales", query, serving="person:li")
        assert answer.parameters == searches.parameters  # (the parameters asked for, not those ranked with)
        return max(item.scores["lexical"] for item in answer.items if item.kind is ItemKind.TURN)

    covered = word_coverage(turns, [t for t in searches.analyzer.terms("quokka zeppelin")])
    assert best_lexical("quokka zeppelin") == pytest.approx(DEFAULT_SEARCH_PARAMETERS.lexical_weight * covered,
                                                            abs=1e-5)
    assert best_lexical("quokka invoice") == pytest.approx(DEFAULT_SEARCH_PARAMETERS.lexical_weight, abs=1e-5)
    searches.parameters = searches.parameters.model_copy(update={"coverage_power": 0.0})  # off
    assert best_lexical("quokka zeppelin") == pytest.approx(DEFAULT_SEARCH_PARAMETERS.lexical_weight, abs=1e-5)
    # Han/kana characters and bigrams are no words of their own (a bigram across two words is in no turn): not counted
    assert best_lexical("quokka 总喜") == pytest.approx(DEFAULT_SEARCH_PARAMETERS.lexical_weight, abs=1e-5)
    # no meaning to move the weight to: nothing moves
    searches.parameters = DEFAULT_SEARCH_PARAMETERS.model_copy(update={"semantic_weight": 0.0})
    assert best_lexical("quokka zeppelin") == pytest.approx(DEFAULT_SEARCH_PARAMETERS.lexical_weight, abs=1e-5)
    searches.embedder = None
    searches.parameters = DEFAULT_SEARCH_PARAMETERS
    assert best_lexical("quokka zeppelin") == pytest.approx(DEFAULT_SEARCH_PARAMETERS.lexical_weight, abs=1e-5)
