"""Rolling summaries: a reduction tree over a session's compaction summaries (seed 004, 分层压缩; see
docs/design.md, "Sources").

Each `session.compacted` event that carries a `summary` is a leaf (level 0, its id is the compaction id). Every
`FAN_IN` (10) consecutive nodes of one level are folded into one node of the next level, whose `child_ids` keep
the structure; a partial group stays unfolded until its tenth member arrives. The rolling summary of a session
is the tree's **frontier**: the fewest nodes that cover every leaf, oldest first — the old past coarse, the
recent past fine.

Folding is deterministic by default (`TrimmingFolder`: each child keeps its first sentence, trimmed to an equal
share of the parent's length, joined in order). An LLM summarizer can be plugged in as another `Folder`; the tree
records which folder made each node.

A summary is glue for reading, never where facts live: facts come from the ontology, and every node carries the
compaction ids it covers so a reader can go back to the messages.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

FAN_IN = 10
"""How many nodes of one level fold into one node of the next. Source: seed 004 (每 10 轮一个局部摘要，每 10 个
局部摘要再合成一个高层摘要)."""

FOLDED_MAX_CHARS = 600
"""The deterministic folder's longest parent text."""

_SENTENCE_END = re.compile(r"(?<=[.!?。！？；;])\s*")


class Folder(Protocol):
    """Turns the texts of consecutive nodes (oldest first) into one higher-level summary."""

    @property
    def name(self) -> str: ...

    def fold(self, texts: Sequence[str]) -> str: ...


@dataclass(frozen=True)
class TrimmingFolder:
    """Deterministic: the first sentence of each child, each cut to an equal share of `max_chars`, in order."""

    max_chars: int = FOLDED_MAX_CHARS
    name: str = "trim"

    def fold(self, texts: Sequence[str]) -> str:
        if not texts:
            return ""
        share = max(24, self.max_chars // len(texts) - 3)
        parts = []
        for text in texts:
            first = _SENTENCE_END.split(text.strip(), maxsplit=1)[0].strip()
            parts.append(first if len(first) <= share else first[: share - 1].rstrip() + "…")
        return " / ".join(p for p in parts if p)


@dataclass(frozen=True, slots=True)
class SummaryNode:
    summary_id: str
    level: int
    """0: one compaction's summary; n: FAN_IN nodes of level n - 1 folded."""
    text: str
    child_ids: tuple[str, ...] = ()
    compaction_ids: tuple[str, ...] = ()
    """The leaves (compactions) this node covers, oldest first."""
    folder: str = ""


def _node_id(session_id: str, level: int, child_ids: Sequence[str]) -> str:
    digest = hashlib.blake2b("|".join(child_ids).encode(), digest_size=6).hexdigest()
    return f"{session_id}#L{level}-{digest}"


@dataclass
class SummaryTree:
    """The reduction tree of one session, grown one compaction at a time (the same leaves give the same tree)."""

    session_id: str
    folder: Folder = field(default_factory=TrimmingFolder)
    nodes: dict[str, SummaryNode] = field(default_factory=dict)
    open: list[list[str]] = field(default_factory=list)
    """Per level, the ids of the nodes not folded yet (oldest first)."""
    leaves: int = 0

    @classmethod
    def build(cls, session_id: str, summaries: Sequence[tuple[str, str]], folder: Folder | None = None
              ) -> SummaryTree:
        tree = cls(session_id, folder or TrimmingFolder())
        tree.extend(summaries)
        return tree

    def extend(self, summaries: Sequence[tuple[str, str]]) -> None:
        """Add the leaves after the ones already in the tree (`summaries` is the session's whole list)."""
        for compaction_id, text in summaries[self.leaves:]:
            self._add(SummaryNode(compaction_id, 0, text, (), (compaction_id,)))
            self.leaves += 1

    def _add(self, node: SummaryNode) -> None:
        self.nodes[node.summary_id] = node
        while len(self.open) <= node.level:
            self.open.append([])
        row = self.open[node.level]
        row.append(node.summary_id)
        if len(row) == FAN_IN:
            children = [self.nodes[i] for i in row]
            self.open[node.level] = []
            child_ids = tuple(row)
            self._add(SummaryNode(
                summary_id=_node_id(self.session_id, node.level + 1, child_ids), level=node.level + 1,
                text=self.folder.fold([c.text for c in children]), child_ids=child_ids,
                compaction_ids=tuple(k for c in children for k in c.compaction_ids), folder=self.folder.name,
            ))

    def frontier(self) -> list[SummaryNode]:
        """The fewest nodes covering every leaf, oldest first: the rolling summary."""
        return [self.nodes[i] for level in reversed(range(len(self.open))) for i in self.open[level]]
