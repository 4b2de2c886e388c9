"""What every `noumena` command shares: the application of this process, its errors as messages, times."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Annotated

import typer
from rich.console import Console

from domain.application.application import Application
from domain.errors import NoumenaError

console = Console()
errors = Console(stderr=True)
Tenant = Annotated[str, typer.Option("--tenant", envvar="NOUMENA_TENANT", help="The tenant (organization).")]


@contextmanager
def application() -> Iterator[Application]:
    """The application, built from the environment's settings (infra/bootstrap.py) and closed after the
    command; a domain error becomes a message and exit code 2, never a traceback."""
    from infra.bootstrap import bootstrap

    noumena = bootstrap()
    try:
        yield noumena.application
    except NoumenaError as error:
        errors.print(f"[red]error:[/] {error}")
        raise typer.Exit(2) from None
    finally:
        noumena.close()


def fail(message: str, code: int = 2) -> None:
    errors.print(f"[red]error:[/] {message}")
    raise typer.Exit(code)


def parse_time(value: str) -> datetime:
    """An ISO 8601 time with a zone (`2026-09-10T10:00:00+08:00`, `...Z`)."""
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise typer.BadParameter(f"{value!r} is not an ISO 8601 time") from None
    if moment.tzinfo is None:
        raise typer.BadParameter(f"{value!r} has no time zone; add one, e.g. +00:00")
    return moment
