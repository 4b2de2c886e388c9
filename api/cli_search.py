"""The search command of `noumena`: recall by content. Thin: parse, call the application, print."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

import typer
from rich.table import Table

from api.cli_support import application, console, errors

TenantOption = Annotated[str, typer.Option("--tenant", envvar="NOUMENA_TENANT",
                                           help="The tenant (organization); default: $NOUMENA_TENANT.")]


def search(
    query: Annotated[str, typer.Argument(help="What to look for, in words.")],
    tenant: TenantOption,
    agent: Annotated[str, typer.Option(help="Who is looking, e.g. agent:wang-assistant.")],
    serving: Annotated[str | None, typer.Option(help="The person the agent serves now.")] = None,
    session: Annotated[str | None, typer.Option(help="The agent's session (its facts answer first).")] = None,
    about: Annotated[list[str] | None, typer.Option(help="Only facts touching this entity (repeat).")] = None,
    k: Annotated[int, typer.Option(min=1, max=100, help="How many results.")] = 10,
    as_of: Annotated[datetime | None, typer.Option(help="Search what was believed then (ISO time with zone).")]
    = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Recall by content: the facts the agent may see that match QUERY, nearest tier first, with their scores."""
    from projections.perspectives import dumps
    from projections.searches import search_json

    with application() as memory:
        answer = memory.reading.search_for(tenant, agent, query, serving=serving, session_id=session, k=k, as_of=as_of,
                                           about=about or ())
    if as_json:
        print(dumps(search_json(answer)))
        return
    table = Table(title=f"{query!r}: answered by {answer.answered_by or 'nothing'} (semantic: {answer.semantic})")
    for column in ("#", "fact", "tier", "score", "lexical", "semantic", "activation", "recency", "from"):
        table.add_column(column)
    for item in answer.items:
        s = item.scores
        table.add_row(str(item.rank), item.text, item.tier.value, f"{item.score:.3f}", f"{s['lexical']:.3f}",
                      f"{s['semantic']:.3f}", f"{s['activation']:.3f}", f"{s['recency']:.3f}",
                      " ".join(filter(None, [item.session_id or "", ",".join(item.message_ids)])))
    console.print(table)
    errors.print(f"[dim]search {answer.search_id} · noumena explain {answer.search_id}[/]")


def explain_search(search_id: str, as_json: bool) -> None:
    """`noumena explain srch-...`: the evidence of a served search."""
    with application() as memory:
        served = memory.reading.explain_search(None, search_id)  # an operator's look at the data directory: any tenant
    if as_json:
        print(served.model_dump_json(indent=2))
        return
    console.print(f"search {served.search_id} · {served.tenant} · {served.agent}"
                  + (f" serving {served.serving}" if served.serving else "") + f" · at {served.served_at}"
                  + f" · log position {served.log_position}")
    console.print(f"query: {served.query!r} · answered by {served.answered_by} · semantic {served.semantic}"
                  + (f" ({served.embedder})" if served.embedder else ""))
    for item in served.items:
        name = f"#{item.fact_id[:8]}" if item.fact_id else f"turn {item.session_id}/{item.message_id}"
        console.print(f"{item.rank:>3}. {item.text} [{name}] score {item.score:.3f} {item.scores}")
    if served.recall_position is not None:
        console.print(f"recorded as looked_up at log position {served.recall_position}")
    elif served.recall_held:
        console.print("recorded as looked_up, held for the next coalesced flush")


def register(app: typer.Typer) -> None:
    app.command()(search)
