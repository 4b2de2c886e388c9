"""The seed's story (seed 000, see docs/design.md "Sources") as envelopes: Wang's export company, his agent, the
sales and customer-service agents, the key customer Li, legal, the quote, contract v3, and a worker session
dispatched for a new quote.

Each envelope's `occurred_at` is when it happened in the story; the demo records each one at that moment so
that "what was believed at T" has story-sized gaps between moments.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from infra.bootstrap import Noumena, bootstrap
from infra.settings import Settings

TENANT = "wang-export"
CST = timezone(timedelta(hours=8))
START = datetime(2026, 9, 1, 9, 0, tzinfo=CST)

ENTITIES: list[tuple[str, str, list[str], bool]] = [
    ("person:wang", "王总 (Wang)", ["Wang", "王总", "王"], False),
    ("agent:wang-assistant", "Wang's agent", ["王总的助理"], False),
    ("agent:sales", "the sales agent", ["销售智能体"], False),
    ("agent:cs", "the customer-service agent", ["客服智能体"], True),
    ("person:li", "李总 (Li)", ["Li", "李总"], False),
    ("team:legal", "法务 (legal)", ["legal", "法务"], False),
    ("file:quotes/q3.xlsx", "Q3 quote for Li (USD)", ["上一版报价"], False),
    ("file:contracts/li-v3.docx", "contract v3", ["合同 v3", "contract v3"], False),
    ("ticket:legal/118", "legal approval of contract v3", ["法务审批"], False),
    ("stage:drafting", "drafting", [], False),
    ("stage:legal-review", "waiting on legal review", [], False),
    ("memory:li-monthly-settlement", "Li prefers monthly settlement", ["月结"], False),
    ("memory:quote-failed-fx", "The last quote failed because of the exchange rate", ["汇率"], False),
    ("memory:refund-policy", "Refunds within 30 days of delivery", [], False),
    ("person:jia", "客户甲 (customer Jia)", ["甲"], False),
    ("person:yi", "客户乙 (customer Yi)", ["乙"], False),
    ("ticket:cs/7", "Jia: late delivery", [], False),
    ("ticket:cs/9", "Yi: damaged goods, private address change", [], False),
]


def _envelope(n: int, day: float, type_: str, payload: dict[str, Any]) -> dict[str, Any]:
    return {
        "event_id": f"story-{n:03d}",
        "tenant": TENANT,
        "type": type_,
        "occurred_at": (START + timedelta(days=day)).isoformat(),
        "payload": payload,
    }


def _fact(subject: str, relation: str, obj: str, reason: str | None = None, scope: str = "org",
          session: str | None = None, messages: tuple[str, ...] = (), **extra: Any) -> dict[str, Any]:
    payload: dict[str, Any] = {"subject": subject, "relation": relation, "object": obj, "scope": scope}
    if reason:
        payload["reason"] = reason
    if session:
        payload["source"] = {"session_id": session, "message_ids": list(messages), "actor": "agent:wang-assistant"}
    payload.update(extra)
    return payload


def story_envelopes() -> list[dict[str, Any]]:
    """The whole story in order. Days are relative to 2026-09-01 09:00 +08:00."""
    steps: list[tuple[float, str, dict[str, Any]]] = []
    for ref, label, aliases, hub in ENTITIES:
        steps.append((0, "entity.registered", {"ref": ref, "label": label, "aliases": aliases, "hub": hub}))
    steps += [
        (0, "fact.asserted", _fact("agent:wang-assistant", "serves", "person:wang", "Wang's personal agent")),
        (0, "fact.asserted", _fact("agent:sales", "handles_account", "person:li", "Li is the key account")),
        (0, "fact.asserted", _fact("agent:cs", "serves", "person:jia", "customer service for all customers")),
        (0, "fact.asserted", _fact("agent:cs", "serves", "person:yi", "customer service for all customers")),
        (0, "fact.asserted", _fact("agent:cs", "knows_policy", "memory:refund-policy", "role knowledge")),
        (0, "session.started", {"session_id": "wang-main", "agent": "agent:wang-assistant", "kind": "main",
                                "serving": "person:wang"}),
        # the first call with Li
        (1, "message.appended", {"session_id": "wang-main", "message_id": "m1", "role": "user",
                                 "content": "李总来电话了，想谈新合同。"}),
        (1, "fact.asserted", _fact("file:contracts/li-v3.docx", "contract_with", "person:li",
                                   "the new contract under negotiation", session="wang-main", messages=("m1",))),
        (1, "fact.asserted", _fact("file:contracts/li-v3.docx", "stage", "stage:drafting", "first draft",
                                   session="wang-main", messages=("m1",))),
        (2, "fact.asserted", _fact("file:quotes/q3.xlsx", "quote_for", "person:li", "quoted in USD",
                                   session="wang-main")),
        (2, "fact.asserted", _fact("file:contracts/li-v3.docx", "references", "file:quotes/q3.xlsx",
                                   "合同 v3 引用了这份报价: the contract's prices come from the quote",
                                   session="wang-main")),
        (3, "fact.asserted", _fact("person:wang", "discussed_privately_with", "person:li",
                                   "a private call about a personal discount", scope="person:wang",
                                   session="wang-main")),
        # the third call: monthly settlement
        (5, "message.appended", {"session_id": "wang-main", "message_id": "m7", "role": "user",
                                 "content": "第三次通话：李总说他们只做月结。"}),
        # the runtime compacts the session: consolidation ("sleep") turns it into relations
        (5, "session.compacted", {
            "session_id": "wang-main", "through_message_id": "m7",
            "summary": "Three calls with Li about contract v3; Li only does monthly settlement.",
            "mentions": [{"ref": "person:li", "label": "李總"}],
            "facts": [_fact("person:li", "prefers", "memory:li-monthly-settlement", "Li said so on the third call",
                            scope="person:wang", session="wang-main", messages=("m7",), confidence=0.9)]}),
        # the quote fails; the contract goes to legal
        (8, "session.compacted", {
            "session_id": "wang-main", "through_message_id": "m7",
            "summary": "The USD quote failed on the exchange rate.",
            "facts": [_fact("file:quotes/q3.xlsx", "failed_because", "memory:quote-failed-fx",
                            "USD moved 4% against CNY before Li could sign", session="wang-main")]}),
        (9, "fact.asserted", _fact("file:contracts/li-v3.docx", "stage", "stage:legal-review",
                                   "sent to legal for clause 7", session="wang-main")),
        (9, "fact.asserted", _fact("file:contracts/li-v3.docx", "waiting_on", "ticket:legal/118",
                                   "legal must approve the payment terms")),
        (9, "fact.asserted", _fact("ticket:legal/118", "assigned_to", "team:legal", "legal owns approvals")),
        # customer service: two customers, kept apart
        (10, "fact.asserted", _fact("person:jia", "reported", "ticket:cs/7", "parcel 3 days late",
                                    scope="person:jia")),
        (10, "fact.asserted", _fact("person:yi", "reported", "ticket:cs/9", "damaged goods; new home address",
                                    scope="person:yi")),
        # Wang asks for a new quote: a worker is dispatched
        (12, "message.appended", {"session_id": "wang-main", "message_id": "m12", "role": "user",
                                  "content": "给李总再出一版报价"}),
        (12, "worker.dispatched", {"session_id": "wang-main", "worker_session_id": "w-quote-li",
                                   "task": "a new quote for Li: CNY, monthly settlement",
                                   "about": ["person:li", "file:quotes/q3.xlsx"]}),
        (12.1, "message.appended", {"session_id": "w-quote-li", "message_id": "w1", "role": "assistant",
                                    "content": "Read 3 past quotes, the legal email and the 400-line order sheet."}),
        (12.2, "worker.reported", {"session_id": "w-quote-li", "status": "waiting",
                                   "summary": "draft ready, waiting on the freight rate"}),
        # a follow-up about freight is routed to the same worker
        (13, "message.appended", {"session_id": "wang-main", "message_id": "m13", "role": "user",
                                  "content": "运费涨了，报价里改一下。"}),
        (13, "worker.dispatched", {"session_id": "wang-main", "worker_session_id": "w-quote-li",
                                   "task": "follow-up: the freight rate changed",
                                   "about": ["person:li", "file:quotes/q3.xlsx"]}),
        (13.1, "worker.reported", {"session_id": "w-quote-li", "status": "working",
                                   "summary": "re-pricing with the new freight rate"}),
    ]
    return [_envelope(n, day, type_, payload) for n, (day, type_, payload) in enumerate(steps, start=1)]


MOMENTS: list[tuple[str, datetime]] = [
    ("after the first call (day 1)", START + timedelta(days=1, hours=1)),
    ("after the third call (day 5)", START + timedelta(days=5, hours=1)),
    ("contract v3 sent to legal (day 9)", START + timedelta(days=9, hours=1)),
    ("now (day 13)", START + timedelta(days=14)),
]


class StoryClock:
    """Transaction time for the demo: each event is recorded at the story moment it happened."""

    def __init__(self) -> None:
        self.now = datetime(2026, 9, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


def build_story(home: Path, before_each: Callable[[Noumena, StoryClock, dict[str, Any]], None] | None = None
                ) -> tuple[Noumena, StoryClock]:
    """Ingest the story into a store at `home`, one envelope at a time, each recorded at its story time.

    `before_each(app, clock, envelope)` runs before each envelope is ingested (the perspective story uses it to
    serve perspectives and record recalls at their moments between envelopes)."""
    clock = StoryClock()
    app = bootstrap(Settings(home=home, event_store="sqlite"), clock=clock)
    app.application.tenants.create_tenant(TENANT, "Wang's export company")
    ingestor = app.application.ingestor
    for envelope in story_envelopes():
        if before_each is not None:
            before_each(app, clock, envelope)
        clock.now = datetime.fromisoformat(envelope["occurred_at"]).astimezone(UTC)
        result = ingestor.ingest([envelope])
        if result.rejected:
            raise RuntimeError(f"the story itself was rejected: {result.rejected[0].reason}")
        if envelope["type"] == "session.compacted":
            app.on_stored.drain(60)  # consolidation runs in the background; the story waits for its "sleep"
    return app, clock
