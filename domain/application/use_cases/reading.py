"""What an agent is served from memory: recall by tier, searches by content, perspectives and contexts. A current
read is also a use of what it shows (recorded through the recall buffer), and its evidence is kept for
`explain`; both happen here, in the open, after the engine computed the answer."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from domain.access import Caller, as_caller
from domain.activation import Tier
from domain.application.recall import recall as recall_by_tier
from domain.application.recall_buffer import RecallBuffer
from domain.application.use_cases.core import Core
from domain.application.use_cases.results import RecallHit, RecallResult, fact_dict
from domain.context import Context
from domain.perspective import Perspective, RecallRecord
from domain.ports import ContextEngine, EvidenceStore, PerspectiveEngine, SearchEngine
from domain.recalls import RecallMode
from domain.search import SearchAnswer


class Reading:
    def __init__(self, core: Core, *, perspectives: PerspectiveEngine, contexts: ContextEngine,
                 searches: SearchEngine, evidence: EvidenceStore, recalls: RecallBuffer) -> None:
        self._core = core
        self._perspectives = perspectives
        self._contexts = contexts
        self._searches = searches
        self._evidence = evidence
        self._recalls = recalls

    # ------------------------------------------------------------------ recall by tier

    def recall(self, who: Caller | str, agent: str, subject: str, *, relation: str | None = None,
               serving: str | None = None, session_id: str | None = None, deeper: bool = False,
               min_position: int | None = None) -> RecallResult:
        """Tier-aware recall (domain/application/recall.py): facts about `subject` from the nearest tier that has
        any — the session, then the person served (episodic), then the org (semantic) — saying which tier
        answered. The facts found are recorded as recalled by `agent`; a deeper recall also brings back facts
        archived for disuse."""
        core = self._core
        tenant = core.acting_as(who, agent, serving, session_id)
        core.fresh(tenant, min_position)
        with core.service.reading(tenant) as state:
            state.require_entity(agent, "agent")
            state.require_entity(subject, "subject")
            if serving is not None:
                state.require_entity(serving, "serving")
            if session_id is not None:
                state.require_session(session_id)
        answer = recall_by_tier(core.service, tenant, agent, serving, subject, relation, session_id, deeper)
        tiers = ["session"] + (["episodic"] if serving is not None else []) + ["semantic"]
        result = RecallResult(answered_by=answer.tier.value if answer.tier else None, tiers_checked=tiers,
                              hits=[RecallHit(answer.tier.value, fact_dict(f)) for f in answer.facts]
                              if answer.tier else [], restored=list(answer.restored))
        if answer.facts:
            result.position = core.service.last_position
            core.written([result.position or 0])
        return result

    # ------------------------------------------------------------------ recall by content

    def search_for(self, who: Caller | str, agent: str, query: str, serving: str | None = None,
                   session_id: str | None = None, k: int = 10, as_of: datetime | None = None,
                   min_position: int | None = None, about: Sequence[str] = (), *, record: bool = True
                   ) -> SearchAnswer:
        """The facts `agent` may see (serving `serving`, in `session_id`, touching `about` if given) that best
        match `query`, nearest tier first, with their score components (projections/searches.py). A current
        search is also a use of what it returns (mode `looked_up`, recorded through the recall buffer) unless
        `record` is off (an observer's look, e.g. the explorer's); an as-of search records nothing. Its evidence
        is kept for `explain`."""
        tenant = self._core.acting_as(who, agent, serving, session_id)
        self._core.fresh(tenant, min_position)
        answer = self._searches.search(tenant, agent, query, serving=serving, session_id=session_id, k=k,
                                       as_of=as_of, about=about)
        if not self._perspectives.records_recalls:  # (a benchmark's engine over an index not built from the log)
            return answer
        if as_of is None and record:
            found = [i.fact_id for i in answer.items if i.fact_id is not None]  # turns are no facts to recall
            recorded = self._record_recall(tenant, agent, answer.search_id, found, RecallMode.LOOKED_UP,
                                           datetime.fromisoformat(answer.served_at))
            if recorded is not None:
                answer.recall_position, answer.recall_held = recorded.position, recorded.held
        self._evidence.keep(answer)
        return answer

    def explain_search(self, who: Caller | str | None, search_id: str) -> SearchAnswer:
        """The evidence of a served search (None: an operator's look, as for `explain`; tenant-wide keys)."""
        return self._evidence.search(None if who is None else self._core.tenant_wide(who, "search evidence"),
                                     search_id)

    # ------------------------------------------------------------------ perspectives and contexts

    def perspective(self, who: Caller | str, agent: str, serving: str | None = None, focus: Sequence[str] = (),
                    as_of: datetime | None = None, budget_tokens: int | None = None, deeper: bool = False,
                    min_position: int | None = None, *, record: bool = True) -> Perspective:
        """What `agent` sees, serving `serving`, with `focus` in mind: ranked, tiered, rendered within budget.

        Serving a current perspective has two side effects, done here after the engine computed it (outside its
        lock, so a slow write delays only this caller): a use of its full and gist facts (mode `pushed`,
        `deepened` for a deeper look), which makes them rank higher next time (the testing effect), recorded
        through the recall buffer (at most one use per agent, fact and hour, written once per flush); and its
        evidence, kept for `explain`. An as-of perspective records no use (looking at the past does not use a
        fact now), nor does a current one with `record` off: an observer (the explorer) looking at what the agent
        would be shown, from the same live index, without it counting as the agent's use.
        """
        tenant = self._core.acting_as(who, agent, serving)
        self._core.fresh(tenant, min_position)
        served = self._perspectives.perspective(tenant, agent, serving, focus, as_of, budget_tokens, deeper)
        if not self._perspectives.records_recalls:
            return served
        if as_of is None and record:
            served.recall = self._record_recall(tenant, agent, served.perspective_id,
                                                served.fact_ids(Tier.FULL, Tier.GIST),
                                                RecallMode.DEEPENED if deeper else RecallMode.PUSHED, served.served_at)
        self._evidence.keep(served)
        return served

    def _record_recall(self, tenant: str, agent: str, served_id: str, fact_ids: list[str], mode: RecallMode,
                       at: datetime) -> RecallRecord | None:
        """A served read used these facts: held for the next coalesced flush, or written now (coalescing off)."""
        if not fact_ids:
            return None
        recorded = self._recalls.record(tenant, agent, fact_ids, mode, at, served_id)
        self._core.written([recorded.position] if recorded.position is not None else [])
        return RecallRecord(mode=mode.value, fact_ids=fact_ids, position=recorded.position, held=recorded.held)

    def flush_recalls(self) -> list[int]:
        """Write the uses served reads made that are still held (one event per tenant); the log positions."""
        positions = self._recalls.flush()
        self._core.written(positions)
        return positions

    def deepen(self, who: Caller | str, perspective_id: str, budget_tokens: int | None = None,
               min_position: int | None = None) -> Perspective:
        """Think deeper from a perspective served before: same standpoint, one more hop, a lower threshold (a
        scoped key only from a perspective of its agents)."""
        caller = as_caller(who)
        tenant = caller.tenant
        before, _ = self._evidence.perspective(tenant, perspective_id)
        self._core.acting_as(caller, before.agent, before.serving)
        return self.perspective(tenant, before.agent, before.serving, before.focus, before.as_of,
                                budget_tokens or before.budget_tokens, deeper=True, min_position=min_position)

    def explain(self, who: Caller | str | None, perspective_id: str) -> Perspective:
        """The evidence of a served perspective: inputs, parameters and outputs. Kept as its request (the default
        evidence mode), the outputs are computed again from the log as it stood when it was served. Agents name
        their tenant; None is an operator's look at the data directory (the CLI), whatever the tenant. A scoped
        key explains only perspectives of its agents."""
        caller = None if who is None else as_caller(who)
        kept, complete = self._evidence.perspective(None if caller is None else caller.tenant, perspective_id)
        if caller is not None:
            self._core.acting_as(caller, kept.agent, kept.serving)
        if complete:
            return kept
        again = self._perspectives.reproduce(kept)
        if kept.recall is not None:
            fact_ids = again.fact_ids(Tier.FULL, Tier.GIST)
            again.recall = kept.recall.model_copy(update={"fact_ids": fact_ids}) if fact_ids else None
        return again

    def reproduce(self, perspective_id: str) -> Perspective:
        """Compute a served perspective again from the log as it stood when it was served (nothing recorded):
        equal items mean the answer is explained by its inputs."""
        kept, _ = self._evidence.perspective(None, perspective_id)
        return self._perspectives.reproduce(kept)

    def context(self, who: Caller | str, session_id: str, message: str | None = None,
                budget_tokens: int | None = None, min_position: int | None = None) -> Context:
        """The context block for a main session, compiled for this request. Like a perspective, it is a use of
        the facts it shows clearly (mode `pushed`, through the recall buffer), and its evidence is kept. A scoped
        key asks only for a session of its agents (an unknown session is the engine's 404, as for any key)."""
        caller = as_caller(who)
        tenant = caller.tenant
        if caller.scoped:
            with self._core.service.reading(tenant) as state:
                session = state.sessions.get(session_id)
            if session is not None:
                self._core.acting_as(caller, session.agent, session.serving, session_id)
        self._core.fresh(tenant, min_position)
        served = self._contexts.context(tenant, session_id, message, budget_tokens)
        served.recall = self._record_recall(tenant, served.agent, served.context_id, served.shown_clearly(),
                                            RecallMode.PUSHED, served.served_at)
        self._evidence.keep(served)
        return served

    def explain_context(self, who: Caller | str | None, context_id: str) -> Context:
        """The evidence of a served context (None: an operator's look, as for `explain`; tenant-wide keys)."""
        return self._evidence.context(None if who is None else self._core.tenant_wide(who, "context evidence"),
                                      context_id)

    def reproduce_context(self, context_id: str) -> Context:
        """Assemble a served context again from the log as it stood then (nothing recorded)."""
        return self._contexts.reproduce(self._evidence.context(None, context_id))
