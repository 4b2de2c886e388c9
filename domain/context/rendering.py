"""Rendering: each piece of a context as lines that carry the ids they stand for (fact, message, summary and
session ids)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from domain.activation import Tier
from domain.context.model import BlockLine
from domain.facts import FactState
from domain.perspective import PerspectiveItem
from domain.search import SearchItem
from domain.summaries import SummaryNode

CONSTRAINTS_HEADING = "## Hard constraints (always respect)"

PERSPECTIVE_SECTIONS = {Tier.FULL: "### Clear", Tier.GIST: "### In brief", Tier.MARKER: "### Also",
                        Tier.COUNT: "### More"}


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


RECALLED_HEADING = "### Recalled for this request"


RECALLED_TURN_CHARS = 300
"""A recalled turn is shown up to this many characters (then marked as cut): it is evidence, not the whole talk."""
AROUND_TURN_CHARS = 200
"""The turns shown around it, up to this many."""


def _cut_words(text: str, limit: int) -> str:
    words = " ".join(text.split())
    return words if len(words) <= limit else words[: limit - 3] + "..."


def recalled_lines(item: SearchItem) -> list[BlockLine]:
    """A fact recalled by the request's content: one line, with its reason and the messages it came from; a turn:
    one line with its message id, session, speaker role and when it was said."""
    if item.fact_id is None:
        when = f", {item.occurred_at[:10]}" if item.occurred_at else ""
        lines = [BlockLine(text=f"- [{item.message_id}] ({item.session_id}{when}) {item.role or 'turn'}: "
                                + _cut_words(item.text, RECALLED_TURN_CHARS),
                           message_ids=[item.message_id] if item.message_id else [],
                           session_ids=[item.session_id] if item.session_id else [])]
        for near in item.around:  # its window: the turns before and after it
            lines.append(BlockLine(text=f"  · [{near.message_id}] {near.role or 'turn'}: "
                                        + _cut_words(near.text, AROUND_TURN_CHARS), message_ids=[near.message_id]))
        return lines
    reason = item.reason or ""
    if len(reason) > 160:
        reason = reason[:157] + "..."
    source = " ".join(x for x in (item.session_id or "", ",".join(item.message_ids[:4])) if x)
    text = f"- {item.subject_label} —{item.relation}→ {item.object_label}" + (f": {reason}" if reason else "")
    text += f" {_short(item.fact_id)}" + (f" (from {source})" if source else "")
    return [BlockLine(text=text, fact_ids=[item.fact_id], message_ids=list(item.message_ids))]
