"""The projection commands of `noumena`: project, snapshot, export, sql, replay, rebuild. Thin: the work is in
projections/; these parse, call and print."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

console = Console()
errors = Console(stderr=True)


def _time(value: str) -> datetime:
    from api.cli_support import parse_time

    return parse_time(value)


@contextmanager
def _app() -> Iterator[Any]:
    from infra.bootstrap import bootstrap

    noumena = bootstrap()
    try:
        yield noumena
    finally:
        noumena.close()


@contextmanager
def _positions(label: str) -> Iterator[Callable[[int, int], None]]:
    """A progress bar over log positions."""
    with Progress(TextColumn(f"[bold]{label}[/]"), BarColumn(), MofNCompleteColumn(), TextColumn("positions"),
                  TimeElapsedColumn(), TimeRemainingColumn(), console=errors) as progress:
        task = progress.add_task(label, total=None)

        def update(done: int, total: int) -> None:
            progress.update(task, completed=done, total=total)

        yield update


def _fail(message: str) -> None:
    errors.print(f"[red]error:[/] {message}")
    raise typer.Exit(2)


def project() -> None:
    """Follow the event log into DuckDB and publish snapshots, until SIGTERM or Ctrl-C."""
    from projections.files import ProjectionFiles
    from projections.projector import ProjectionLocked
    from projections.runner import follow

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    with _app() as n:
        files = ProjectionFiles(n.settings.home)
        errors.print(f"projecting into {files.live}; snapshots at {files.snapshot}")
        try:
            follow(n.projection_source(), n.settings, stop)
        except ProjectionLocked as error:
            _fail(str(error))


def snapshot() -> None:
    """Publish a snapshot for analysts now (through the running projector if there is one)."""
    from projections.files import ProjectionFiles
    from projections.runner import publish_now

    with _app() as n:
        position = publish_now(n.projection_source(), n.settings)
        where = ProjectionFiles(n.settings.home).snapshot
    console.print(f"published {where}" + (f" at log position {position}" if position is not None
                                          else " (by the running projector)"))


def _ensure_snapshot() -> Path:
    from projections.files import ProjectionFiles
    from projections.runner import publish_now

    with _app() as n:
        files = ProjectionFiles(n.settings.home)
        if not files.snapshot.exists():
            publish_now(n.projection_source(), n.settings)
    return files.snapshot


def export(parquet: Annotated[Path, typer.Option("--parquet", help="Directory for one Parquet file per table.",
                                                 file_okay=False)]) -> None:
    """Write the history, version and current tables of the latest snapshot as Parquet files (registered: a
    later `noumena forget` rewrites them)."""
    from infra.settings import Settings
    from projections.export import export_parquet
    from projections.purge import register_export
    from projections.snapshot import open_snapshot

    con = open_snapshot(_ensure_snapshot())
    try:
        written = export_parquet(con, parquet)
    finally:
        con.close()
    register_export(Settings().home, parquet)  # a later forget rewrites this export too
    for path in written:
        console.print(str(path))


def sql(query: Annotated[str, typer.Argument(help="One SQL statement, e.g. \"SELECT * FROM facts_as_of(now())\".")],
        limit: Annotated[int, typer.Option(help="Rows to print at most.")] = 100) -> None:
    """Run read-only SQL on the latest snapshot and print the result as a table."""
    import duckdb

    from projections.query import run_sql

    try:
        frame = run_sql(_ensure_snapshot(), query)
    except duckdb.Error as error:
        _fail(str(error))
        return
    table = Table(show_lines=False)
    for name, dtype in frame.schema.items():
        table.add_column(f"{name}\n[dim]{dtype}[/]")
    for row in frame.head(limit).iter_rows():
        table.add_row(*(Text("" if v is None else str(v)) for v in row))  # data, never rich markup: `[forgotten]`
    console.print(table)
    console.print(f"{frame.height} rows" + (f" ({limit} shown)" if frame.height > limit else ""))


def replay(as_of: Annotated[str, typer.Option("--as-of", help="Transaction time T, ISO 8601 with a zone.")],
           out: Annotated[Path, typer.Option("--out", help="The DuckDB file to write.", dir_okay=False)]) -> None:
    """Replay the log from the start up to T into a new DuckDB file: the database as it stood at T."""
    from projections.replay import replay as replay_to

    moment = _time(as_of)
    with _app() as n, _positions("replaying") as progress:
        done = replay_to(n.projection_source(), out, moment, progress=progress)
    console.print(f"wrote {done.path}: {done.events} events, up to log position {done.position}"
                  f" (transaction time {done.clock.isoformat() if done.clock else 'none'})")


def rebuild() -> None:
    """Drop and rebuild the live projection from the whole log (bulk loads), then publish a snapshot."""
    from projections.files import ProjectionFiles
    from projections.projector import ProjectionLocked
    from projections.rebuild import rebuild as rebuild_all

    with _app() as n, _positions("rebuilding") as progress:
        try:
            done = rebuild_all(n.projection_source(), ProjectionFiles(n.settings.home), progress=progress)
        except ProjectionLocked as error:
            _fail(f"{error}; stop it first")
            return
    console.print(f"rebuilt {done.path}: {done.events} events, up to log position {done.position}")


def register(app: typer.Typer) -> None:
    """Add the projection commands to the `noumena` app."""
    for name, command in (("project", project), ("snapshot", snapshot), ("export", export), ("sql", sql),
                          ("replay", replay), ("rebuild", rebuild)):
        app.command(name)(command)
