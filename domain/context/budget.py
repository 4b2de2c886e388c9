"""The budget: each role gets its share (what a role leaves unused passes down), then, when the whole still
exceeds the budget, units are cut in `SHRINK_ORDER`; every cut is listed in `omitted`. Hard constraints are
never cut: if they alone do not fit, `ContextBudgetExceeded`. `assemble` lays the five layers out."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field

from domain.activation import Tier
from domain.context.model import (
    SHRINK_ORDER,
    BlockLine,
    ContextBlock,
    ContextBudgetExceeded,
    ContextParameters,
    ContextRole,
    Omission,
)
from domain.context.rendering import (
    CONSTRAINTS_HEADING,
    PERSPECTIVE_SECTIONS,
    RECALLED_HEADING,
    WorkerView,
    constraint_lines,
    item_lines,
    recalled_lines,
    summary_lines,
    turn_lines,
    worker_lines,
)
from domain.context.tokens import lines_tokens, text_tokens
from domain.facts import FactState
from domain.perspective import Perspective, PerspectiveItem
from domain.search import SearchItem
from domain.summaries import SummaryNode


def constraints_tokens(constraints: Sequence[FactState], label: Callable[[str], str]) -> int:
    """What the hard-constraint block costs (heading included; 0 when there is none)."""
    if not constraints:
        return 0
    heading = lines_tokens([BlockLine(text=CONSTRAINTS_HEADING)])
    return heading + sum(lines_tokens(constraint_lines(f, label)) for f in constraints)


def perspective_budget(parameters: ContextParameters, budget: int, constraint_tokens: int) -> int:
    """The perspective's budget: its share plus what the hard constraints left of theirs."""
    spare = max(0, int(parameters.constraints_share * budget) - constraint_tokens)
    return int(parameters.perspective_share * budget) + spare


@dataclass
class _Unit:
    kind: str
    lines: list[BlockLine]
    rank: int
    """Within its kind: lower is cut first."""
    cost: int = 0
    dropped: str | None = None

    def __post_init__(self) -> None:
        self.cost = lines_tokens(self.lines)

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
                total += sum(kept) + lines_tokens(group.heading)
        return total + lines_tokens(self.heading) if total else 0

    def lines(self) -> list[BlockLine]:
        out: list[BlockLine] = []
        for group in self.groups:
            kept = [u for u in group.units if u.dropped is None]
            if kept:
                out += group.heading
                for unit in kept:
                    out += unit.lines
        return self.heading + out if out else []


@dataclass
class Assembly:
    blocks: list[ContextBlock]
    omitted: list[Omission]
    text: str
    tokens: int
    deduplicated: list[str]
    recalled: list[str] = field(default_factory=list)


def _perspective_block(perspective: Perspective | None, shown_as_constraints: set[str], session_id: str,
                       title: str, recalled: Sequence[SearchItem] = (), max_facts: int = 1_000_000,
                       recent_turns: Collection[str] = ()) -> tuple[_Block, list[str], list[SearchItem]]:
    """The perspective's block: the facts and turns recalled by content first (those the constraints, the
    perspective or the recent turns do not already show), then the perspective's tiers, at most `max_facts` facts
    by name (the weakest go)."""
    block = _Block(ContextRole.PERSPECTIVE, [BlockLine(text=title)], [])
    shown_by_perspective = {i.fact_id for i in perspective.items} if perspective is not None else set()
    fresh = [r for r in recalled if (r.fact_id is None and r.message_id not in recent_turns)
             or (r.fact_id is not None and r.fact_id not in shown_as_constraints
                 and r.fact_id not in shown_by_perspective)]
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
    items = items[: max(0, max_facts - sum(r.fact_id is not None for r in fresh))]
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
    needed = lines_tokens(head) + constraint_block.cost()
    if needed > budget_tokens:
        raise ContextBudgetExceeded(needed, budget_tokens, [f.fact_id for f in constraints])
    shown = {f.fact_id for f in constraints}
    recent = list(turns)[-parameters.recent_turns:] if parameters.recent_turns else []
    perspective_block, dedup, fresh = _perspective_block(perspective, shown, session_id, perspective_title,
                                                         recalled, parameters.max_facts_shown,
                                                         {message_id for message_id, _role, _content in recent})
    workers_block = _Block(ContextRole.WORKERS, [BlockLine(text="## Live workers")],
                           [_Group([], [_Unit("worker", worker_lines(w, label), rank=-k)
                                        for k, w in enumerate(workers)])])
    summary_block = _Block(ContextRole.SUMMARY, [BlockLine(text="## Earlier in this session (rolling summary)")],
                           [_Group([], [_Unit("summary", summary_lines(node), rank=k)
                                        for k, node in enumerate(summary)])])
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
        return lines_tokens(head) + sum(b.cost() for b in blocks)

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
                    deduplicated=dedup, recalled=[r.fact_id for r in fresh if r.fact_id is not None])


def _ids(lines: Sequence[BlockLine], attribute: str) -> list[str]:
    seen: dict[str, None] = {}
    for line in lines:
        for i in getattr(line, attribute):
            seen[i] = None
    return list(seen)
