"""Context assembly: the budgeted block a main session puts in its prompt, compiled again for every request.

Seeds 003 and 004 (docs/design.md, "Sources"): context is a working set compiled per request from separate layers,
each with its own budget, and every piece can say why it is there. The layers, in the order they are laid out:

1. **hard constraints** — current facts the agent must respect (`CONSTRAINT_RELATIONS`: preferences,
   prohibitions, decisions, terms) about the agent, the person served, the session or a thing in focus, visible
   from this session. Never cut: if they alone do not fit, `ContextBudgetExceeded` is raised.
2. **the perspective** — relations in their clarity tiers (full, gist, marker, count), focus taken from the
   entities named in the message and the recent turns (and, by default, what the live workers are about).
3. **live workers** — each worker's task, status and last report (never the worker's own messages).
4. **the rolling summary** — the frontier of the session's summary reduction tree (domain/summaries.py).
5. **the recent turns** — the last K (8) turns verbatim (each at most `max_turn_chars`).

Budgets: each role has a share of the budget (`ContextParameters`); a role that uses less passes the rest down to
the next. When the whole still exceeds the budget (hard constraints took more than their share), units are cut in
`SHRINK_ORDER`: turns (oldest first), then summary nodes (oldest first), then the perspective's counts and
markers, then its gist lines, then workers, then its full items (weakest first). Every cut is listed in
`omitted`. Tokens are `estimate_tokens` of the rendered text; fitting sums each line's estimate plus its newline,
which is never less than the estimate of the joined text, so the block never exceeds the budget. (Counts are
cached per line, so the same turns and facts are not measured again on every request.)

Scope, exactly as the perspective sees it, but stricter for sessions: `org` facts, the served person's facts, and
facts scoped to this session only (a worker's session facts stay with the worker).

Every line carries the ids it came from: fact ids, message ids, summary ids (compaction or tree node), session
ids. Pure: the caller supplies the state, the perspective, the clock and the ids.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from functools import lru_cache

from pydantic import BaseModel, ConfigDict, Field, model_validator

from domain.activation import Tier, _is_wide
from domain.errors import DomainError
from domain.facts import FactState, FactStatus
from domain.ontology import Ontology
from domain.perspective import Perspective, PerspectiveItem, RecallRecord
from domain.search import SearchAnswer, SearchItem
from domain.sessions import SessionState
from domain.summaries import SummaryNode

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

    max_facts_shown: int = Field(default=15, ge=1)
    """At most this many facts shown by name in the perspective's block (recalled facts included): the weakest
    of the perspective's own go first. A main session carries relationships, not a catalogue."""

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


# ---------------------------------------------------------------------------------------------- the models


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


class Context(BaseModel):
    """A served context and everything needed to reproduce it (the evidence `noumena explain` prints)."""

    context_id: str
    tenant: str
    session_id: str
    agent: str
    serving: str | None = None
    message: str | None = None
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


# ---------------------------------------------------------------------------------------------- selection


def visible_scopes(session: SessionState) -> set[str]:
    """org, the served person's scope, and this session's scope: nothing of other sessions or persons."""
    scopes = {"org", f"session:{session.session_id}"}
    if session.serving and session.serving.startswith("person:"):
        scopes.add(session.serving)
    return scopes


def holds_at(fact: FactState, moment: datetime) -> bool:
    """Current in the log and, where the source gave valid time, valid at `moment`."""
    if fact.status is not FactStatus.CURRENT:
        return False
    if fact.valid_from is not None and fact.valid_from > moment:
        return False
    return fact.valid_to is None or fact.valid_to > moment


@dataclass
class ConstraintIndex:
    """Entity ref -> ids of facts with a constraint relation touching it (any status: filtered when read)."""

    relations: frozenset[str]
    by_entity: dict[str, set[str]] = field(default_factory=dict)

    @classmethod
    def from_ontology(cls, state: Ontology, relations: Iterable[str]) -> ConstraintIndex:
        index = cls(frozenset(relations))
        for fact in state.facts.values():
            index.add(fact.fact_id, fact.subject, fact.relation, fact.object)
        return index

    def add(self, fact_id: str, subject: str, relation: str, obj: str) -> None:
        if relation in self.relations:
            self.by_entity.setdefault(subject, set()).add(fact_id)
            self.by_entity.setdefault(obj, set()).add(fact_id)

    def candidates(self, anchors: Iterable[str]) -> set[str]:
        found: set[str] = set()
        for ref in anchors:
            found |= self.by_entity.get(ref, set())
        return found


def select_constraints(state: Ontology, session: SessionState, anchors: Iterable[str], moment: datetime,
                       index: ConstraintIndex) -> list[FactState]:
    """The hard constraints: current constraint facts touching an anchor, in a scope this session may see.
    Nearest scope first (session, person, org), then oldest first."""
    scopes = visible_scopes(session)
    facts = [state.facts[i] for i in index.candidates(anchors) if i in state.facts]
    chosen = [f for f in facts if f.scope in scopes and holds_at(f, moment)]
    nearness = {"session": 0, "person": 1, "org": 2}
    return sorted(chosen, key=lambda f: (nearness.get(f.scope.split(":", 1)[0], 3), f.asserted_at, f.fact_id))


def choose_focus(message_refs: Sequence[tuple[str, str]], worker_refs: Sequence[tuple[str, str]],
                 turn_refs: Sequence[tuple[str, str]], exclude: Iterable[str], parameters: ContextParameters
                 ) -> list[tuple[str, str]]:
    """(ref, where found) in priority order, without repeats or the viewer itself, at most `max_focus`."""
    skip = set(exclude)
    chosen: dict[str, str] = {}
    workers = worker_refs if parameters.focus_from_live_workers else ()
    for ref, where in (*message_refs, *workers, *turn_refs):
        if ref and ref not in skip and ref not in chosen and len(chosen) < parameters.max_focus:
            chosen[ref] = where
    return list(chosen.items())


CONSTRAINTS_HEADING = "## Hard constraints (always respect)"


def constraints_tokens(constraints: Sequence[FactState], label: Callable[[str], str]) -> int:
    """What the hard-constraint block costs (heading included; 0 when there is none)."""
    if not constraints:
        return 0
    return _cost([BlockLine(text=CONSTRAINTS_HEADING)]) + sum(_cost(constraint_lines(f, label)) for f in constraints)


def perspective_budget(parameters: ContextParameters, budget: int, constraint_tokens: int) -> int:
    """The perspective's budget: its share plus what the hard constraints left of theirs."""
    spare = max(0, int(parameters.constraints_share * budget) - constraint_tokens)
    return int(parameters.perspective_share * budget) + spare


# ---------------------------------------------------------------------------------------------- rendering


@lru_cache(maxsize=65_536)
def _wide(text: str) -> int:
    """How many characters `estimate_tokens` counts as one token each (cached: the same turns and facts come back
    with every request)."""
    return 0 if text.isascii() else sum(1 for char in text if ord(char) >= 0x2E80 and _is_wide(char))


def line_tokens(text: str) -> int:
    """`estimate_tokens` of one line and its newline."""
    wide = _wide(text)
    return wide + -(-(len(text) + 1 - wide) // 4)


def text_tokens(lines: Sequence[str]) -> int:
    """`estimate_tokens("\n".join(lines))`, from the cached per-line counts (wide characters add up)."""
    wide = sum(_wide(line) for line in lines)
    length = sum(len(line) for line in lines) + max(0, len(lines) - 1)
    return wide + -(-(length - wide) // 4)


def _cost(lines: Iterable[BlockLine]) -> int:
    return sum(line_tokens(line.text) for line in lines)


@dataclass
class _Unit:
    kind: str
    lines: list[BlockLine]
    rank: int
    """Within its kind: lower is cut first."""
    cost: int = 0
    dropped: str | None = None

    def __post_init__(self) -> None:
        self.cost = _cost(self.lines)

    @property
    def ids(self) -> list[str]:
        seen: dict[str, None] = {}
        for line in self.lines:
            for i in (*line.fact_ids, *line.message_ids, *line.summary_ids, *line.session_ids):
                seen[i] = None
        return list(seen)


@dataclass
class _Group:
    heading: list[BlockLine]
    units: list[_Unit]


@dataclass
class _Block:
    role: ContextRole
    heading: list[BlockLine]
    groups: list[_Group]
    budget: int = 0

    def live(self) -> list[_Unit]:
        return [u for g in self.groups for u in g.units if u.dropped is None]

    def cost(self) -> int:
        total = 0
        for group in self.groups:
            kept = [u.cost for u in group.units if u.dropped is None]
            if kept:
                total += sum(kept) + _cost(group.heading)
        return total + _cost(self.heading) if total else 0

    def lines(self) -> list[BlockLine]:
        out: list[BlockLine] = []
        for group in self.groups:
            kept = [u for u in group.units if u.dropped is None]
            if kept:
                out += group.heading
                for unit in kept:
                    out += unit.lines
        return self.heading + out if out else []


def _short(fact_id: str) -> str:
    return f"[#{fact_id[:8]}]"


def _provenance(fact: FactState) -> str:
    parts = []
    for p in fact.provenance[:2]:
        where = " ".join(x for x in (p.session_id or "", ",".join(p.message_ids)) if x)
        if where:
            parts.append(where)
    return "; ".join(parts)


def constraint_lines(fact: FactState, label: Callable[[str], str]) -> list[BlockLine]:
    """A hard constraint in full: the relation, why, confidence, scope and where it came from."""
    details = [f"why: {fact.reason}" if fact.reason else "why: (no reason recorded)",
               f"confidence {fact.confidence:.2f}"]
    if fact.scope != "org":
        details.append(f"scope {fact.scope}")
    source = _provenance(fact)
    if source:
        details.append(f"from {source}")
    ids = [fact.fact_id]
    return [BlockLine(text=f"- **{label(fact.subject)}** —{fact.relation}→ **{label(fact.object)}** "
                      f"{_short(fact.fact_id)}", fact_ids=ids),
            BlockLine(text="  " + " · ".join(details), fact_ids=ids)]


def item_lines(item: PerspectiveItem) -> list[BlockLine]:
    """A perspective item at its tier, in the perspective's own line format."""
    ids = [item.fact_id]
    edge = f"{item.subject_label} —{item.relation}→ {item.object_label}"
    if item.tier is Tier.FULL:
        details = [f"why: {item.reason}" if item.reason else "why: (no reason recorded)",
                   f"confidence {item.confidence:.2f}"]
        if item.provenance:
            details.append(f"from {item.provenance}")
        if item.scope != "org":
            details.append(f"scope {item.scope}")
        return [BlockLine(text=f"- **{item.subject_label}** —{item.relation}→ **{item.object_label}** "
                          f"{_short(item.fact_id)}", fact_ids=ids),
                BlockLine(text="  " + " · ".join(details), fact_ids=ids)]
    if item.tier is Tier.GIST:
        reason = item.reason or ""
        if len(reason) > 80:
            reason = reason[:77] + "..."
        return [BlockLine(text=f"- {edge}" + (f": {reason}" if reason else "") + f" {_short(item.fact_id)}",
                          fact_ids=ids)]
    return [BlockLine(text=f"- {edge} {_short(item.fact_id)}", fact_ids=ids)]


@dataclass(frozen=True)
class WorkerView:
    session_id: str
    status: str
    task: str | None
    last_report: str | None
    about: tuple[str, ...]


def worker_lines(worker: WorkerView, label: Callable[[str], str]) -> list[BlockLine]:
    """"the quote for Li is with worker W, waiting": task, status, last report and what it is about."""
    parts = [f"- worker `{worker.session_id}` ({worker.status})"]
    if worker.task:
        parts.append(f"task: {worker.task}")
    if worker.last_report:
        parts.append(f"last report: {worker.last_report}")
    if worker.about:
        parts.append("about " + ", ".join(label(ref) for ref in worker.about))
    return [BlockLine(text=" · ".join(parts), session_ids=[f"session:{worker.session_id}"])]


def summary_lines(node: SummaryNode) -> list[BlockLine]:
    if node.level == 0:
        where = node.summary_id
    else:
        where = f"{node.summary_id}, compactions {node.compaction_ids[0]} … {node.compaction_ids[-1]}"
    return [BlockLine(text=f"- ({where}) {node.text}", summary_ids=[node.summary_id, *node.compaction_ids])]


def turn_lines(message_id: str, role: str, content: str, max_chars: int) -> list[BlockLine]:
    """A turn verbatim (cut at `max_chars`, and then marked); continuation lines are indented."""
    if len(content) > max_chars:
        content = content[:max_chars] + f" … [cut at {max_chars} characters]"
    first, *rest = content.split("\n")
    ids = [message_id]
    return [BlockLine(text=f"- [{message_id}] {role}: {first}", message_ids=ids),
            *(BlockLine(text=f"  {line}", message_ids=ids) for line in rest)]


# ---------------------------------------------------------------------------------------------- assembly


@dataclass
class Assembly:
    blocks: list[ContextBlock]
    omitted: list[Omission]
    text: str
    tokens: int
    deduplicated: list[str]
    recalled: list[str] = field(default_factory=list)


RECALLED_HEADING = "### Recalled for this request"


def recalled_lines(item: SearchItem) -> list[BlockLine]:
    """A fact recalled by the request's content: one line, with its reason and the messages it came from."""
    reason = item.reason or ""
    if len(reason) > 160:
        reason = reason[:157] + "..."
    source = " ".join(x for x in (item.session_id or "", ",".join(item.message_ids[:4])) if x)
    text = f"- {item.subject_label} —{item.relation}→ {item.object_label}" + (f": {reason}" if reason else "")
    text += f" {_short(item.fact_id)}" + (f" (from {source})" if source else "")
    return [BlockLine(text=text, fact_ids=[item.fact_id], message_ids=list(item.message_ids))]


PERSPECTIVE_SECTIONS = {Tier.FULL: "### Clear", Tier.GIST: "### In brief", Tier.MARKER: "### Also",
                        Tier.COUNT: "### More"}


def _perspective_block(perspective: Perspective | None, shown_as_constraints: set[str], session_id: str,
                       title: str, recalled: Sequence[SearchItem] = (), max_facts: int = 1_000_000
                       ) -> tuple[_Block, list[str], list[SearchItem]]:
    """The perspective's block: the facts recalled by content first (those the constraints or the perspective do
    not already show), then the perspective's tiers, at most `max_facts` facts by name (the weakest go)."""
    block = _Block(ContextRole.PERSPECTIVE, [BlockLine(text=title)], [])
    shown_by_perspective = {i.fact_id for i in perspective.items} if perspective is not None else set()
    fresh = [r for r in recalled if r.fact_id not in shown_as_constraints and r.fact_id not in shown_by_perspective]
    if fresh:
        block.groups.append(_Group([BlockLine(text=RECALLED_HEADING)],
                                   [_Unit("recalled", recalled_lines(r), rank=len(fresh) - k)
                                    for k, r in enumerate(fresh)]))
    if perspective is None:
        return block, [], fresh
    dedup: list[str] = []
    own_session = f"session:{session_id}"
    items: list[PerspectiveItem] = []
    for item in perspective.items:
        if item.fact_id in shown_as_constraints:
            dedup.append(item.fact_id)
        elif item.scope.startswith("session:") and item.scope != own_session:
            continue  # another session's memory (a worker's): task details stay with the worker
        else:
            items.append(item)
    items = items[: max(0, max_facts - len(fresh))]
    n = len(items)
    for tier, kind in ((Tier.FULL, "full"), (Tier.GIST, "gist"), (Tier.MARKER, "marker")):
        units = [_Unit(kind, item_lines(item), rank=n - k) for k, item in enumerate(items) if item.tier is tier]
        block.groups.append(_Group([BlockLine(text=PERSPECTIVE_SECTIONS[tier])], units))
    counts = []
    for group in sorted(perspective.count_groups, key=lambda g: (-g.count, g.about)):
        ids = [i for i in group.fact_ids if i not in shown_as_constraints]
        if ids:
            counts.append(_Unit("count", [BlockLine(text=f"- {len(ids)} more about {group.label}", fact_ids=ids)],
                                rank=len(ids)))
    if perspective.forgotten:
        counts.append(_Unit("count", [BlockLine(
            text=f"- {perspective.forgotten} more below the threshold (not recalled now)")], rank=-1))
    block.groups.append(_Group([BlockLine(text=PERSPECTIVE_SECTIONS[Tier.COUNT])], counts))
    return block, dedup, fresh


def _cut(block: _Block, limit: int, stage: str, omitted: list[Omission], total: Callable[[], int]) -> None:
    """Cut the block's units in SHRINK_ORDER (then rank) until `total()` is within `limit`."""
    order = {kind: k for k, kind in enumerate(SHRINK_ORDER)}
    for unit in sorted(block.live(), key=lambda u: (order[u.kind], u.rank)):
        if total() <= limit:
            return
        unit.dropped = stage
        omitted.append(Omission(role=block.role, kind=unit.kind, stage=stage, text=unit.lines[0].text,
                                ids=unit.ids))


def assemble(*, header: str, constraints: Sequence[FactState], perspective: Perspective | None,
             perspective_title: str, workers: Sequence[WorkerView], summary: Sequence[SummaryNode],
             turns: Sequence[tuple[str, str, str]], label: Callable[[str], str], session_id: str,
             parameters: ContextParameters, budget_tokens: int, recalled: Sequence[SearchItem] = ()) -> Assembly:
    """Lay the five layers out within their role budgets, then cut in SHRINK_ORDER until the whole fits.

    Raises ContextBudgetExceeded when the header and the hard constraints alone exceed `budget_tokens`.
    """
    head = [BlockLine(text=header)]
    constraint_block = _Block(ContextRole.CONSTRAINTS, [BlockLine(text=CONSTRAINTS_HEADING)],
                              [_Group([], [_Unit("constraint", constraint_lines(f, label), rank=0)
                                           for f in constraints])])
    needed = _cost(head) + constraint_block.cost()
    if needed > budget_tokens:
        raise ContextBudgetExceeded(needed, budget_tokens, [f.fact_id for f in constraints])
    shown = {f.fact_id for f in constraints}
    perspective_block, dedup, fresh = _perspective_block(perspective, shown, session_id, perspective_title,
                                                         recalled, parameters.max_facts_shown)
    workers_block = _Block(ContextRole.WORKERS, [BlockLine(text="## Live workers")],
                           [_Group([], [_Unit("worker", worker_lines(w, label), rank=-k)
                                        for k, w in enumerate(workers)])])
    summary_block = _Block(ContextRole.SUMMARY, [BlockLine(text="## Earlier in this session (rolling summary)")],
                           [_Group([], [_Unit("summary", summary_lines(node), rank=k)
                                        for k, node in enumerate(summary)])])
    recent = list(turns)[-parameters.recent_turns:] if parameters.recent_turns else []
    turns_block = _Block(ContextRole.TURNS, [BlockLine(text="## Recent turns (verbatim)")],
                         [_Group([], [_Unit("turn", turn_lines(*turn, max_chars=parameters.max_turn_chars), rank=k)
                                      for k, turn in enumerate(recent)])])
    blocks = [constraint_block, perspective_block, workers_block, summary_block, turns_block]
    omitted: list[Omission] = []

    # 1. each role within its share, plus what the roles above left unused
    spare = 0
    for block in blocks:
        block.budget = int(parameters.share(block.role) * budget_tokens) + spare
        if block.role is not ContextRole.CONSTRAINTS:
            _cut(block, block.budget, "role", omitted, block.cost)
        spare = max(0, block.budget - block.cost())

    # 2. the whole within the budget: cut the lowest-value units first, across roles
    def total() -> int:
        return _cost(head) + sum(b.cost() for b in blocks)

    order = {kind: k for k, kind in enumerate(SHRINK_ORDER)}
    by_kind = sorted(((order[u.kind], u.rank, b_index, u) for b_index, b in enumerate(blocks[1:], start=1)
                      for u in b.live()), key=lambda t: (t[0], t[1], t[2]))
    for _kind, _rank, b_index, unit in by_kind:
        if total() <= budget_tokens:
            break
        unit.dropped = "total"
        omitted.append(Omission(role=blocks[b_index].role, kind=unit.kind, stage="total",
                                text=unit.lines[0].text, ids=unit.ids))

    lines = list(head)
    result: list[ContextBlock] = []
    for block in blocks:
        block_lines = block.lines()
        if not block_lines:
            continue
        lines += block_lines
        result.append(ContextBlock(
            role=block.role, budget_tokens=block.budget, tokens=block.cost(), lines=block_lines,
            fact_ids=_ids(block_lines, "fact_ids"), message_ids=_ids(block_lines, "message_ids"),
            summary_ids=_ids(block_lines, "summary_ids"), session_ids=_ids(block_lines, "session_ids"),
        ))
    texts = [line.text for line in lines]
    return Assembly(blocks=result, omitted=omitted, text="\n".join(texts), tokens=text_tokens(texts),
                    deduplicated=dedup, recalled=[r.fact_id for r in fresh])


def _ids(lines: Sequence[BlockLine], attribute: str) -> list[str]:
    seen: dict[str, None] = {}
    for line in lines:
        for i in getattr(line, attribute):
            seen[i] = None
    return list(seen)
