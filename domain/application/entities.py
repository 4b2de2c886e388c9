"""Entity review: merging two names of one thing, in one atomic write."""

from __future__ import annotations

from domain import commands as c
from domain.application.ontology_service import OntologyService


def merge_entities(service: OntologyService, tenant: str, merged_ref: str, into_ref: str,
                   reason: str = "reviewed: same entity", actor: str = "review") -> int:
    """Merge `merged_ref` into `into_ref` in one atomic write: the merge event, then each current fact of the
    merged entity ended and asserted again on the surviving entity (corroborating where it already holds).
    Returns how many facts moved."""
    with service.writing(tenant) as state:  # (the facts that move and the write that moves them together)
        moving = [f for f in state.current_facts() if merged_ref in (f.subject, f.object)]
        commands: list[c.Command] = [c.MergeEntities(tenant=tenant, merged_ref=merged_ref, into_ref=into_ref,
                                                     reason=reason)]
        for fact in moving:
            subject = into_ref if fact.subject == merged_ref else fact.subject
            obj = into_ref if fact.object == merged_ref else fact.object
            commands.append(c.InvalidateFact(tenant=tenant, fact_id=fact.fact_id, reason=f"moved: {merged_ref} was "
                                             f"merged into {into_ref}"))
            if subject == obj:
                continue  # a relation between the two names of one thing says nothing
            commands.append(c.AssertFact(tenant=tenant, subject=subject, relation=fact.relation, object=obj,
                                         reason=fact.reason, confidence=fact.confidence, valid_from=fact.valid_from,
                                         valid_to=fact.valid_to, scope=into_ref if fact.scope == merged_ref
                                         else fact.scope, source=c.Source(actor=actor)))
        result = service.execute_batch(commands, all_or_nothing=True)
    for outcome in result.outcomes:
        if outcome.error is not None:
            raise outcome.error
    return len(moving)
