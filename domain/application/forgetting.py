"""Forgetting a subject for real (crypto-shredding, see domain/forgetting.py): its keys are deleted first, then
`SubjectForgotten` is recorded."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from domain import commands as c
from domain.application.ontology_service import OntologyService, Outcome
from domain.errors import InvalidInput, UnknownTenant
from domain.forgetting import ForgetPlan, check_subject, forget_plan, state_snapshot_key
from domain.ports import KeyStore
from domain.rules import decide


@dataclass
class ForgetReport:
    subject: str
    keys_deleted: int
    position: int | None
    receipt_id: str = ""
    erased_with: tuple[str, ...] = ()
    recorded_at: datetime | None = None
    events_affected: int | None = None
    """Stored events whose content the deleted keys sealed (counted by the infrastructure, which reads them)."""
    files_rewritten: list[str] = field(default_factory=list)
    """Files outside the log rewritten without the content (evidence, projections, exports): by the caller."""


def forget(service: OntologyService, keys: KeyStore, tenant: str, subject: str) -> ForgetReport:
    """Forget a subject for real: delete its keys (first, and for real), then record `SubjectForgotten` (no
    content; a receipt id and what else was erased) while the key store still holds every sealed write off, so
    no write of any process lands between the deletion and the event; then drop the folded state, which may
    still hold the now-unreadable content."""
    try:
        check_subject(subject)
    except ValueError as error:
        raise InvalidInput(str(error), field="subject") from None
    receipt_id = f"fgt-{uuid.uuid4().hex[:20]}"
    probe = c.RecordForgetting(tenant=tenant, subject=subject, keys_deleted=0, receipt_id=receipt_id)
    with service.reading(tenant) as state:
        if not state.exists:
            raise UnknownTenant(tenant)
        decide(state, probe, datetime.now(UTC))  # the subject must exist: checked before any key is deleted
    planned: list[ForgetPlan] = []
    outcomes: list[Outcome] = []

    def plan() -> ForgetPlan:
        with service.reading(tenant) as state:  # (re-entered: the key store calls this under `exclusive`)
            found = forget_plan(state, subject)
        # the tenant's state snapshots hold content too: their key goes (a new one seals the next snapshot)
        planned.append(replace(found, also=(*found.also, state_snapshot_key(tenant).key_id)))
        return planned[-1]

    def record(deleted: int) -> None:
        erased_with = planned[-1].owners if planned else ()
        outcomes.append(service.execute(probe.model_copy(update={"keys_deleted": deleted,
                                                                 "erased_with": erased_with})))

    # The tenant's turn to write is taken before the key store's forget lock, as every writer takes them (a writer
    # holding its turn waits for the key store while it appends): so a forget and a writer never wait for each other.
    with service.serialized(tenant), service.exclusive():  # (other processes' writes wait for the key store)
        # What to delete besides the subject's own keys comes from the ontology: one fact's group siblings keep
        # their keys, a person takes the memories linked to them along, and the sessions that served them. The
        # key store works the plan out with every sealed write held off, so no fact written meanwhile is missed.
        deleted = keys.forget(tenant, subject, plan, record)
    service.reload(tenant)
    position, recorded_at = None, None
    outcome = outcomes[0] if outcomes else None
    if outcome is not None and outcome.events:
        position, recorded_at = service.last_position, outcome.events[-1].recorded_at
    return ForgetReport(subject, deleted, position, receipt_id, planned[-1].owners if planned else (), recorded_at)
