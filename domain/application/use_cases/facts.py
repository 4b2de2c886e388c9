"""Writing memory: envelopes (session events, compactions, facts) in batches, facts asserted, ended, promoted and
used, and the entities they name registered."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from domain import commands as c
from domain.access import Caller, as_caller, check_acts_as, check_may_use, check_may_write_fact
from domain.application.ingestion import Ingestor
from domain.application.use_cases.core import Core
from domain.application.use_cases.errors import BatchRejected, Rejection, TenantMismatch, UnknownEntityFact
from domain.application.use_cases.results import Written
from domain.facts import FactAsserted, FactCorrected, FactCorroborated, FactInvalidated
from domain.ontology import Ontology
from domain.recalls import RecallMode


class Facts:
    def __init__(self, core: Core, ingestor: Ingestor) -> None:
        self._core = core
        self._ingestor = ingestor

    def ingest(self, who: Caller | str, raws: Sequence[Any]) -> Written:
        """A batch of wire envelopes, all or nothing; every envelope must name the caller's tenant."""
        tenant = self._core.tenant_wide(who, "writing envelopes (events)")
        for index, raw in enumerate(raws):
            if isinstance(raw, dict) and "tenant" in raw and raw["tenant"] != tenant:
                raise TenantMismatch(index)
        result = self._ingestor.ingest(list(raws), all_or_nothing=True)
        if result.rejected:
            raise BatchRejected([Rejection(r.index, f"events[{r.index}].{r.field}" if r.field else
                                           f"events[{r.index}]", r.reason) for r in result.rejected])
        self._core.written(result.positions)
        return Written(position=result.last_position, events=result.stored_events)

    def register_entity(self, who: Caller | str, ref: str, label: str, aliases: Sequence[str] = (), hub: bool = False
                        ) -> Written:
        """Register an entity (a repeat with the same label is a no-op)."""
        tenant = self._core.tenant_wide(who, "registering entities")
        return self._core.run(c.RegisterEntity(tenant=tenant, ref=ref, label=label, aliases=tuple(aliases), hub=hub))

    def register_unknown(self, who: Caller | str, labels: dict[str, str | None]) -> None:
        """Register each ref that is not an entity yet with its label (refs without a label are left alone)."""
        tenant = self._core.tenant_wide(who, "registering entities")
        with self._core.service.reading(tenant) as state:
            new = [(ref, label) for ref, label in labels.items() if label and ref not in state.entities]
        for ref, label in new:  # (a repeat with the same label, registered meanwhile, is a no-op)
            self.register_entity(tenant, ref, label)

    def assert_fact(self, who: Caller | str, **fields: Any) -> Written:
        """Assert a fact (with provenance in `source`); a repeat corroborates it, a functional one supersedes. A
        scoped key writes only as its agents, into memory they see (domain/access.py)."""
        caller = as_caller(who)
        tenant = caller.tenant
        command = c.AssertFact(tenant=tenant, **fields)
        if caller.scoped:
            # decided and written in one turn of the tenant: no write between them (a `serves` fact ended, a
            # session taken over) changes what the key may do
            with self._core.service.writing(tenant) as state:
                self._check_write(state, caller, command)
                written, events = self._core.run_batch([command])
        else:
            written, events = self._core.run_batch([command])
        for event in events:
            # (not a neighbour's remainder a placement split off, nor the org copy a promotion made)
            if isinstance(event, FactAsserted) and (event.object, event.scope) == (command.object, command.scope):
                written.fact_id, written.change, written.supersedes = event.fact_id, "asserted", event.supersedes
            elif isinstance(event, FactCorroborated):
                written.fact_id, written.change = event.fact_id, "corroborated"
        return written

    def remember(self, who: Caller | str, labels: dict[str, str | None], **fields: Any) -> Written:
        """Assert a fact, registering first those of its refs that are new with the labels given (MCP
        `remember`). Checked before anything is registered: a refused fact leaves no entity behind."""
        caller = as_caller(who)
        if caller.scoped:
            with self._core.service.reading(caller.tenant) as state:
                self._check_write(state, caller, c.AssertFact(tenant=caller.tenant, **fields))
        self.register_unknown(caller.tenant, labels)
        return self.assert_fact(caller, **fields)

    @staticmethod
    def _check_write(state: Ontology, caller: Caller, command: c.AssertFact) -> None:
        source = command.source or c.Source()
        check_may_write_fact(state, caller.agents, subject=command.subject, relation=command.relation,
                             obj=command.object, scope=command.scope, session_id=source.session_id,
                             message_ids=source.message_ids, actor=source.actor)

    def invalidate_fact(self, who: Caller | str, **fields: Any) -> Written:
        """End a current fact, named by `fact_id` or by subject, relation, object and scope."""
        tenant = self._core.tenant_wide(who, "ending (correcting) facts")
        written, events = self._core.run_batch([c.InvalidateFact(tenant=tenant, **fields)])
        for event in events:
            if isinstance(event, FactInvalidated):
                written.fact_id, written.change = event.fact_id, "invalidated"
            elif isinstance(event, FactCorrected):  # an earlier end for a fact already ended
                written.fact_id, written.change = event.fact_id, "corrected"
        return written

    def promote_fact(self, who: Caller | str, fact_id: str, approved_by: str) -> Written:
        """Approve a person- or session-scoped fact for the whole organization (semantic memory)."""
        tenant = self._core.tenant_wide(who, "promoting facts")
        written, events = self._core.run_batch([c.PromoteFact(tenant=tenant, fact_id=fact_id,
                                                              approved_by=approved_by)])
        if events:
            written.fact_id, written.change = getattr(events[0], "fact_id", None), "promoted"
        return written

    def mark_used(self, who: Caller | str, agent: str, fact_ids: Sequence[str], perspective_id: str | None = None,
                  mode: RecallMode = RecallMode.USED) -> Written:
        """Record that `agent` used these facts: they grow stronger for that agent. A scoped key records uses
        only as its agents, of facts they may see."""
        caller = as_caller(who)
        tenant = caller.tenant
        with self._core.service.reading(tenant) as state:
            check_acts_as(state, caller.agents, agent)
            state.require_entity(agent, "agent")
            for index, fact_id in enumerate(fact_ids):
                if fact_id not in state.facts:
                    raise UnknownEntityFact(fact_id, f"fact_ids[{index}]")
            check_may_use(state, caller.agents, fact_ids)
        return self._core.run(c.RecordRecall(tenant=tenant, agent=agent, fact_ids=tuple(fact_ids), mode=mode,
                                             perspective_id=perspective_id))
