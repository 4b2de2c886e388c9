"""The `noumena` command. Thin: parse arguments, call the application, print the result."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

from api.cli_support import application, console, errors
from api.process_tuning import one_thread_per_numeric_call, tune_collector_for_a_long_lived_heap
from domain.errors import NoumenaError

app = typer.Typer(help="noumena: event-sourced memory for AI agents.", no_args_is_help=True,
                  pretty_exceptions_enable=False)
tenant_app = typer.Typer(help="Manage tenants (organizations).", no_args_is_help=True)
app.add_typer(tenant_app, name="tenant")


@app.command()
def demo() -> None:
    """Build the seed's story in a fresh temporary store and show what was believed when."""
    from demo.run import run_demo

    run_demo(console)


@app.command()
def schema() -> None:
    """Print the JSON Schema of the wire envelope (for producers in any language)."""
    from domain.application.wire import json_schema

    print(json.dumps(json_schema(), indent=2, ensure_ascii=False))


@tenant_app.command("create")
def tenant_create(name: str, display_name: Annotated[str, typer.Option(help="A human name.")] = "") -> None:
    """Create a tenant: one organization, one ontology."""
    with application() as memory:
        memory.tenants.create_tenant(name, display_name)
    console.print(f"created tenant [bold]{name}[/]")


@app.command("import")
def import_(file: Annotated[Path, typer.Argument(exists=True, dir_okay=False, readable=True)]) -> None:
    """Ingest a JSON-lines file of envelopes; rejected lines go to FILE.rejects.jsonl with their reasons."""
    from consumers.file_import import import_file
    from infra.settings import Settings

    with application() as memory, Progress(
        TextColumn("[bold]importing[/] {task.description}"), BarColumn(), DownloadColumn(),
        TransferSpeedColumn(), TimeRemainingColumn(), console=errors, transient=False,
    ) as progress:
        task = progress.add_task(file.name, total=file.stat().st_size)
        report = import_file(file, memory.ingestor, lambda done: progress.advance(task, done),
                             home=Settings().home)
    for line in report.first_rejections:
        errors.print(f"[yellow]rejected[/] {line}")
    console.print(
        f"lines read: {report.lines_read} = accepted: {report.accepted} (of which repeats: {report.duplicates})"
        f" + rejected: {report.rejected}" + (f"; blank lines skipped: {report.blank_lines}" if report.blank_lines
                                             else "")
    )
    if report.rejects_path:
        console.print(f"rejected lines, with reasons: {report.rejects_path}")
    if report.last_position is not None:
        console.print(f"log position: {report.last_position}")
    if report.rejected:
        raise typer.Exit(1)


from api.cli_projections import register as _register_projection_commands  # noqa: E402

_register_projection_commands(app)

from api.cli_serve import register as _register_serving_commands  # noqa: E402

_register_serving_commands(app)

from api.kafka_cli import register as _register_kafka_commands  # noqa: E402

_register_kafka_commands(app)

from api.cli_perspectives import register as _register_perspective_commands  # noqa: E402

_register_perspective_commands(app)

from api.cli_memory import register as _register_memory_commands  # noqa: E402

_register_memory_commands(app)

from api.cli_context import register as _register_context_commands  # noqa: E402

_register_context_commands(app)

from api.cli_search import register as _register_search_commands  # noqa: E402

_register_search_commands(app)


def main() -> None:
    """Console entry point: domain errors become a message and exit code 2, never a traceback."""
    tune_collector_for_a_long_lived_heap()
    one_thread_per_numeric_call()  # (numpy is not imported yet: the commands import what they use)
    try:
        app()
    except NoumenaError as error:
        errors.print(f"[red]error:[/] {error}")
        sys.exit(2)
