"""Context assembly: the seed's story told to Wang's main session, the budget rules, the summary tree,
mentions in Chinese and Latin text, and the evidence that reproduces a served context. Real SQLite store."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from demo.story import START, TENANT, build_story
from domain.activation import estimate_tokens
from domain.commands import AppendMessage, AssertFact, CompactSession, Source, StartSession
from domain.context import (
    SHRINK_ORDER,
    Context,
    ContextBudgetExceeded,
    ContextParameters,
    ContextRole,
    assemble,
    line_tokens,
    text_tokens,
)
from domain.errors import InvalidInput
from domain.facts import FactState, FactStatus
from domain.mentions import MentionIndex
from domain.summaries import FAN_IN, SummaryTree
from infra.bootstrap import Noumena
from projections.contexts import Contexts, is_context_id
from projections.perspectives import Perspectives
from tests.properties import examples

WANG_MAIN, WORKER = "wang-main", "w-quote-li"
ASK = "给李总再出一版报价"
WORKER_MESSAGE = "Read 3 past quotes, the legal email and the 400-line order sheet."
NOW = START + timedelta(days=14)


class Story:
    def __init__(self, home: Path) -> None:
        self.app, self.clock = build_story(home)
        self.clock.now = NOW.astimezone(UTC)
        self.perspectives = Perspectives(self.app.log, self.clock)
        self.contexts = Contexts(self.perspectives, self.app.service, self.app.log, self.clock)

    @property
    def noumena(self) -> Noumena:
        return self.app

    def fact_id(self, subject: str, relation: str, obj: str) -> str:
        for fact in self.app.service.ontology(TENANT).current_facts():
            if (fact.subject, fact.relation, fact.object) == (subject, relation, obj):
                return fact.fact_id
        raise LookupError((subject, relation, obj))

    def compact(self, count: int, session_id: str = WANG_MAIN) -> None:
        for n in range(count):
            self.app.service.execute(CompactSession(
                tenant=TENANT, session_id=session_id, through_message_id="m13",
                summary=f"Compaction {n}: Wang and his agent talked about Li's contract, round {n}. More detail."))

    def close(self) -> None:
        self.app.close()


@pytest.fixture
def story(tmp_path: Path) -> Iterator[Story]:
    it = Story(tmp_path / "home")
    yield it
    it.close()


@pytest.fixture(scope="module")
def summarized_story(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Story]:
    """The story with 23 more compactions of Wang's main session: a summary tree of folded nodes and leaves."""
    it = Story(tmp_path_factory.mktemp("summarized") / "home")
    it.compact(23)
    yield it
    it.close()


def _block(context: Context, role: ContextRole) -> str:
    return "\n".join(line.text for b in context.blocks if b.role is role for line in b.lines)


def _ids(context: Context, role: ContextRole, kind: str) -> list[str]:
    return [i for b in context.blocks if b.role is role for i in getattr(b, kind)]


# ---------------------------------------------------------------------------------------------- the seed's story


def test_make_li_another_quote_brings_the_settlement_preference_the_exchange_rate_reason_the_worker_and_the_turns(
        story: Story) -> None:
    context = story.contexts.context_for(TENANT, WANG_MAIN, ASK)

    monthly = story.fact_id("person:li", "prefers", "memory:li-monthly-settlement")
    fx = story.fact_id("file:quotes/q3.xlsx", "failed_because", "memory:quote-failed-fx")
    for fact_id in (monthly, fx):  # both are hard constraints of the session's person and task
        assert fact_id in context.constraint_fact_ids
    constraints = _block(context, ContextRole.CONSTRAINTS)
    assert "Li prefers monthly settlement" in constraints
    assert "exchange rate" in constraints and "USD moved 4% against CNY" in constraints

    assert "session:w-quote-li" in _ids(context, ContextRole.WORKERS, "session_ids")
    assert "re-pricing with the new freight rate" in _block(context, ContextRole.WORKERS)
    assert _ids(context, ContextRole.TURNS, "message_ids") == ["m1", "m7", "m12", "m13"]
    assert "- [m12] user: 给李总再出一版报价" in context.text

    assert ("person:li", "message") in {(f.ref, f.found_in) for f in context.focus}
    assert [b.role for b in context.blocks] == [ContextRole.CONSTRAINTS, ContextRole.PERSPECTIVE,
                                                ContextRole.WORKERS, ContextRole.SUMMARY, ContextRole.TURNS]
    assert _ids(context, ContextRole.SUMMARY, "summary_ids") == [f"{WANG_MAIN}#1", f"{WANG_MAIN}#2"]
    assert context.tokens == estimate_tokens(context.text) <= context.budget_tokens


def test_nothing_of_the_workers_own_session_reaches_the_main_session(story: Story) -> None:
    story.app.service.execute(AssertFact(
        tenant=TENANT, subject="person:li", relation="must", object="memory:quote-failed-fx",
        reason="worker scratch: recheck the 400-line order sheet", scope=f"session:{WORKER}",
        source=Source(session_id=WORKER, message_ids=("w1",))))

    context = story.contexts.context_for(TENANT, WANG_MAIN, ASK)

    assert WORKER_MESSAGE not in context.text
    assert "400-line order sheet" not in context.text
    assert "w1" not in {m for b in context.blocks for m in b.message_ids}
    assert all(not line.text.startswith("- [w") for b in context.blocks for line in b.lines)


def test_a_context_is_assembled_for_a_main_session_only(story: Story) -> None:
    with pytest.raises(InvalidInput) as raised:
        story.contexts.context_for(TENANT, WORKER, ASK)
    assert raised.value.field == "session_id"


def test_person_scoped_constraints_are_seen_only_while_serving_that_person_and_session_ones_only_there(
        story: Story) -> None:
    service = story.app.service
    service.execute(StartSession(tenant=TENANT, session_id="sales-li", agent="agent:sales", serving="person:li"))
    service.execute(AppendMessage(tenant=TENANT, session_id="sales-li", message_id="s1", role="user",
                                  content="李总 wants a new quote"))
    service.execute(AssertFact(tenant=TENANT, subject="person:li", relation="requires", object="memory:li-monthly"
                               "-settlement", reason="said in this session", scope="session:wang-main"))
    monthly = story.fact_id("person:li", "prefers", "memory:li-monthly-settlement")
    in_wang_session = story.fact_id("person:li", "requires", "memory:li-monthly-settlement")

    sales = story.contexts.context_for(TENANT, "sales-li", "李总")
    wang = story.contexts.context_for(TENANT, WANG_MAIN, ASK)

    assert monthly not in sales.constraint_fact_ids and monthly not in sales.text  # scoped person:wang
    assert in_wang_session not in sales.constraint_fact_ids
    assert {monthly, in_wang_session} <= set(wang.constraint_fact_ids)


def test_a_hard_constraint_is_shown_once_not_again_in_the_perspective(story: Story) -> None:
    context = story.contexts.context_for(TENANT, WANG_MAIN, ASK)

    perspective_ids = set(_ids(context, ContextRole.PERSPECTIVE, "fact_ids"))
    assert not perspective_ids & set(context.constraint_fact_ids)
    assert context.text.count("Li prefers monthly settlement") >= 1
    assert set(context.deduplicated) <= set(context.constraint_fact_ids)


def test_every_line_carries_the_ids_it_came_from(summarized_story: Story) -> None:
    context = summarized_story.contexts.context_for(TENANT, WANG_MAIN, ASK)

    for block in context.blocks:
        for line in block.lines:
            ids = line.fact_ids + line.message_ids + line.summary_ids + line.session_ids
            assert line.text.startswith("#") or ids or "below the threshold" in line.text, line.text
    summary = next(b for b in context.blocks if b.role is ContextRole.SUMMARY)
    assert f"{WANG_MAIN}#1" in summary.summary_ids and f"{WANG_MAIN}#20" in summary.summary_ids


# ---------------------------------------------------------------------------------------------- the summary tree


def test_every_ten_compactions_fold_into_one_node_and_the_frontier_covers_each_leaf_once() -> None:
    leaves = [(f"s#{n}", f"Summary {n}. Detail that is dropped.") for n in range(1, 124)]

    tree = SummaryTree.build("s", leaves)
    frontier = tree.frontier()

    assert [n.level for n in frontier] == [2, 1, 1, 0, 0, 0]
    assert [k for n in frontier for k in n.compaction_ids] == [k for k, _ in leaves]
    top = frontier[0]
    assert len(top.child_ids) == FAN_IN and all(tree.nodes[c].level == 1 for c in top.child_ids)
    assert "Summary 1" in top.text and "Detail" not in tree.nodes[top.child_ids[0]].text
    again = SummaryTree.build("s", leaves[:50])
    again.extend(leaves)
    assert again.frontier() == frontier


def test_the_rolling_summary_is_the_frontier_oldest_first(summarized_story: Story) -> None:
    context = summarized_story.contexts.context_for(TENANT, WANG_MAIN, ASK)

    leaves = len(summarized_story.app.service.ontology(TENANT).sessions[WANG_MAIN].summaries)
    summary = _block(context, ContextRole.SUMMARY)
    lines = [line for line in summary.split("\n") if line.startswith("- (")]
    assert len(lines) == leaves // FAN_IN + leaves % FAN_IN
    assert lines[0].startswith(f"- ({WANG_MAIN}#L1-") and f"{WANG_MAIN}#1 … {WANG_MAIN}#10" in lines[0]
    assert lines[-1].startswith(f"- ({WANG_MAIN}#{leaves})")


# ---------------------------------------------------------------------------------------------- mentions


def test_mentions_are_found_by_label_and_alias_in_chinese_and_latin_text() -> None:
    index = MentionIndex()
    index.set_names("person:li", ["李总 (Li)", "Li", "李总"])
    index.set_names("person:wang", ["王总 (Wang)", "Wang", "王"])
    index.set_names("file:contracts/li-v3.docx", ["contract v3", "合同 v3"])
    index.set_names("person:li-other", ["李總 (Li)"])

    def refs(text: str) -> list[str]:
        return [m.ref for m in index.find(text) if m.ref]

    assert refs("给李总再出一版报价") == ["person:li"]
    assert refs("給李總再出一版報價") == ["person:li"]  # traditional folds to simplified
    assert refs("Li, call me") == ["person:li"] and refs("late delivery") == []
    assert refs("the ＣＯＮＴＲＡＣＴ　Ｖ３ draft") == ["file:contracts/li-v3.docx"]  # full width, case
    assert refs("合同v3 要改") == ["file:contracts/li-v3.docx"]
    assert refs("王说") == []  # one character is too little to go on
    assert [m.ambiguous for m in index.find("李总 (Li) called")] == [("person:li", "person:li-other")]


def test_an_entity_renamed_or_registered_after_the_first_context_is_found_by_its_new_name(story: Story) -> None:
    from domain.commands import RegisterEntity

    story.contexts.context_for(TENANT, WANG_MAIN, ASK)
    story.app.service.execute(RegisterEntity(tenant=TENANT, ref="person:zhao", label="赵经理 (Zhao)",
                                             aliases=("赵经理",)))

    context = story.contexts.context_for(TENANT, WANG_MAIN, "让赵经理看一下")

    assert ("person:zhao", "message") in {(f.ref, f.found_in) for f in context.focus}


# ---------------------------------------------------------------------------------------------- budgets


def _omitted_kinds(context: Context) -> list[int]:
    order = {kind: k for k, kind in enumerate(SHRINK_ORDER)}
    return [order[o.kind] for o in context.omitted if o.stage == "total"]


@settings(max_examples=examples(0.2), suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(budget=st.integers(min_value=1, max_value=4_000))
def test_the_block_never_exceeds_the_budget_and_cuts_in_order(summarized_story: Story, budget: int) -> None:
    try:
        context = summarized_story.contexts.context_for(TENANT, WANG_MAIN, ASK, budget_tokens=budget)
    except ContextBudgetExceeded as error:
        assert error.needed > budget
        return
    assert estimate_tokens(context.text) == context.tokens <= budget
    kinds = _omitted_kinds(context)
    assert kinds == sorted(kinds)
    roles = {b.role for b in context.blocks}
    if kinds:
        assert ContextRole.TURNS not in roles or max(kinds) == 0
    if kinds and max(kinds) >= SHRINK_ORDER.index("count"):
        assert ContextRole.SUMMARY not in roles
    if kinds and max(kinds) >= SHRINK_ORDER.index("full"):
        assert ContextRole.WORKERS not in roles
    assert ContextRole.CONSTRAINTS in roles


@given(st.lists(st.text(alphabet=st.sampled_from("ab 1,。李总ＡＢ\u3000é😀"), max_size=30), min_size=1, max_size=6))
def test_the_cached_line_counts_add_up_to_the_documented_estimate_of_the_whole(lines: list[str]) -> None:
    assert text_tokens(lines) == estimate_tokens("\n".join(lines)) <= sum(line_tokens(t) for t in lines)


def test_turns_go_first_then_the_summary_then_the_counts_and_markers() -> None:
    at = datetime(2026, 9, 1, tzinfo=UTC)
    big = [FactState(fact_id=f"{n:032x}", subject="person:li", relation="prefers", object=f"memory:m{n}",
                     scope="org", reason="x" * 300, confidence=0.9, valid_from=None, valid_to=None,
                     status=FactStatus.CURRENT, asserted_at=at) for n in range(6)]
    from domain.summaries import SummaryNode

    summary = [SummaryNode(f"s#{n}", 0, "a summary " * 10, (), (f"s#{n}",)) for n in range(3)]
    turns = [(f"m{n}", "user", "a turn " * 10) for n in range(8)]
    parameters = ContextParameters(constraints_share=0, perspective_share=0, workers_share=0, summary_share=0.3,
                                   turns_share=0.7)

    def run(budget: int) -> list[str]:
        assembly = assemble(header="# h", constraints=big, perspective=None, perspective_title="## p",
                            workers=[], summary=summary, turns=turns, label=lambda r: r, session_id="s",
                            parameters=parameters, budget_tokens=budget)
        assert estimate_tokens(assembly.text) <= budget
        assert not [o for o in assembly.omitted if o.stage == "role"]  # each role fits its share: only the total cuts
        return [o.kind for o in assembly.omitted if o.stage == "total"]

    def cost(lines: list[str]) -> int:
        return sum(estimate_tokens(t + "\n") for t in lines)

    needed = cost(["# h", "## Hard constraints (always respect)"]) + cost(
        [t for f in big for t in (f"- **person:li** —prefers→ **{f.object}** [#{f.fact_id[:8]}]",
                                  f"  why: {f.reason} · confidence 0.90")])
    summary_cost = cost(["## Earlier in this session (rolling summary)"] + [f"- ({n.summary_id}) {n.text}"
                                                                           for n in summary])
    turns_cost = cost(["## Recent turns (verbatim)"] + [f"- [{m}] {r}: {c}" for m, r, c in turns])
    assert run(needed + summary_cost + turns_cost) == []
    cut_a_little = run(needed + summary_cost + turns_cost - 30)
    cut_a_lot = run(needed + summary_cost - 10)
    assert cut_a_little and set(cut_a_little) == {"turn"}
    assert cut_a_lot[:8] == ["turn"] * 8 and cut_a_lot[8:] and set(cut_a_lot[8:]) == {"summary"}
    with pytest.raises(ContextBudgetExceeded):
        run(needed - 1)


def test_hard_constraints_that_alone_exceed_the_budget_raise_a_clear_error(story: Story) -> None:
    with pytest.raises(ContextBudgetExceeded) as raised:
        story.contexts.context_for(TENANT, WANG_MAIN, ASK, budget_tokens=60)
    assert raised.value.field == "budget_tokens" and raised.value.needed > 60
    assert "never cut" in str(raised.value)


# ---------------------------------------------------------------------------------------------- evidence


def test_a_served_context_is_recorded_explained_and_reproduced_from_the_log(story: Story) -> None:
    memory = story.app.application
    served = memory.reading.context(TENANT, WANG_MAIN, ASK)
    story.clock.now += timedelta(hours=2)
    story.app.service.execute(AppendMessage(tenant=TENANT, session_id=WANG_MAIN, message_id="m14", role="user",
                                            content="李总 says the freight is fine now"))

    assert is_context_id(served.context_id)
    explained = memory.reading.explain_context(TENANT, served.context_id)
    again = memory.reading.reproduce_context(served.context_id)

    assert explained == served
    assert again.text == served.text and again.blocks == served.blocks
    assert served.recall is not None and served.recall.mode == "pushed" and served.recall.held
    assert set(served.constraint_fact_ids) <= set(served.recall.fact_ids)
    memory.reading.flush_recalls()
    state = story.app.service.ontology(TENANT)
    for fact_id in served.recall.fact_ids:
        assert state.recall_uses[fact_id]["agent:wang-assistant"]



def test_forgetting_in_a_tenant_redacts_its_context_evidence_and_keeps_the_structure(story: Story) -> None:
    served = story.app.application.reading.context(TENANT, WANG_MAIN, ASK)

    assert story.app.evidence.erase("another-tenant") == 0
    assert story.app.evidence.erase(TENANT) == 1
    redacted = story.app.application.reading.explain_context(TENANT, served.context_id)

    dumped = redacted.model_dump_json()
    for content in ("Li prefers monthly settlement", "李总", "USD moved", "给李总再出一版报价", "freight"):
        assert content not in dumped
    assert redacted.constraint_fact_ids == served.constraint_fact_ids
    assert [b.fact_ids for b in redacted.blocks] == [b.fact_ids for b in served.blocks]


def test_forget_me_reaches_the_context_evidence_and_the_next_context(story: Story) -> None:
    memory = story.app.application
    served = memory.reading.context(TENANT, WANG_MAIN, ASK)
    assert "李总 (Li)" in served.text

    memory.forgetting.forget(TENANT, "person:li")
    again = memory.reading.context(TENANT, WANG_MAIN, ASK)

    assert "李总 (Li)" not in memory.reading.explain_context(TENANT, served.context_id).model_dump_json()
    assert "李总 (Li)" not in again.text
    assert "person:li" not in {f.ref for f in again.focus if f.found_in == "message"}


# ---------------------------------------------------------------------------------------------- entry points


def test_the_http_api_serves_a_context_in_json_and_markdown_and_explains_it_only_to_its_tenant(
        story: Story) -> None:
    from fastapi.testclient import TestClient

    from api.app import create_app

    app = create_app(story.app, start_projector=False, start_kafka=False)
    with TestClient(app) as client:
        key = app.state.keys.create(TENANT).key
        other = app.state.keys.create("someone-else").key
        headers = {"Authorization": f"Bearer {key}"}
        served = client.post(f"/v1/sessions/{WANG_MAIN}/context", json={"message": ASK}, headers=headers)
        assert served.status_code == 200, served.text
        body = served.json()
        assert body["context_id"].startswith("ctx-") and "Li prefers monthly settlement" in body["text"]
        assert [b["role"] for b in body["blocks"]][0] == "constraints"
        markdown = client.post(f"/v1/sessions/{WANG_MAIN}/context?format=markdown", json={"message": ASK},
                               headers=headers)
        assert markdown.text.startswith("# Context for") and markdown.headers["x-context-id"].startswith("ctx-")
        explained = client.get(f"/v1/contexts/{body['context_id']}/explain", headers=headers)
        assert explained.status_code == 200 and explained.json()["text"] == body["text"]
        hidden = client.get(f"/v1/contexts/{body['context_id']}/explain",
                            headers={"Authorization": f"Bearer {other}"})
        assert hidden.status_code == 404
        too_small = client.post(f"/v1/sessions/{WANG_MAIN}/context", json={"message": ASK, "budget_tokens": 50},
                                headers=headers)
        assert too_small.status_code == 422 and too_small.json()["field"] == "budget_tokens"


def test_the_mcp_tool_gives_the_block_for_a_main_session(story: Story) -> None:
    import asyncio

    from api.mcp_server import build_server

    server = build_server(story.app.application, TENANT)

    result = asyncio.run(server.call_tool("context", {"session_id": WANG_MAIN, "message": ASK}))

    text = str(result)
    assert "ctx-" in text and "Li prefers monthly settlement" in text and WORKER_MESSAGE not in text


def test_the_cli_prints_the_block_and_explain_reproduces_it(story: Story, monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    from typer.testing import CliRunner

    from api.cli import app as cli

    monkeypatch.setenv("NOUMENA_HOME", str(story.app.settings.home))
    monkeypatch.setenv("NOUMENA_EVENT_STORE", "sqlite")
    monkeypatch.setenv("NOUMENA_TENANT", TENANT)

    served = CliRunner().invoke(cli, ["context", WANG_MAIN, "--message", ASK, "--json"])
    assert served.exit_code == 0, served.output
    body = json.loads(served.stdout)
    assert body["blocks"][0]["role"] == "constraints" and body["tokens"] <= body["budget_tokens"]
    explained = CliRunner().invoke(cli, ["explain", body["context_id"], "--reproduce"])
    assert explained.exit_code == 0, explained.output
    assert "identical block" in explained.stdout and "person:li (message)" in explained.stdout
    too_small = CliRunner().invoke(cli, ["context", WANG_MAIN, "--budget", "50"])
    assert too_small.exit_code == 2 and "budget" in too_small.output  # a message naming the problem, no traceback
