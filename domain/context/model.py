"""The context's vocabulary: its roles, its parameters (every default, documented), the served `Context` and
its blocks, lines and omissions (the evidence `noumena explain` prints), and the budget error."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, model_validator

from domain.activation import Tier
from domain.errors import DomainError
from domain.perspective import Perspective, RecallRecord
from domain.search import SearchAnswer

CONSTRAINT_RELATIONS: tuple[str, ...] = (
    "prefers", "dislikes", "must", "must_not", "never", "always", "requires", "forbids", "prohibits",
    "decided", "agreed", "settlement_preference", "payment_terms", "currency", "deadline", "budget_limit",
    "failed_because", "rejected_because",
)
"""Relation names whose current facts are hard constraints: preferences and dislikes, obligations and
prohibitions, decisions and agreements, terms (settlement, payment, currency, deadline, budget), and the
conclusions of failures (why a quote failed constrains the next one). Seed 004: "已做的决策、用户给的约束、
偏好与禁忌" must survive every compression, and of a failed attempt "保留失败结论"."""


class ContextRole(StrEnum):
    CONSTRAINTS = "constraints"
    PERSPECTIVE = "perspective"
    WORKERS = "workers"
    SUMMARY = "summary"
    TURNS = "turns"


ROLE_ORDER = (ContextRole.CONSTRAINTS, ContextRole.PERSPECTIVE, ContextRole.WORKERS, ContextRole.SUMMARY,
              ContextRole.TURNS)

SHRINK_ORDER = ("turn", "summary", "count", "marker", "gist", "recalled", "worker", "full")
"""What is cut first when the whole does not fit: the kinds of units, lowest value first. Hard constraints are
not in the list: they are never cut."""


class ContextParameters(BaseModel):
    """Every default of context assembly, documented; tune on real prompts."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    budget_tokens: int = Field(default=3_000, ge=1)
    """The default budget of the whole block (by `estimate_tokens`). About 10% of a 32k window."""

    recent_turns: int = Field(default=8, ge=0)
    """K: the last K turns go in verbatim. Source: seed 004 (最近 K 轮原文，K 取 6 到 10)."""

    max_turn_chars: int = Field(default=2_000, ge=40)
    """A turn longer than this is cut at this many characters and marked (a pasted document is not a turn)."""

    constraints_share: float = Field(default=0.15, ge=0, le=1)
    perspective_share: float = Field(default=0.40, ge=0, le=1)
    """0.40 of the default 3,000 is the perspective's own default budget (1,200)."""
    workers_share: float = Field(default=0.10, ge=0, le=1)
    summary_share: float = Field(default=0.10, ge=0, le=1)
    turns_share: float = Field(default=0.25, ge=0, le=1)
    """The shares of the budget per role (seed 003: 按角色分配预算). Unused share passes down to the next role."""

    constraint_relations: tuple[str, ...] = CONSTRAINT_RELATIONS

    max_focus: int = Field(default=6, ge=0)
    """At most this many focus entities (mentions in the message first, then live workers' subjects, then
    mentions in the recent turns, newest first): each more focus thins the others' share of W."""

    recalled_facts: int = Field(default=8, ge=0, le=50)
    """Up to this many facts recalled by the request's content (search) join the perspective's block, first,
    within its budget. Source: seed 004 (about 8 injected after the system prompt)."""

    max_facts_shown: int = Field(default=12, ge=1)
    """At most this many facts shown by name in the perspective's block (recalled facts included): the weakest
    of the perspective's own go first. A main session carries relationships, not a catalogue: about 8 recalled
    (seed 004) and the perspective's 4 clearest (Cowan 4 +/- 1); when recall brings fewer, the perspective's next
    fill in (the perspective ranks a source's own facts, so it has a dozen to offer wherever the viewer stands on
    many)."""

    focus_from_live_workers: bool = True
    """What live workers are about is in focus: the main session is managing that work now. Our choice."""

    @model_validator(mode="after")
    def _shares_fit(self) -> ContextParameters:
        if sum(self.share(role) for role in ROLE_ORDER) > 1.0 + 1e-9:
            raise ValueError("the role shares add up to more than 1")
        return self

    def share(self, role: ContextRole) -> float:
        return float(getattr(self, f"{role.value}_share"))


DEFAULT_CONTEXT_PARAMETERS = ContextParameters()


class ContextBudgetExceeded(DomainError):
    """The hard constraints (with the header) alone need more tokens than the budget: nothing is cut silently."""

    def __init__(self, needed: int, budget: int, fact_ids: Sequence[str]) -> None:
        super().__init__(f"the hard constraints alone need {needed} tokens but the budget is {budget}: raise the "
                         f"budget (they are never cut); facts: {', '.join(fact_ids) or '-'}", field="budget_tokens")
        self.needed = needed
        self.budget = budget


class BlockLine(BaseModel):
    """One line of the block and the ids it stands for."""

    text: str
    fact_ids: list[str] = Field(default_factory=list)
    message_ids: list[str] = Field(default_factory=list)
    summary_ids: list[str] = Field(default_factory=list)
    session_ids: list[str] = Field(default_factory=list)


class Omission(BaseModel):
    """A unit that was cut, why (`role`: to fit its role's budget; `total`: to fit the whole) and its ids."""

    role: ContextRole
    kind: str
    stage: str
    text: str
    ids: list[str]


class ContextBlock(BaseModel):
    role: ContextRole
    budget_tokens: int
    """The role's budget: its share, plus what the roles above left unused."""
    tokens: int
    lines: list[BlockLine]
    fact_ids: list[str] = Field(default_factory=list)
    message_ids: list[str] = Field(default_factory=list)
    summary_ids: list[str] = Field(default_factory=list)
    session_ids: list[str] = Field(default_factory=list)


class FocusRef(BaseModel):
    ref: str
    label: str
    found_in: str
    """`message`, `turn <message id>` or `worker <session id>`."""


class ContextAsked(BaseModel):
    """What a context is compiled for: a main session (its agent, the person it serves) and the request's message
    (the served context and the API's answer derive from it)."""

    session_id: str
    agent: str
    serving: str | None = None
    message: str | None = None


class Context(ContextAsked):
    """A served context and everything needed to reproduce it (the evidence `noumena explain` prints)."""

    context_id: str
    tenant: str
    served_at: datetime
    budget_tokens: int
    parameters: ContextParameters
    ontology_version: int
    """The tenant stream version the session state was read at."""
    focus: list[FocusRef]
    ambiguous: list[str] = Field(default_factory=list)
    """Names found in the text that several entities share (focus on none of them)."""
    perspective: Perspective | None
    constraint_fact_ids: list[str]
    deduplicated: list[str] = Field(default_factory=list)
    """Facts shown as hard constraints and therefore left out of the perspective's lines."""
    blocks: list[ContextBlock]
    omitted: list[Omission]
    text: str
    tokens: int
    recall: RecallRecord | None = None
    search: SearchAnswer | None = None
    """The search run with the message (recall by content), when there was a message and search is on."""
    recalled_fact_ids: list[str] = Field(default_factory=list)
    """The facts the block shows because the search recalled them (not already shown otherwise)."""

    def shown_clearly(self) -> list[str]:
        """The facts the block shows clearly (a served context's recall): the hard constraints, the facts recalled
        by content, and the perspective's full and gist items, in block order."""
        clear = set(self.constraint_fact_ids) | set(self.recalled_fact_ids)
        if self.perspective is not None:
            clear |= {i.fact_id for i in self.perspective.items if i.tier in (Tier.FULL, Tier.GIST)}
        shown: dict[str, None] = {}
        for block in self.blocks:
            if block.role in (ContextRole.CONSTRAINTS, ContextRole.PERSPECTIVE):
                for fact_id in block.fact_ids:
                    if fact_id in clear:
                        shown[fact_id] = None
        return list(shown)
