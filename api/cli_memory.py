"""The memory commands of `noumena`: consolidation, entity review and merge, promotion, tier-aware recall,
workers, archiving by disuse, forgetting. Thin: parse, call the application (domain/application/), print."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

import typer
from rich.table import Table

from api.cli_support import Tenant, application, console

consolidation_app = typer.Typer(help="Consolidation ('sleep') of compacted sessions.", no_args_is_help=True)
entities_app = typer.Typer(help="Entities: find by name, review ambiguous ones, merge, keep.", no_args_is_help=True)
facts_app = typer.Typer(help="Facts: promotion to the organization.", no_args_is_help=True)


@consolidation_app.command("list")
def consolidation_list(tenant: Tenant) -> None:
    """Every compaction with its consolidation status, attempts, counts or failure reason."""
    with application() as memory:
        table = Table("compaction", "status", "attempts", "counts / reason")
        for k in memory.consolidation.compactions(tenant):
            detail = k.reason or ", ".join(f"{name} {count}" for name, count in k.counts.items() if count)
            table.add_row(k.compaction_id, k.status.value, str(k.attempts), detail)
        console.print(table)


@consolidation_app.command("run")
def consolidation_run(tenant: Tenant) -> None:
    """Consolidate every pending compaction now (the background worker does this on arrival)."""
    with application() as memory:
        reports = memory.consolidation.consolidate_pending(tenant)
        for report in reports:
            console.print(f"{report.compaction_id}: {report.status.value} {report.reason or report.counts}")
        if any(r.reason for r in reports):
            raise typer.Exit(1)


@consolidation_app.command("retry")
def consolidation_retry(compaction_id: str, tenant: Tenant) -> None:
    """Run a failed (or stuck) consolidation again, e.g. after fixing the extractor's settings."""
    with application() as memory:
        report = memory.consolidation.retry_consolidation(tenant, compaction_id)
        console.print(f"{report.compaction_id}: {report.status.value} {report.reason or report.counts}")
        if report.reason:
            raise typer.Exit(1)


@entities_app.command("find")
def entities_find(name: str, tenant: Tenant,
                  limit: Annotated[int, typer.Option(min=1, max=1000, help="Most entities shown.")] = 10) -> None:
    """The entities NAME may mean (label, alias, ref; Chinese or Latin; a typo), best first."""
    with application() as memory:
        found, count = memory.entities.find_entities(tenant, name, limit)
        table = Table("ref", "label", "score", "match", "matched")
        for f in found:
            table.add_row(f.ref, f.label, f"{f.score:.2f}", f.match, f.matched)
        console.print(table)
        if count > len(found):
            console.print(f"{count - len(found)} more")


@entities_app.command("review")
def entities_review(tenant: Tenant) -> None:
    """Entities marked needs_review (an ambiguous mention never merges silently), with their look-alikes."""
    with application() as memory:
        table = Table("ref", "label", "looks like")
        for item in memory.entities.entities_to_review(tenant):
            table.add_row(item.entity.ref, item.entity.label, ", ".join(item.looks_like))
        console.print(table)


@entities_app.command("merge")
def entities_merge(merged_ref: str, into: Annotated[str, typer.Option("--into", help="The surviving ref.")],
                   tenant: Tenant, reason: str = "reviewed: same entity") -> None:
    """Merge MERGED_REF into --into: recorded as an event; its current facts move."""
    with application() as memory:
        moved = memory.entities.merge_entities(tenant, merged_ref, into, reason)
        console.print(f"merged {merged_ref} into {into}; {moved} facts moved")


@entities_app.command("keep")
def entities_keep(ref: str, tenant: Tenant) -> None:
    """Mark a reviewed entity as distinct (clears needs_review)."""
    with application() as memory:
        memory.entities.keep_entity(tenant, ref)
        console.print(f"kept {ref} as its own entity")


@facts_app.command("promote")
def facts_promote(fact_id: str, tenant: Tenant,
                  approved_by: Annotated[str, typer.Option(help="Who approves.")]) -> None:
    """Approve a person- or session-scoped fact for the whole organization (semantic memory)."""
    with application() as memory:
        written = memory.facts.promote_fact(tenant, fact_id, approved_by)
        console.print(f"promoted as {written.fact_id}")


def recall_command(
    tenant: Tenant,
    agent: Annotated[str, typer.Option(help="The agent looking.")],
    subject: Annotated[str, typer.Option(help="The entity asked about.")],
    serving: Annotated[str | None, typer.Option(help="The person served.")] = None,
    relation: Annotated[str | None, typer.Option(help="Only this relation.")] = None,
    session: Annotated[str | None, typer.Option(help="The session asking (default: the agent's live main "
                                                     "sessions serving that person).")] = None,
    deeper: Annotated[bool, typer.Option("--deeper", help="Also look at facts archived for disuse.")] = False,
) -> None:
    """Answer from the nearest memory tier (session, episodic, semantic) and say which tier answered."""
    with application() as memory:
        answer = memory.reading.recall(tenant, agent, subject, relation=relation, serving=serving, session_id=session,
                                       deeper=deeper)
    if answer.answered_by is None:
        console.print("nothing remembered")
        raise typer.Exit(1)
    console.print(f"answered from the [bold]{answer.answered_by}[/] tier")
    for hit in answer.hits:
        fact = hit.fact
        back = " (brought back)" if fact["fact_id"] in answer.restored else ""
        console.print(f"  {fact['subject']} -{fact['relation']}-> {fact['object']} [{fact['scope']}] "
                      f"{fact['reason'] or ''} ({fact['fact_id']}){back}")


def workers_command(session_id: str, tenant: Tenant,
                    about: Annotated[str | None, typer.Option(help="Only workers about this ref.")] = None,
                    all_: Annotated[bool, typer.Option("--all", help="Include finished workers.")] = False) -> None:
    """The workers of a main session: where to route a follow-up."""
    with application() as memory:
        workers = memory.views.workers(tenant, session_id, about, live_only=not all_)
        table = Table("worker", "status", "task", "about", "last report")
        for w in workers:
            table.add_row(w.session_id, w.status.value if w.status else "", w.task or "", ", ".join(w.about),
                          w.last_summary or "")
        console.print(table)


def sweep_command(tenant: Tenant, period_days: Annotated[float | None, typer.Option(
        help="Archive facts below tau for every agent this long (default NOUMENA_DISUSE_PERIOD_DAYS).")] = None
                  ) -> None:
    """Archive disused facts: hidden from perspectives, never deleted; a deeper recall brings them back."""
    with application() as memory:
        archived = memory.forgetting.archive_disused(tenant, datetime.now(UTC), period_days)
        console.print(f"archived {len(archived)} disused facts")


def register(app: typer.Typer) -> None:
    app.add_typer(consolidation_app, name="consolidation")
    app.add_typer(entities_app, name="entities")
    app.add_typer(facts_app, name="facts")
    app.command("recall")(recall_command)
    app.command("workers")(workers_command)
    app.command("sweep")(sweep_command)
    app.command("forget")(forget_command)


def forget_command(subject: str, tenant: Tenant) -> None:
    """Forget SUBJECT for real (person:<ref>, session:<id>, fact:<id>, memory:<ref>): delete its data keys,
    record SubjectForgotten, and purge the projections and snapshots of its content."""
    with application() as memory:
        written = memory.forgetting.forget(tenant, subject)
    report = written.receipt
    console.print(f"forgot {subject}: {written.keys_deleted} data keys deleted"
                  + (f"; projections rebuilt without it at position {written.purged_at}"
                     if written.purged_at is not None else ""))
    when = report.recorded_at.isoformat() if report.recorded_at else "-"
    console.print(f"receipt {report.receipt_id} (recorded at log position {report.position}, {when})", markup=False)
    console.print(f"  events affected: {report.events_affected}", markup=False)
    if report.erased_with:
        console.print("  erased with it: " + ", ".join(report.erased_with), markup=False)
    for line in report.files_rewritten:
        console.print(f"  files rewritten: {line}", markup=False)
