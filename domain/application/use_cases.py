"""The use cases: one method of `Application` per thing a user can ask of noumena, called by every entry point
(the HTTP routes, the CLI, the MCP tools; Kafka and file import through `ingestor`) so each gets the same checks.

Every method takes the caller first (domain/access.py: the tenant, and the agents a key is scoped to) and decides
there whether the caller may do it, so no entry point checks on its own: HTTP and MCP pass the caller of the key,
the CLI and the consumers a tenant name (a tenant-wide caller). The tenant comes from authentication (HTTP, MCP)
or an option (CLI), never from a request body. No HTTP and no I/O here: storage, the read model and the
perspective and context engines are ports (domain/ports.py) that infra/bootstrap.py fills; errors are domain
errors (or the few below), mapped to problem documents by api/problems.py.

Adding a use case: a method here that validates its input against the tenant's state, runs commands through
`self.service` (or asks a port), and returns plain data; logic longer than a few lines goes in a module of this
package named after it (like recall.py), with unit tests over an `Ontology`. Then each entry point calls it.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from domain import commands as c
from domain.access import (
    Caller,
    as_caller,
    check_acts_as,
    check_may_use,
    check_may_write_fact,
    require_tenant_wide,
    scopes_seen,
)
from domain.activation import Tier
from domain.application.consolidation import ConsolidationReport, ConsolidationWorker
from domain.application.disuse import archive_disused
from domain.application.entities import merge_entities
from domain.application.entity_finder import EntityFinder
from domain.application.forgetting import ForgetReport, forget
from domain.application.ingestion import Ingestor
from domain.application.ontology_service import OntologyService
from domain.application.recall import recall as recall_by_tier
from domain.application.recall_buffer import RecallBuffer
from domain.consolidation import CompactionState
from domain.context import Context
from domain.entities import EntityState
from domain.entity_names import Found, NamedEntity
from domain.errors import (
    DomainError,
    ForgetRunning,
    InfrastructureError,
    InvalidInput,
    UnknownEntity,
    UnknownTenant,
)
from domain.facts import FactAsserted, FactCorrected, FactCorroborated, FactInvalidated
from domain.ontology import Ontology
from domain.perspective import Perspective, RecallRecord
from domain.ports import (
    ContextEngine,
    CopiesOutsideTheLog,
    EventLog,
    EvidenceStore,
    KeyStore,
    PerspectiveEngine,
    ReadModel,
    SearchEngine,
)
from domain.recalls import RecallMode
from domain.resolution import NameIndex
from domain.search import SearchAnswer
from domain.sessions import SessionState, workers_for


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


@dataclass
class Written:
    """What a write did: the log position of its last event (None: a repeat, nothing new was written)."""

    position: int | None
    events: int = 0
    fact_id: str | None = None
    change: str | None = None
    supersedes: str | None = None
    keys_deleted: int | None = None
    receipt: ForgetReport | None = None
    """A forget's receipt (domain/application/forgetting.py)."""
    purged_at: int | None = None
    """After a forget: the log position the projections were rebuilt at, when this process purged them."""


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


@dataclass(frozen=True)
class RelationInUse:
    """A relation name, its rules, whether it was defined (built in or by the tenant: else it has the default
    rules), and how many current facts use it."""

    name: str
    functional: bool
    symmetric: bool
    weight: float
    defined: bool
    current_facts: int


@dataclass(frozen=True)
class ApplicationSettings:
    """The application's own settings (from infra/settings.py's Settings, by the composition root)."""

    read_wait_seconds: float = 5.0
    """How long a read naming `min_position` waits for the read model before giving up."""
    purge_wait_seconds: float = 60.0
    """How long a forget waits for this process's projector to purge the read model before it answers."""
    disuse_period_days: float = 30.0
    """Archive facts whose activation stayed below the threshold for every agent this long."""


@dataclass
class ReviewItem:
    """An entity marked needs_review, with the refs whose names look like it."""

    entity: EntityState
    looks_like: list[str]


class Application:
    """One per process, built by infra/bootstrap.py; shared by every entry point of that process."""

    def __init__(self, service: OntologyService, log: EventLog, *, consolidation: ConsolidationWorker,
                 perspectives: PerspectiveEngine, contexts: ContextEngine, searches: SearchEngine,
                 copies: CopiesOutsideTheLog, evidence: EvidenceStore, recalls: RecallBuffer | None = None,
                 keys: KeyStore | None = None, read_model: ReadModel | None = None,
                 settings: ApplicationSettings = ApplicationSettings()) -> None:
        self.service = service
        self.log = log
        self.consolidation = consolidation
        self.perspectives = perspectives
        self.contexts = contexts
        self.searches = searches
        self.copies = copies
        self.evidence = evidence
        """What `explain` shows about served reads (infra/adapters/evidence.py), kept by the read use cases below."""
        self.recalls = recalls if recalls is not None else RecallBuffer(service)
        """Where served reads record their uses (coalesced, domain/application/recall_buffer.py): one per process,
        shared by every Application of the process."""
        self.keys = keys
        self.read_model = read_model
        """None: this process runs no projector (the CLI, the MCP server); reads by query are unavailable."""
        self.settings = settings
        self.ingestor = Ingestor(service, on_stored=lambda command: consolidation.signal(command))
        """Wire envelopes into the log (HTTP batches, Kafka, file import): stored compactions start consolidation."""
        self._forgets: dict[str, tuple[str, datetime]] = {}
        """Tenant -> the subject it is forgetting now and since when: one forget per tenant at a time."""
        self._forgets_lock = threading.Lock()
        self.entity_names = EntityFinder(service, lambda: self.read_model)
        """Entities by name (domain/application/entity_finder.py), for every entry point."""

    # ------------------------------------------------------------------ writes

    def _run(self, command: c.Command) -> Written:
        return self._run_batch([command])[0]

    def _run_batch(self, commands: Sequence[c.Command]) -> tuple[Written, list[Any]]:
        result = self.service.execute_batch(commands, all_or_nothing=True)
        for outcome in result.outcomes:
            if outcome.error is not None:
                raise outcome.error
        self._written(result.positions)
        events = [e for o in result.outcomes for e in o.events]
        return Written(position=result.last_position, events=len(events)), events

    def _written(self, positions: Sequence[int]) -> None:
        if positions and self.read_model is not None:
            self.read_model.nudge()

    # ------------------------------------------------------------------ who may

    @staticmethod
    def _tenant_wide(who: Caller | str, what: str) -> str:
        """The tenant, for a use case only a tenant-wide caller may use (NotPermitted for a scoped key)."""
        caller = as_caller(who)
        require_tenant_wide(caller.agents, what)
        return caller.tenant

    def _acting_as(self, who: Caller | str, agent: str, serving: str | None = None, session_id: str | None = None
                   ) -> str:
        """The tenant, once the caller may ask as `agent`, serving `serving`, in `session_id`."""
        caller = as_caller(who)
        if caller.scoped:
            with self.service.reading(caller.tenant) as state:
                check_acts_as(state, caller.agents, agent, serving, session_id)
        return caller.tenant

    def ingest(self, who: Caller | str, raws: Sequence[Any]) -> Written:
        """A batch of wire envelopes, all or nothing; every envelope must name the caller's tenant."""
        tenant = self._tenant_wide(who, "writing envelopes (events)")
        for index, raw in enumerate(raws):
            if isinstance(raw, dict) and "tenant" in raw and raw["tenant"] != tenant:
                raise TenantMismatch(index)
        result = self.ingestor.ingest(list(raws), all_or_nothing=True)
        if result.rejected:
            raise BatchRejected([Rejection(r.index, f"events[{r.index}].{r.field}" if r.field else
                                           f"events[{r.index}]", r.reason) for r in result.rejected])
        self._written(result.positions)
        return Written(position=result.last_position, events=result.stored_events)

    def create_tenant(self, tenant: str, display_name: str = "") -> Written:
        """Create a tenant: one organization, one ontology."""
        return self._run(c.CreateTenant(tenant=tenant, display_name=display_name))

    def tenant_exists(self, tenant: str) -> bool:
        with self.service.reading(tenant) as state:
            return state.exists

    def register_entity(self, who: Caller | str, ref: str, label: str, aliases: Sequence[str] = (), hub: bool = False
                        ) -> Written:
        """Register an entity (a repeat with the same label is a no-op)."""
        tenant = self._tenant_wide(who, "registering entities")
        return self._run(c.RegisterEntity(tenant=tenant, ref=ref, label=label, aliases=tuple(aliases), hub=hub))

    def register_unknown(self, who: Caller | str, labels: dict[str, str | None]) -> None:
        """Register each ref that is not an entity yet with its label (refs without a label are left alone)."""
        tenant = self._tenant_wide(who, "registering entities")
        with self.service.reading(tenant) as state:
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
            with self.service.writing(tenant) as state:
                self._check_write(state, caller, command)
                written, events = self._run_batch([command])
        else:
            written, events = self._run_batch([command])
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
            with self.service.reading(caller.tenant) as state:
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
        tenant = self._tenant_wide(who, "ending (correcting) facts")
        written, events = self._run_batch([c.InvalidateFact(tenant=tenant, **fields)])
        for event in events:
            if isinstance(event, FactInvalidated):
                written.fact_id, written.change = event.fact_id, "invalidated"
            elif isinstance(event, FactCorrected):  # an earlier end for a fact already ended
                written.fact_id, written.change = event.fact_id, "corrected"
        return written

    def promote_fact(self, who: Caller | str, fact_id: str, approved_by: str) -> Written:
        """Approve a person- or session-scoped fact for the whole organization (semantic memory)."""
        tenant = self._tenant_wide(who, "promoting facts")
        written, events = self._run_batch([c.PromoteFact(tenant=tenant, fact_id=fact_id, approved_by=approved_by)])
        if events:
            written.fact_id, written.change = getattr(events[0], "fact_id", None), "promoted"
        return written

    def mark_used(self, who: Caller | str, agent: str, fact_ids: Sequence[str], perspective_id: str | None = None,
                  mode: RecallMode = RecallMode.USED) -> Written:
        """Record that `agent` used these facts: they grow stronger for that agent. A scoped key records uses
        only as its agents, of facts they may see."""
        caller = as_caller(who)
        tenant = caller.tenant
        with self.service.reading(tenant) as state:
            check_acts_as(state, caller.agents, agent)
            state.require_entity(agent, "agent")
            for index, fact_id in enumerate(fact_ids):
                if fact_id not in state.facts:
                    raise UnknownEntityFact(fact_id, f"fact_ids[{index}]")
            check_may_use(state, caller.agents, fact_ids)
        return self._run(c.RecordRecall(tenant=tenant, agent=agent, fact_ids=tuple(fact_ids), mode=mode,
                                        perspective_id=perspective_id))

    def forget(self, who: Caller | str, subject: str) -> Written:
        """Forget a subject for real (crypto-shredding: its data keys are deleted, every copy in the log becomes
        unreadable), blank the kept evidence, then purge the read model and the perspective indexes of its
        content (or, with this process's projector, answer once the live read model and indexes are cleaned of
        it, waiting for that, bounded: the projector rebuilds the read model from the log behind them).

        Other tenants are never held up by it beyond the key deletion itself: the projector rebuilds the read
        model in the background while they read on (infra/runtime/serving.py). One forget per tenant runs at a time in
        a process: another one asked meanwhile is refused (ForgetRunning, naming the running one)."""
        tenant = self._tenant_wide(who, "forgetting")
        with self._forgets_lock:
            running = self._forgets.get(tenant)
            if running is not None:
                raise ForgetRunning(tenant, running[0], running[1].isoformat(), subject)
            self._forgets[tenant] = (subject, datetime.now(UTC))
        try:
            return self._forget(tenant, subject)
        finally:
            with self._forgets_lock:
                self._forgets.pop(tenant, None)

    def forgets_running(self) -> dict[str, str]:
        """Tenant -> the subject this process is forgetting for it now."""
        with self._forgets_lock:
            return {tenant: subject for tenant, (subject, _) in self._forgets.items()}

    def _forget(self, tenant: str, subject: str) -> Written:
        if self.keys is None:
            raise InvalidInput("content is not encrypted here (NOUMENA_ENCRYPT_CONTENT=false): nothing can be "
                               "forgotten for real", field="subject")
        read_model = self.read_model
        if read_model is not None:
            read_model.expect_forget(tenant)
        sealed: list[int] = []
        report: ForgetReport | None = None
        try:
            report = forget(self.service, self.keys, tenant, subject)
            report.events_affected, sealed = self.copies.events_affected(tenant)
        finally:
            if read_model is not None:
                read_model.forgotten(tenant, report.position if report is not None else None, sealed)
        assert report is not None
        report.files_rewritten = self.copies.erase(tenant, (subject, *report.erased_with))
        purged_at = None
        if read_model is not None:
            cleaned = True
            if report.position is not None:
                # The keys are gone and the event is recorded: the forget has happened. It answers once no read can
                # show what it erased (the live read model's texts blanked, its indexes reloaded); the rebuild of
                # the read model from the log, which leaves no copy in the file's blocks, goes on behind it.
                cleaned = read_model.wait_cleaned(tenant, report.position, self.settings.purge_wait_seconds)
            report.files_rewritten.append(
                "projections: cleaned in the live read model; being rebuilt from the log by the running projector"
                " (GET /readyz lists the tenant under `purging` until the rebuilt file is in)" if cleaned else
                "projections: still being cleaned by the running projector after "
                f"{self.settings.purge_wait_seconds:g} s (the tenant's reads wait for it)")
        else:
            purged_at = self.copies.purge()  # None when a server's projector holds the file: it purges itself
            self.perspectives.forgotten([tenant])
            self.entity_names.forgotten([tenant])
            report.files_rewritten.append("projections: " + ("rebuilt, snapshot and exports rewritten"
                                                             if purged_at is not None else "none here"))
        return Written(position=report.position, events=1 if report.position is not None else 0,
                       keys_deleted=report.keys_deleted, purged_at=purged_at, receipt=report)

    # ------------------------------------------------------------------ entities and facts under review

    def entities_to_review(self, who: Caller | str) -> list[ReviewItem]:
        """Entities marked needs_review (an ambiguous mention never merges silently), with their look-alikes."""
        tenant = self._tenant_wide(who, "reviewing entities")
        with self.service.reading(tenant) as state:
            names = NameIndex(state)
            return [ReviewItem(entity, sorted((names.exact(entity.label) | names.fuzzy(entity.label)) - {entity.ref}))
                    for entity in state.entities.values() if entity.needs_review and entity.merged_into is None]

    def merge_entities(self, who: Caller | str, merged_ref: str, into_ref: str, reason: str = "reviewed: same entity"
                       ) -> int:
        """Merge `merged_ref` into `into_ref` (recorded as an event); its current facts move. Returns how many."""
        tenant = self._tenant_wide(who, "merging entities")
        moved = merge_entities(self.service, tenant, merged_ref, into_ref, reason)
        self._written([self.service.last_position or 0])
        return moved

    def keep_entity(self, who: Caller | str, ref: str) -> Written:
        """Mark a reviewed entity as distinct (clears needs_review)."""
        tenant = self._tenant_wide(who, "reviewing entities")
        return self._run(c.KeepEntity(tenant=tenant, ref=ref))

    def archive_disused(self, who: Caller | str, now: datetime, period_days: float | None = None) -> list[str]:
        """Archive disused facts (hidden from perspectives, never deleted); returns their ids."""
        tenant = self._tenant_wide(who, "archiving disused facts")
        if not self.tenant_exists(tenant):
            raise UnknownTenant(tenant)
        days = self.settings.disuse_period_days if period_days is None else period_days
        if days <= 0:
            raise InvalidInput("the disuse period must be positive", field="period_days")
        archived = archive_disused(self.service, tenant, now, timedelta(days=days))
        if archived:
            self._written([self.service.last_position or 0])
        return archived

    # ------------------------------------------------------------------ consolidation

    def compactions(self, who: Caller | str) -> list[CompactionState]:
        """Every compaction with its consolidation status, attempts, counts or failure reason."""
        tenant = self._tenant_wide(who, "reading compactions")
        if not self.tenant_exists(tenant):
            raise UnknownTenant(tenant)
        with self.service.reading(tenant) as state:
            return list(state.compactions.values())

    def consolidate_pending(self, who: Caller | str) -> list[ConsolidationReport]:
        """Consolidate every pending compaction now (the background worker does this on arrival)."""
        tenant = self._tenant_wide(who, "consolidating")
        if not self.tenant_exists(tenant):
            raise UnknownTenant(tenant)
        return self.consolidation.run_pending(tenant)

    def retry_consolidation(self, who: Caller | str, compaction_id: str) -> ConsolidationReport:
        """Run a failed (or stuck) consolidation again, e.g. after fixing the extractor's settings."""
        tenant = self._tenant_wide(who, "consolidating")
        return self.consolidation.retry(tenant, compaction_id)

    # ------------------------------------------------------------------ recall by tier, workers

    def recall(self, who: Caller | str, agent: str, subject: str, *, relation: str | None = None,
               serving: str | None = None, session_id: str | None = None, deeper: bool = False,
               min_position: int | None = None) -> RecallResult:
        """Tier-aware recall (domain/application/recall.py): facts about `subject` from the nearest tier that has
        any — the session, then the person served (episodic), then the org (semantic) — saying which tier
        answered. The facts found are recorded as recalled by `agent`; a deeper recall also brings back facts
        archived for disuse."""
        tenant = self._acting_as(who, agent, serving, session_id)
        self.fresh(tenant, min_position)
        with self.service.reading(tenant) as state:
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
            self._written([result.position or 0])
        return result

    def workers(self, who: Caller | str, session_id: str, about: str | None = None, live_only: bool = True
                ) -> list[SessionState]:
        """The workers of a main session (the live ones by default), about `about` if given, newest first."""
        tenant = self._tenant_wide(who, "listing workers")
        with self.service.reading(tenant) as state:
            return workers_for(state, session_id, about, live_only)

    # ------------------------------------------------------------------ reads from the projection

    def log_position(self) -> int:
        """The last position in the event log."""
        return self.log.max_position()

    def fresh(self, tenant: str, min_position: int | None = None) -> None:
        """Read-your-writes, before every read of `tenant` this process serves from its read side (the DuckDB read
        model and the perspective and search indexes that follow it): wait (bounded) until that side has applied
        this process's latest write in the tenant, and `min_position` when given (a position another replica's
        write returned). Every read use case calls it first, so no entry point can forget it; what a read finds
        in the folded state (`service.reading`) is current already (it reads the log's tail itself).

        A `min_position` beyond the end of the log is refused (no write returned it); a read side that does not
        get there within `read_wait_seconds` makes the read a ProjectionBehind (503, retry)."""
        if min_position is not None and min_position > 0:
            end = self.log.max_position()
            if min_position > end:
                raise InvalidInput(f"min_position {min_position} is beyond the end of the log ({end}): no write"
                                   " returned it", field="min_position")
        target = max(min_position or 0, self.service.written_position(tenant))
        read_model = self.read_model
        if read_model is None or target <= read_model.position:
            return  # (no read side of its own: the engines read the log to its end on each call)
        if not read_model.wait_for(target, self.settings.read_wait_seconds):
            raise ProjectionBehind(f"the read model reached position {read_model.position}, not {target},"
                                   f" within {self.settings.read_wait_seconds:g} s; retry")

    def _read_model(self) -> ReadModel:
        if self.read_model is None:
            raise ProjectionBehind("this process runs no projector")
        return self.read_model

    def entity(self, who: Caller | str, ref: str, min_position: int | None = None) -> dict[str, Any] | None:
        """One entity as it is now (tenant-wide keys)."""
        tenant = self._tenant_wide(who, "reading entities")
        self.fresh(tenant, min_position)
        return self._read_model().entity(tenant, ref)

    def search_entities(self, who: Caller | str, text: str, skip: int, limit: int, min_position: int | None = None
                        ) -> tuple[list[dict[str, Any]], int]:
        """Entities by ref, label or alias (tenant-wide keys)."""
        tenant = self._tenant_wide(who, "reading entities")
        self.fresh(tenant, min_position)
        return self._read_model().search_entities(tenant, text, skip, limit)

    def find_entities(self, who: Caller | str, text: str, limit: int = 10, min_position: int | None = None,
                      kind: str | None = None) -> tuple[list[Found], int]:
        """The entities `text` may name (ref, label, alias; Chinese or Latin; exact, prefix, word or one typo
        away), best first, of those the caller may see (domain/application/entity_finder.py) and of `kind` if
        given; and how many there were in all."""
        caller = as_caller(who)
        self.fresh(caller.tenant, min_position)
        return self.entity_names.find(caller.tenant, text, limit, caller.agents, kind)

    def entities_of_kind(self, who: Caller | str, kind: str, skip: int, limit: int, min_position: int | None = None
                         ) -> tuple[list[NamedEntity], int]:
        """A page of the tenant's entities of `kind`, by ref, and how many there are (tenant-wide keys)."""
        tenant = self._tenant_wide(who, "listing entities")
        self.fresh(tenant, min_position)
        every = self.entity_names.of_kind(tenant, kind)
        return every[skip:skip + limit], len(every)

    def relations(self, who: Caller | str) -> list[RelationInUse]:
        """Every relation type the tenant knows (built in or defined) and every relation name its current facts
        use, with its rules (functional: a new object supersedes the old) and how many current facts use it."""
        caller = as_caller(who)
        with self.service.reading(caller.tenant) as state:
            seen = scopes_seen(state, caller.agents)  # a scoped key counts only facts its agents see
            counts: dict[str, int] = {}
            for _subject, relation, _object, scope in state.current_by_key:
                if seen(scope):
                    counts[relation] = counts.get(relation, 0) + 1
            known = dict(state.relation_types)
            rules = {name: state.relation(name) for name in set(known) | set(counts)}
        return sorted((RelationInUse(name=name, functional=rule.functional, symmetric=rule.symmetric,
                                     weight=rule.weight, defined=name in known, current_facts=counts.get(name, 0))
                       for name, rule in rules.items()), key=lambda r: (-r.current_facts, r.name))

    def resolve_ref(self, who: Caller | str, value: str, field: str) -> str:
        """A ref given as itself or by an unambiguous name the caller may see (AmbiguousName, listing the
        candidates, otherwise)."""
        caller = as_caller(who)
        return self.entity_names.resolve(caller.tenant, value, field, caller.agents)

    def fact(self, who: Caller | str, fact_id: str, min_position: int | None = None
             ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """One fact's versions and changes (tenant-wide keys)."""
        tenant = self._tenant_wide(who, "reading facts by id")
        self.fresh(tenant, min_position)
        return self._read_model().fact_history(tenant, fact_id)

    def graph(self, who: Caller | str, recorded_at: datetime | None, valid_at: datetime | None, skip: int,
              limit: int, min_position: int | None = None) -> tuple[list[dict[str, Any]], int]:
        """The facts believed at `recorded_at` (tenant-wide keys)."""
        tenant = self._tenant_wide(who, "reading the graph")
        self.fresh(tenant, min_position)
        return self._read_model().graph_as_of(tenant, recorded_at, valid_at, skip, limit)

    def session(self, who: Caller | str, session_id: str, min_position: int | None = None
                ) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        """A session and its workers (tenant-wide keys)."""
        tenant = self._tenant_wide(who, "reading sessions")
        self.fresh(tenant, min_position)
        return self._read_model().session(tenant, session_id)

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
        tenant = self._acting_as(who, agent, serving, session_id)
        self.fresh(tenant, min_position)
        answer = self.searches.search(tenant, agent, query, serving=serving, session_id=session_id, k=k,
                                      as_of=as_of, about=about)
        if not self.perspectives.records_recalls:  # (a benchmark's engine over an index not built from the log)
            return answer
        if as_of is None and record:
            found = [i.fact_id for i in answer.items if i.fact_id is not None]  # turns are no facts to recall
            recorded = self._record_recall(tenant, agent, answer.search_id, found, RecallMode.LOOKED_UP,
                                           datetime.fromisoformat(answer.served_at))
            if recorded is not None:
                answer.recall_position, answer.recall_held = recorded.position, recorded.held
        self.evidence.keep(answer)
        return answer

    def explain_search(self, who: Caller | str | None, search_id: str) -> SearchAnswer:
        """The evidence of a served search (None: an operator's look, as for `explain`; tenant-wide keys)."""
        return self.evidence.search(None if who is None else self._tenant_wide(who, "search evidence"), search_id)

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
        tenant = self._acting_as(who, agent, serving)
        self.fresh(tenant, min_position)
        served = self.perspectives.perspective(tenant, agent, serving, focus, as_of, budget_tokens, deeper)
        if not self.perspectives.records_recalls:
            return served
        if as_of is None and record:
            served.recall = self._record_recall(tenant, agent, served.perspective_id,
                                                served.fact_ids(Tier.FULL, Tier.GIST),
                                                RecallMode.DEEPENED if deeper else RecallMode.PUSHED, served.served_at)
        self.evidence.keep(served)
        return served

    def _record_recall(self, tenant: str, agent: str, served_id: str, fact_ids: list[str], mode: RecallMode,
                       at: datetime) -> RecallRecord | None:
        """A served read used these facts: held for the next coalesced flush, or written now (coalescing off)."""
        if not fact_ids:
            return None
        recorded = self.recalls.record(tenant, agent, fact_ids, mode, at, served_id)
        self._written([recorded.position] if recorded.position is not None else [])
        return RecallRecord(mode=mode.value, fact_ids=fact_ids, position=recorded.position, held=recorded.held)

    def flush_recalls(self) -> list[int]:
        """Write the uses served reads made that are still held (one event per tenant); the log positions."""
        positions = self.recalls.flush()
        self._written(positions)
        return positions

    def deepen(self, who: Caller | str, perspective_id: str, budget_tokens: int | None = None,
               min_position: int | None = None) -> Perspective:
        """Think deeper from a perspective served before: same standpoint, one more hop, a lower threshold (a
        scoped key only from a perspective of its agents)."""
        caller = as_caller(who)
        tenant = caller.tenant
        before, _ = self.evidence.perspective(tenant, perspective_id)
        self._acting_as(caller, before.agent, before.serving)
        return self.perspective(tenant, before.agent, before.serving, before.focus, before.as_of,
                                budget_tokens or before.budget_tokens, deeper=True, min_position=min_position)

    def explain(self, who: Caller | str | None, perspective_id: str) -> Perspective:
        """The evidence of a served perspective: inputs, parameters and outputs. Kept as its request (the default
        evidence mode), the outputs are computed again from the log as it stood when it was served. Agents name
        their tenant; None is an operator's look at the data directory (the CLI), whatever the tenant. A scoped
        key explains only perspectives of its agents."""
        caller = None if who is None else as_caller(who)
        kept, complete = self.evidence.perspective(None if caller is None else caller.tenant, perspective_id)
        if caller is not None:
            self._acting_as(caller, kept.agent, kept.serving)
        if complete:
            return kept
        again = self.perspectives.reproduce(kept)
        if kept.recall is not None:
            fact_ids = again.fact_ids(Tier.FULL, Tier.GIST)
            again.recall = kept.recall.model_copy(update={"fact_ids": fact_ids}) if fact_ids else None
        return again

    def reproduce(self, perspective_id: str) -> Perspective:
        """Compute a served perspective again from the log as it stood when it was served (nothing recorded):
        equal items mean the answer is explained by its inputs."""
        kept, _ = self.evidence.perspective(None, perspective_id)
        return self.perspectives.reproduce(kept)

    def context(self, who: Caller | str, session_id: str, message: str | None = None,
                budget_tokens: int | None = None, min_position: int | None = None) -> Context:
        """The context block for a main session, compiled for this request. Like a perspective, it is a use of
        the facts it shows clearly (mode `pushed`, through the recall buffer), and its evidence is kept. A scoped
        key asks only for a session of its agents (an unknown session is the engine's 404, as for any key)."""
        caller = as_caller(who)
        tenant = caller.tenant
        if caller.scoped:
            with self.service.reading(tenant) as state:
                session = state.sessions.get(session_id)
            if session is not None:
                self._acting_as(caller, session.agent, session.serving, session_id)
        self.fresh(tenant, min_position)
        served = self.contexts.context(tenant, session_id, message, budget_tokens)
        served.recall = self._record_recall(tenant, served.agent, served.context_id, served.shown_clearly(),
                                            RecallMode.PUSHED, served.served_at)
        self.evidence.keep(served)
        return served

    def explain_context(self, who: Caller | str | None, context_id: str) -> Context:
        """The evidence of a served context (None: an operator's look, as for `explain`; tenant-wide keys)."""
        return self.evidence.context(None if who is None else self._tenant_wide(who, "context evidence"), context_id)

    def reproduce_context(self, context_id: str) -> Context:
        """Assemble a served context again from the log as it stood then (nothing recorded)."""
        return self.contexts.reproduce(self.evidence.context(None, context_id))


class UnknownEntityFact(DomainError):
    """A fact id named in a request is not a fact of the caller's tenant."""

    def __init__(self, fact_id: str, field: str) -> None:
        super().__init__(f"no fact {fact_id!r} in your tenant", field=field)


__all__ = ["Application", "ApplicationSettings", "BatchRejected", "ProjectionBehind", "RecallResult", "TenantMismatch",
           "UnknownEntity", "Written"]
