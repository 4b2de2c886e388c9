"""A perspective as served: the items in their clarity tiers, the counts, and the context block within a budget.

The context block is markdown. Every line that names a fact ends with its short id `[#0123abcd]` (the first
8 hex digits); `lines` maps each line to the full fact ids it stands for, counts and forgotten lines included,
so every line of a served context is traceable.
"""

from __future__ import annotations

import secrets
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from domain.activation import ActivationParameters, Tier, demote, estimate_tokens

DEFAULT_BUDGET_TOKENS = 1_200
"""Enough for the 4 full and 7 gist facts with their reasons, and a screen of markers, in a main session's
context (a few percent of a 32k window)."""

MINIMUM_BUDGET_TOKENS = 40

FADED_SHOWN = 5
"""How many of the forgotten facts the evidence names, strongest first, with why they faded (the rest are only
counted, as in the block)."""


class PerspectiveItem(BaseModel):
    """One fact seen from the viewpoint, at the clarity of its tier."""

    model_config = ConfigDict(extra="forbid")

    tier: Tier
    fact_id: str
    subject: str
    relation: str
    object: str
    subject_label: str
    object_label: str
    scope: str
    reason: str | None = None
    confidence: float
    provenance: str = ""
    activation: float
    base_level: float
    spread: float
    hops: int
    about: str
    """The node it was reached through: the "about X" of a count."""
    about_label: str
    path: list[str]
    """Refs from a source to the fact's far end."""
    path_fact_ids: list[str]
    """The facts crossed on that path, this one last."""
    salience: str = ""
    """Why it is as clear as it is, in words: its memory tier, what it last got and when on that tier's clock,
    its uses, what out-ranked it ("episodic (Li's): last used 14 sessions of Li's ago (recalled 2026-05-02) ·
    3 uses"). Empty in evidence stored before it was said."""


class FadedFact(BaseModel):
    """A fact the viewpoint reached that fell below the threshold (forgotten: only counted), and why."""

    fact_id: str
    subject_label: str
    relation: str
    object_label: str
    scope: str
    activation: float
    base_level: float
    hops: int
    salience: str


class CountGroup(BaseModel):
    """Facts above the threshold beyond the caps, counted per neighbour: "7 more about contract v3"."""

    about: str
    label: str
    count: int
    fact_ids: list[str]


class ContextLine(BaseModel):
    text: str
    fact_ids: list[str] = Field(default_factory=list)


class RecallRecord(BaseModel):
    """The recall this read recorded, if any: its mode, facts and log position (None while `held`: coalesced
    uses are written by the next flush, domain/application/recall_buffer.py)."""

    mode: str
    fact_ids: list[str]
    position: int | None = None
    held: bool = False


def new_served_id(at: datetime) -> str:
    """An id for a served read: 32 hex digits, the first 12 the serving moment in milliseconds (so ids sort by
    time, and the evidence store appends in key order and drops the oldest first), then 80 random bits."""
    return f"{int(at.timestamp() * 1000) & 0xFFFF_FFFF_FFFF:012x}{secrets.randbits(80):020x}"


class Standpoint(BaseModel):
    """Where a perspective is taken from: the agent, the person it serves, what it has in mind, at which moment,
    and how deep (the served perspective and the API's answer derive from it)."""

    agent: str
    serving: str | None = None
    focus: list[str] = Field(default_factory=list)
    as_of: datetime | None = None
    deeper: bool = False


class Perspective(Standpoint):
    """Everything served and everything needed to reproduce it (the evidence `noumena explain` prints)."""

    perspective_id: str
    tenant: str
    served_at: datetime
    """The moment decay was computed at: now, or `as_of`."""
    log_position: int
    """The last log position the index had applied: the input state."""
    parameters: ActivationParameters
    budget_tokens: int
    items: list[PerspectiveItem]
    count_groups: list[CountGroup]
    forgotten: int
    counts: dict[str, int]
    context: str
    context_tokens: int
    lines: list[ContextLine]
    unknown_refs: list[str] = Field(default_factory=list)
    recall: RecallRecord | None = None
    faded: list[FadedFact] = Field(default_factory=list)
    """The strongest forgotten facts (at most `FADED_SHOWN`), each with why it faded."""

    def fact_ids(self, *tiers: Tier) -> list[str]:
        return [item.fact_id for item in self.items if not tiers or item.tier in tiers]


def short_id(fact_id: str) -> str:
    return fact_id[:8]


def _line(item: PerspectiveItem, tier: Tier) -> list[str]:
    ref = f"[#{short_id(item.fact_id)}]"
    edge = f"{item.subject_label} —{item.relation}→ {item.object_label}"
    if tier is Tier.FULL:
        details = [f"why: {item.reason}" if item.reason else "why: (no reason recorded)",
                   f"confidence {item.confidence:.2f}"]
        if item.provenance:
            details.append(f"from {item.provenance}")
        if item.scope != "org":
            details.append(f"scope {item.scope}")
        return [f"- **{item.subject_label}** —{item.relation}→ **{item.object_label}** {ref}",
                "  " + " · ".join(details)]
    if tier is Tier.GIST:
        reason = item.reason or ""
        if len(reason) > 80:
            reason = reason[:77] + "..."
        return [f"- {edge}" + (f": {reason}" if reason else "") + f" {ref}"]
    return [f"- {edge} {ref}"]


SECTIONS = {Tier.FULL: "## Clear", Tier.GIST: "## In brief", Tier.MARKER: "## Also", Tier.COUNT: "## More"}


Line = tuple[str, list[str]]
"""A line of the context block and the fact ids it stands for."""


class _Layout:
    """Lays out lines; each fact's lines at each tier are rendered and counted once (the budget loop asks often)."""

    def __init__(self) -> None:
        self._rendered: dict[tuple[str, Tier], list[tuple[str, int]]] = {}

    def item_lines(self, item: PerspectiveItem) -> list[tuple[str, int]]:
        key = (item.fact_id, item.tier)
        lines = self._rendered.get(key)
        if lines is None:
            lines = self._rendered[key] = [(text, _cost(text)) for text in _line(item, item.tier)]
        return lines

    def compose(self, header: list[str], items: list[PerspectiveItem], groups: dict[str, CountGroup],
                forgotten: int, collapse_counts: bool) -> tuple[list[Line], int]:
        lines: list[Line] = [(h, []) for h in header]
        cost = sum(_cost(h) for h in header)
        for tier in (Tier.FULL, Tier.GIST, Tier.MARKER):
            shown = [i for i in items if i.tier is tier]
            if shown:
                lines.append((SECTIONS[tier], []))
                cost += _cost(SECTIONS[tier])
                for item in shown:
                    for text, tokens in self.item_lines(item):
                        lines.append((text, [item.fact_id]))
                        cost += tokens
        tail: list[Line] = []
        counted = [g for g in groups.values() if g.count]
        if counted or forgotten:
            tail.append((SECTIONS[Tier.COUNT], []))
        if collapse_counts and counted:
            ids = [fact_id for g in counted for fact_id in g.fact_ids]
            tail.append((f"- {len(ids)} more about {len(counted)} things", ids))
        else:
            for group in sorted(counted, key=lambda g: (-g.count, g.about)):
                tail.append((f"- {group.count} more about {group.label}", list(group.fact_ids)))
        if forgotten:
            tail.append((f"- {forgotten} more below the threshold (not recalled now)", []))
        cost += sum(_cost(text) for text, _ids in tail)
        return lines + tail, cost


def _cost(text: str) -> int:
    """Tokens of one line with its newline: summed over lines, never less than the estimate of the whole."""
    return estimate_tokens(text + "\n")


def fit_to_budget(header: list[str], items: list[PerspectiveItem], groups: dict[str, CountGroup], forgotten: int,
                  budget_tokens: int) -> tuple[list[PerspectiveItem], dict[str, CountGroup], list[ContextLine]]:
    """Lay out the context block; while it exceeds the budget, demote the weakest shown item by one tier
    (full -> gist -> marker -> counted), then merge the count lines into one, then drop the header's tail.

    Items are in rank order. Returns the items still shown (tiers updated), the count groups and the lines.
    """
    budget = max(budget_tokens, MINIMUM_BUDGET_TOKENS)
    items = [i.model_copy() for i in items]
    groups = {k: g.model_copy(deep=True) for k, g in groups.items()}
    layout = _Layout()
    collapse = False
    while True:
        lines, cost = layout.compose(header, items, groups, forgotten, collapse)
        if cost <= budget:
            break
        if items:
            weakest = items[-1]
            lowered = demote(weakest.tier)
            if lowered is Tier.COUNT:
                items.pop()
                group = groups.setdefault(weakest.about, CountGroup(about=weakest.about, label=weakest.about_label,
                                                                     count=0, fact_ids=[]))
                group.count += 1
                group.fact_ids.insert(0, weakest.fact_id)
            else:
                weakest.tier = lowered  # it stays the last of its new tier: rank order holds within tiers
            continue
        if not collapse:
            collapse = True
            continue
        if len(header) > 1:
            header = header[:1]
            continue
        lines = lines[: max(1, len(lines) - 1)]
        break
    return items, groups, [ContextLine(text=text, fact_ids=ids) for text, ids in lines]
