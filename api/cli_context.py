"""The context command of `noumena`: the budgeted block for a main session. Thin: parse, call the application."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from api.cli_support import application, console, errors

TenantOption = Annotated[str, typer.Option("--tenant", envvar="NOUMENA_TENANT",
                                           help="The tenant (organization); default: $NOUMENA_TENANT.")]


def context(
    tenant: TenantOption,
    session_id: Annotated[str, typer.Argument(help="The main session the block is for.")],
    message: Annotated[str | None, typer.Option(help="The request being answered: what it names is in focus.")]
    = None,
    budget: Annotated[int | None, typer.Option(help="Token budget of the whole block (default 3000).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON (blocks with their ids) instead.")] = False,
) -> None:
    """The context block for a main session: hard constraints, perspective, workers, summary, recent turns."""
    from projections.contexts import context_json
    from projections.perspectives import dumps

    with application() as memory:
        result = memory.reading.context(tenant, session_id, message, budget)
    if as_json:
        print(dumps(context_json(result)))
        return
    print(result.text)
    errors.print(f"[dim]context {result.context_id} · {result.tokens}/{result.budget_tokens} tokens · "
                 f"{len(result.omitted)} cut · noumena explain {result.context_id}[/]")


def explain_context(context_id: str, reproduce: bool, as_json: bool) -> None:
    """`noumena explain ctx-...`: the evidence of a served context, optionally assembled again from the log."""
    with application() as memory:
        # an operator's look at the data directory: any tenant
        served = memory.reading.explain_context(None, context_id)
        again = memory.reading.reproduce_context(context_id) if reproduce else None
    if as_json:
        print(served.model_dump_json(indent=2))
    else:
        _print_evidence(served)
    if again is not None:
        same = again.text == served.text and again.blocks == served.blocks
        console.print("reproduced: " + ("[green]identical block[/]" if same else "[red]DIFFERENT[/]"))
        if not same:
            raise typer.Exit(1)


def _print_evidence(c: Any) -> None:
    out = console.print
    out(f"[bold]context {c.context_id}[/]")
    out(f"tenant {c.tenant} · session {c.session_id} · agent {c.agent} · serving {c.serving or '-'}", markup=False)
    out(f"message: {c.message!r}", markup=False)
    out(f"served at {c.served_at.isoformat()} · session read at stream version {c.ontology_version} · "
        f"budget {c.budget_tokens} · used {c.tokens}", markup=False)
    if c.perspective is not None:
        out(f"perspective {c.perspective.perspective_id} at log position {c.perspective.log_position}, "
            f"budget {c.perspective.budget_tokens}, counts {c.perspective.counts}", markup=False)
    out("parameters: " + ", ".join(f"{k}={v}" for k, v in c.parameters.model_dump().items()), markup=False,
        soft_wrap=True)
    out("focus: " + (", ".join(f"{f.ref} ({f.found_in})" for f in c.focus) or "-"), markup=False)
    if c.ambiguous:
        out("ambiguous names: " + "; ".join(c.ambiguous), markup=False)
    if c.recall:
        out(f"recorded recall: {c.recall.mode} of {len(c.recall.fact_ids)} facts, "
            + ("held for the next coalesced flush" if c.recall.held else f"at log position {c.recall.position}"),
            markup=False)
    for block in c.blocks:
        out(f"[bold]{block.role.value}[/] {block.tokens}/{block.budget_tokens} tokens")
        for line in block.lines:
            ids = line.fact_ids + line.message_ids + line.summary_ids + line.session_ids
            print(f"  | {line.text}" + (f"   <- {', '.join(ids)}" if ids else ""))
    for omission in c.omitted:
        out(f"  cut ({omission.stage}) {omission.role.value}/{omission.kind}: {omission.text[:80]}"
            f" <- {', '.join(omission.ids) or '-'}", markup=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command()(context)
