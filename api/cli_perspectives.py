"""The perspective commands of `noumena`: perspective, used, explain. Thin: parse, call the application, print."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from api.cli_support import application, console, errors, parse_time

TenantOption = Annotated[str, typer.Option("--tenant", envvar="NOUMENA_TENANT",
                                           help="The tenant (organization); default: $NOUMENA_TENANT.")]


def perspective(
    tenant: TenantOption,
    agent: Annotated[str, typer.Option(help="The agent whose perspective it is (a ref, e.g. agent:sales).")],
    serving: Annotated[str | None, typer.Option(help="The person the agent is serving now.")] = None,
    focus: Annotated[list[str] | None, typer.Option(help="A thing in focus now (repeatable).")] = None,
    as_of: Annotated[str | None, typer.Option("--as-of", help="What was believed at this ISO time.")] = None,
    deeper: Annotated[bool, typer.Option(help="Think deeper: one more hop, a lower threshold.")] = False,
    budget: Annotated[int, typer.Option(help="Token budget of the context block.")] = 1200,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of the context block.")] = False,
) -> None:
    """What an agent sees: ranked facts in five clarity tiers, within a token budget; records the recall."""
    from projections.perspectives import dumps, perspective_json

    moment = parse_time(as_of) if as_of else None
    with application() as memory:
        result = memory.reading.perspective(tenant, agent, serving, focus or [], as_of=moment, budget_tokens=budget,
                                            deeper=deeper)
    if as_json:
        print(dumps(perspective_json(result)))
        return
    print(result.context)
    errors.print(f"[dim]perspective {result.perspective_id} · {result.context_tokens} tokens · {result.counts}"
                 f" · noumena explain {result.perspective_id}[/]")


def used(
    tenant: TenantOption,
    agent: Annotated[str, typer.Option(help="The agent that used the facts.")],
    fact_ids: Annotated[list[str], typer.Argument(help="The fact ids used.")],
    perspective_id: Annotated[str | None, typer.Option(help="The perspective they came from.")] = None,
) -> None:
    """Record that an agent used facts (a recall of mode `used`): later perspectives rank them higher."""
    with application() as memory:
        written = memory.facts.mark_used(tenant, agent, fact_ids, perspective_id)
    console.print(f"recorded: {agent} used {len(fact_ids)} facts (log position {written.position})")


def explain(
    perspective_id: Annotated[str, typer.Argument(help="The id printed when the perspective was served.")],
    reproduce: Annotated[bool, typer.Option(help="Recompute it from the log and compare.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the whole evidence as JSON.")] = False,
) -> None:
    """Show a served perspective's (or context's, `ctx-...`, or search's, `srch-...`) inputs, parameters and
    outputs; optionally reproduce it from the log."""
    if perspective_id.startswith("srch-"):
        from api.cli_search import explain_search

        explain_search(perspective_id, as_json)
        return
    if perspective_id.startswith("ctx-"):
        from api.cli_context import explain_context

        explain_context(perspective_id, reproduce, as_json)
        return
    with application() as memory:
        served = memory.reading.explain(None, perspective_id)  # an operator's look at the data directory: any tenant
        again = memory.reading.reproduce(perspective_id) if reproduce else None
    if as_json:
        print(served.model_dump_json(indent=2))
    else:
        _print_evidence(served)
    if again is not None:
        same = [(i.fact_id, i.tier) for i in again.items] == [(i.fact_id, i.tier) for i in served.items]
        console.print("reproduced: " + ("[green]identical items and tiers[/]" if same else "[red]DIFFERENT[/]"))
        if not same:
            raise typer.Exit(1)


def _print_evidence(p: Any) -> None:
    console.print(f"[bold]perspective {p.perspective_id}[/]")
    console.print(f"tenant {p.tenant} · agent {p.agent} · serving {p.serving or '-'} · focus {p.focus or '-'}")
    console.print(f"served at {p.served_at.isoformat()} · as of {p.as_of.isoformat() if p.as_of else 'now'}"
                  f" · deeper {p.deeper} · log position {p.log_position} · budget {p.budget_tokens}")
    console.print("parameters: " + ", ".join(f"{k}={v}" for k, v in p.parameters.model_dump().items()),
                  markup=False)
    if p.recall:
        where = "held for the next coalesced flush" if p.recall.held else f"at log position {p.recall.position}"
        console.print(f"recorded recall: {p.recall.mode} of {len(p.recall.fact_ids)} facts, {where}")
    console.print(f"counts: {p.counts}", markup=False)
    for item in p.items:
        console.print(f"  {item.tier.value:6} A={item.activation:+.3f} B={item.base_level:+.3f} x={item.spread:.4f}"
                      f" hops={item.hops} {item.fact_id} {item.subject} -{item.relation}-> {item.object}"
                      f" [{item.scope}] via {' > '.join(item.path)}", markup=False, highlight=False, soft_wrap=True)
        if item.salience:
            console.print(f"         why: {item.salience}", markup=False, highlight=False, soft_wrap=True)
    for group in p.count_groups:
        console.print(f"  count  {group.count} about {group.about}: {', '.join(group.fact_ids)}", markup=False)
    for faded in p.faded:
        console.print(f"  forgotten A={faded.activation:+.3f} B={faded.base_level:+.3f} hops={faded.hops}"
                      f" {faded.fact_id} {faded.subject_label} -{faded.relation}-> {faded.object_label}"
                      f" [{faded.scope}]\n         why: {faded.salience}", markup=False, highlight=False,
                      soft_wrap=True)
    console.print("context:")
    for line in p.lines:
        ids = f"   <- {', '.join(line.fact_ids)}" if line.fact_ids else ""
        print(f"  | {line.text}{ids}")


def register(app: typer.Typer) -> None:
    app.command()(perspective)
    app.command()(used)
    app.command()(explain)
