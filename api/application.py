"""The application behind every entry point that serves agents (HTTP routes, MCP tools): build a command, run it,
read the result. Every method takes the tenant first; callers take it from authentication, never from input.

No HTTP here: errors are domain errors (or the few below), mapped to problem documents by api/problems.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

import duckdb

from domain import commands as c
from domain.errors import (
    DomainError,
    InfrastructureError,
    InvalidInput,
    UnknownEntity,
)
from domain.facts import FactAsserted, FactCorroborated, FactInvalidated
from domain.recalls import RecallMode
from domain.workflows import recall as recall_by_tier
from infra.api_keys import ApiKeyStore
from infra.bootstrap import Noumena
from infra.serving import ProjectionFollower
from projections import read_model


class TenantMismatch(DomainError):
    """An envelope names a tenant other than the caller's."""

    def __init__(self, index: int) -> None:
        super().__init__(f"events[{index}].tenant: an envelope may only name your own tenant",
                         field=f"events[{index}].tenant")
        self.index = index


@dataclass(frozen=True)
class Rejection:
    index: int
    field: str
    detail: str


class BatchRejected(DomainError):
    """At least one envelope was rejected, so none was written."""

    def __init__(self, rejections: list[Rejection]) -> None:
        first = rejections[0]
        more = f" (and {len(rejections) - 1} more)" if len(rejections) > 1 else ""
        super().__init__(f"events[{first.index}]: {first.detail}{more}; nothing was written", field=first.field)
        self.rejections = rejections


class ProjectionBehind(InfrastructureError):
    """A read named a log position the read model did not reach in time."""


class PerspectiveEngine(Protocol):
    """The perspective port: what a viewer sees (see api/perspective_engine.py for the adapter in use)."""

    def perspective(self, tenant: str, agent: str, serving: str | None, focus: Sequence[str],
                    as_of: datetime | None, budget_tokens: int | None, deeper: bool = False) -> dict[str, Any]: ...

    def deepen(self, tenant: str, perspective_id: str, budget_tokens: int | None) -> dict[str, Any]: ...

    def explain(self, tenant: str, perspective_id: str) -> dict[str, Any]: ...

    def forgotten(self) -> None:
        """Content was forgotten: drop whatever holds it in memory."""


@dataclass
class Written:
    """What a write did: the log position of its last event (None: a repeat, nothing new was written)."""

    position: int | None
    events: int = 0
    fact_id: str | None = None
    change: str | None = None
    supersedes: str | None = None
    keys_deleted: int | None = None
    receipt: Any = None
    """A forget's receipt (`domain.workflows.ForgetReport`)."""


@dataclass
class RecallHit:
    tier: str
    fact: dict[str, Any]


@dataclass
class RecallResult:
    answered_by: str | None
    tiers_checked: list[str]
    hits: list[RecallHit] = field(default_factory=list)
    position: int | None = None
    restored: list[str] = field(default_factory=list)


def _fact_dict(fact: Any) -> dict[str, Any]:
    return {"fact_id": fact.fact_id, "subject": fact.subject, "relation": fact.relation, "object": fact.object,
            "scope": fact.scope, "reason": fact.reason, "confidence": fact.confidence, "status": str(fact.status),
            "valid_from": fact.valid_from, "valid_to": fact.valid_to, "asserted_at": fact.asserted_at}


class MemoryApplication:
    """One per process; shared by the HTTP app and the MCP server."""

    def __init__(self, noumena: Noumena, perspectives: PerspectiveEngine, follower: ProjectionFollower | None = None,
                 keys: ApiKeyStore | None = None) -> None:
        self.noumena = noumena
        self.service = noumena.service
        self.settings = noumena.settings
        self.perspectives = perspectives
        self.follower = follower
        self.keys = keys or ApiKeyStore(noumena.settings.api_keys_path())
        self._ingestor = noumena.ingestor()  # stored compactions start consolidation, as from Kafka

    # ------------------------------------------------------------------ writes

    def _run(self, command: c.Command) -> Written:
        return self._run_batch([command])[0]

    def _run_batch(self, commands: Sequence[c.Command]) -> tuple[Written, list[Any]]:
        result = self.service.execute_batch(commands, all_or_nothing=True)
        for outcome in result.outcomes:
            if outcome.error is not None:
                raise outcome.error
        if result.positions and self.follower is not None:
            self.follower.nudge()
        events = [e for o in result.outcomes for e in o.events]
        return Written(position=result.last_position, events=len(events)), events

    def ingest(self, tenant: str, raws: Sequence[Any]) -> Written:
        """A batch of wire envelopes, all or nothing; every envelope must name the caller's tenant."""
        for index, raw in enumerate(raws):
            if isinstance(raw, dict) and "tenant" in raw and raw["tenant"] != tenant:
                raise TenantMismatch(index)
        result = self._ingestor.ingest(list(raws), all_or_nothing=True)
        if result.rejected:
            raise BatchRejected([Rejection(r.index, f"events[{r.index}].{r.field}" if r.field else
                                           f"events[{r.index}]", r.reason) for r in result.rejected])
        if result.positions and self.follower is not None:
            self.follower.nudge()
        return Written(position=result.last_position, events=result.stored_events)

    def create_tenant(self, tenant: str, display_name: str = "") -> Written:
        return self._run(c.CreateTenant(tenant=tenant, display_name=display_name))

    def tenant_exists(self, tenant: str) -> bool:
        return self.service.ontology(tenant).exists

    def register_entity(self, tenant: str, ref: str, label: str, aliases: Sequence[str] = (), hub: bool = False
                        ) -> Written:
        return self._run(c.RegisterEntity(tenant=tenant, ref=ref, label=label, aliases=tuple(aliases), hub=hub))

    def assert_fact(self, tenant: str, **fields: Any) -> Written:
        """Assert a fact (with provenance in `source`); a repeat corroborates it, a functional one supersedes."""
        written, events = self._run_batch([c.AssertFact(tenant=tenant, **fields)])
        for event in events:
            if isinstance(event, FactAsserted):
                written.fact_id, written.change, written.supersedes = event.fact_id, "asserted", event.supersedes
            elif isinstance(event, FactCorroborated):
                written.fact_id, written.change = event.fact_id, "corroborated"
        return written

    def invalidate_fact(self, tenant: str, **fields: Any) -> Written:
        """End a current fact, named by `fact_id` or by subject, relation, object and scope."""
        written, events = self._run_batch([c.InvalidateFact(tenant=tenant, **fields)])
        for event in events:
            if isinstance(event, FactInvalidated):
                written.fact_id, written.change = event.fact_id, "invalidated"
        return written

    def mark_used(self, tenant: str, agent: str, fact_ids: Sequence[str], perspective_id: str | None = None,
                  mode: RecallMode = RecallMode.USED) -> Written:
        """Record that `agent` used these facts: they grow stronger for that agent."""
        state = self.service.ontology(tenant)
        state.require_entity(agent, "agent")
        for index, fact_id in enumerate(fact_ids):
            if fact_id not in state.facts:
                raise UnknownEntityFact(fact_id, f"fact_ids[{index}]")
        return self._run(c.RecordRecall(tenant=tenant, agent=agent, fact_ids=tuple(fact_ids), mode=mode,
                                        perspective_id=perspective_id))

    def forget(self, tenant: str, subject: str) -> Written:
        """Forget a subject for real (crypto-shredding: its data keys are deleted, every copy in the log becomes
        unreadable), then purge the read model and the perspective indexes of its content before answering."""
        report = self.noumena.forget(tenant, subject)
        if self.follower is not None:
            if report.position is not None:
                # The keys are gone already; give the purge (a rebuild of the read model) longer than a read
                # waits, and answer even if it is still running: the forget itself has happened.
                self.follower.wait_for(report.position, max(60.0, self.settings.api_read_wait_seconds))
            report.files_rewritten.append("projections: rebuilt by the running projector")
        else:
            purged = self.noumena.purge_projections()  # None when a server's projector holds the file
            self.perspectives.forgotten()
            report.files_rewritten.append("projections: " + ("rebuilt, snapshot and exports rewritten"
                                                             if purged is not None else "none here"))
        return Written(position=report.position, events=1 if report.position is not None else 0,
                       keys_deleted=report.keys_deleted, receipt=report)

    # ------------------------------------------------------------------ recall by tier

    def recall(self, tenant: str, agent: str, subject: str, *, relation: str | None = None,
               serving: str | None = None, session_id: str | None = None, deeper: bool = False) -> RecallResult:
        """Tier-aware recall (domain/workflows.py): facts about `subject` from the nearest tier that has any —
        the session, then the person served (episodic), then the org (semantic) — saying which tier answered.
        The facts found are recorded as recalled by `agent`; a deeper recall also brings back facts archived
        for disuse."""
        state = self.service.ontology(tenant)
        state.require_entity(agent, "agent")
        state.require_entity(subject, "subject")
        if serving is not None:
            state.require_entity(serving, "serving")
        if session_id is not None:
            state.require_session(session_id)
        answer = recall_by_tier(self.service, tenant, agent, serving, subject, relation, session_id, deeper)
        tiers = ["session"] + (["episodic"] if serving is not None else []) + ["semantic"]
        result = RecallResult(answered_by=answer.tier.value if answer.tier else None, tiers_checked=tiers,
                              hits=[RecallHit(answer.tier.value, _fact_dict(f)) for f in answer.facts]
                              if answer.tier else [], restored=list(answer.restored))
        if answer.facts:
            result.position = self.service.last_position
            if self.follower is not None:
                self.follower.nudge()
        return result

    # ------------------------------------------------------------------ reads from the projection

    def must_wait(self, min_position: int | None) -> bool:
        """Whether a read naming `min_position` would have to wait for the projector."""
        return bool(min_position) and (self.follower is None or self.follower.position < (min_position or 0))

    def wait_for(self, min_position: int | None) -> None:
        """Read-your-writes: wait (bounded) until the read model has applied `min_position`."""
        if min_position is None or min_position <= 0:
            return
        follower = self._follower()
        end = self.noumena.log.max_position()
        if min_position > end:
            raise InvalidInput(f"min_position {min_position} is beyond the end of the log ({end}): no write"
                               " returned it", field="min_position")
        if not follower.wait_for(min_position, self.settings.api_read_wait_seconds):
            raise ProjectionBehind(f"the read model reached position {follower.position}, not {min_position},"
                                   f" within {self.settings.api_read_wait_seconds:g} s; retry")

    def _follower(self) -> ProjectionFollower:
        if self.follower is None:
            raise ProjectionBehind("this process runs no projector")
        return self.follower

    def _read(self) -> Any:
        return self._follower().reader()

    def entity(self, tenant: str, ref: str, min_position: int | None = None) -> dict[str, Any] | None:
        self.wait_for(min_position)
        with self._read() as con:
            return read_model.entity(con, tenant, ref)

    def search_entities(self, tenant: str, text: str, skip: int, limit: int, min_position: int | None = None
                        ) -> tuple[list[dict[str, Any]], int]:
        self.wait_for(min_position)
        with self._read() as con:
            return read_model.search_entities(con, tenant, text, skip, limit)

    def fact(self, tenant: str, fact_id: str, min_position: int | None = None
             ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        self.wait_for(min_position)
        with self._read() as con:
            return read_model.fact_history(con, tenant, fact_id)

    def graph(self, tenant: str, recorded_at: datetime | None, valid_at: datetime | None, skip: int, limit: int,
              min_position: int | None = None) -> tuple[list[dict[str, Any]], int]:
        self.wait_for(min_position)
        with self._read() as con:
            try:
                return read_model.graph_as_of(con, tenant, recorded_at, valid_at, skip, limit)
            except duckdb.Error as error:
                raise InfrastructureError(f"graph query failed: {error}") from error

    def session(self, tenant: str, session_id: str, min_position: int | None = None
                ) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        self.wait_for(min_position)
        with self._read() as con:
            return read_model.session(con, tenant, session_id), read_model.workers(con, tenant, session_id)

    # ------------------------------------------------------------------ recall by content

    def search_for(self, tenant: str, agent: str, query: str, serving: str | None = None,
                   session_id: str | None = None, k: int = 10, as_of: datetime | None = None,
                   min_position: int | None = None, about: Sequence[str] = ()) -> dict[str, Any]:
        """The facts `agent` may see (serving `serving`, in `session_id`) that best match `query`, nearest tier
        first, with their score components (projections/searches.py). Records a recall (`looked_up`)."""
        if min_position is not None and self.follower is not None:
            self.wait_for(min_position)
        from api.search_engine import searches_of
        from projections.searches import search_json

        answer = searches_of(self).search(tenant, agent, query, serving=serving, session_id=session_id, k=k,
                                          as_of=as_of, about=about)
        if answer.recall_position is not None and self.follower is not None:
            self.follower.nudge()
        return search_json(answer)

    def explain_search(self, tenant: str, search_id: str) -> dict[str, Any]:
        from api.search_engine import searches_of

        return searches_of(self).explain(tenant, search_id).model_dump(mode="json")

    # ------------------------------------------------------------------ perspectives

    def perspective(self, tenant: str, agent: str, serving: str | None = None, focus: Sequence[str] = (),
                    as_of: datetime | None = None, budget_tokens: int | None = None, deeper: bool = False,
                    min_position: int | None = None, about: Sequence[str] = ()) -> dict[str, Any]:
        if min_position is not None and self.follower is not None:
            self.wait_for(min_position)
        return self.perspectives.perspective(tenant, agent, serving, focus, as_of, budget_tokens, deeper)

    def deepen(self, tenant: str, perspective_id: str, budget_tokens: int | None = None) -> dict[str, Any]:
        return self.perspectives.deepen(tenant, perspective_id, budget_tokens)

    def explain(self, tenant: str, perspective_id: str) -> dict[str, Any]:
        return self.perspectives.explain(tenant, perspective_id)


class UnknownEntityFact(DomainError):
    """A fact id named in a request is not a fact of the caller's tenant."""

    def __init__(self, fact_id: str, field: str) -> None:
        super().__init__(f"no fact {fact_id!r} in your tenant", field=field)


__all__ = ["BatchRejected", "MemoryApplication", "PerspectiveEngine", "ProjectionBehind",
           "RecallResult", "TenantMismatch", "UnknownEntity", "Written"]
