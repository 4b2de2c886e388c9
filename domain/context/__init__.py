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

One module per job: model.py (the vocabulary and parameters), selection.py (scopes, hard constraints, focus),
tokens.py (counting), rendering.py (lines with their ids), budget.py (shares, cuts, assembly).
"""

from __future__ import annotations

from domain.context.budget import Assembly, assemble, constraints_tokens, perspective_budget
from domain.context.model import (
    CONSTRAINT_RELATIONS,
    DEFAULT_CONTEXT_PARAMETERS,
    ROLE_ORDER,
    SHRINK_ORDER,
    BlockLine,
    Context,
    ContextAsked,
    ContextBlock,
    ContextBudgetExceeded,
    ContextParameters,
    ContextRole,
    FocusRef,
    Omission,
)
from domain.context.rendering import (
    CONSTRAINTS_HEADING,
    RECALLED_HEADING,
    WorkerView,
    constraint_lines,
    item_lines,
    recalled_lines,
    summary_lines,
    turn_lines,
    worker_lines,
)
from domain.context.selection import ConstraintIndex, choose_focus, holds_at, select_constraints, visible_scopes
from domain.context.tokens import line_tokens, lines_tokens, text_tokens

__all__ = [
    "CONSTRAINTS_HEADING", "CONSTRAINT_RELATIONS", "RECALLED_HEADING", "DEFAULT_CONTEXT_PARAMETERS", "ROLE_ORDER",
    "SHRINK_ORDER", "Assembly", "BlockLine", "ConstraintIndex", "Context", "ContextAsked", "ContextBlock",
    "ContextBudgetExceeded", "ContextParameters", "ContextRole", "FocusRef", "Omission", "WorkerView", "assemble",
    "choose_focus", "constraint_lines", "constraints_tokens", "holds_at", "item_lines", "line_tokens", "lines_tokens",
    "perspective_budget", "recalled_lines", "select_constraints", "summary_lines", "text_tokens", "turn_lines",
    "visible_scopes", "worker_lines",
]
