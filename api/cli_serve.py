"""The serving commands of `noumena`: serve (HTTP API + projector [+ Kafka]), keys, mcp. Thin: parse, call, print."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

console = Console()
errors = Console(stderr=True)
keys_app = typer.Typer(help="API keys: each names one tenant; only their hashes are stored.", no_args_is_help=True)


def _fail(message: str) -> None:
    errors.print(f"[red]error:[/] {message}")
    raise typer.Exit(2)


def serve(
    host: Annotated[str | None, typer.Option(help="Interface to listen on (default NOUMENA_API_HOST).")] = None,
    port: Annotated[int | None, typer.Option(help="Port (default NOUMENA_API_PORT; 0: any free port).")] = None,
) -> None:
    """Run the HTTP API with the projector in this process, and the Kafka consumer when NOUMENA_KAFKA_BOOTSTRAP
    is set. Outside development, refuses to start without NOUMENA_ADMIN_KEY."""
    import uvicorn

    from api.app import create_app
    from infra.bootstrap import bootstrap
    from infra.settings import Settings

    settings = Settings()
    unsafe = settings.unsafe_for_serving()
    if unsafe:
        _fail(unsafe)
    if not settings.admin_key.get_secret_value():
        errors.print("[yellow]warning:[/] no NOUMENA_ADMIN_KEY: the /v1/admin routes refuse every request"
                     " (development mode); create keys with `noumena keys create --tenant T`")
    from infra.bootstrap import embedder

    embedder(settings)  # a broken embedder setting is refused now, naming the setting, not at the first search
    noumena = bootstrap(settings)
    try:
        uvicorn.run(create_app(noumena), host=host or settings.api_host,
                    port=settings.api_port if port is None else port, log_level="warning", access_log=False)
    finally:
        noumena.close()


@keys_app.command("create")
def keys_create(
    tenant: Annotated[str, typer.Option("--tenant", help="The tenant the key works in.")],
    label: Annotated[str, typer.Option(help="What the key is for.")] = "",
    agent: Annotated[list[str] | None, typer.Option("--agent", help="An agent the key acts as (repeat); it then"
                                                     " serves only persons those agents serve. None: a"
                                                     " tenant-wide key, for services.")] = None,
) -> None:
    """Issue an API key for an existing tenant and print it (the only time it is shown)."""
    from domain.values import REF_PATTERN

    for name in agent or []:
        if not (name.startswith("agent:") and REF_PATTERN.fullmatch(name)):
            _fail(f"--agent {name!r} is not an agent ref (agent:<id>)")
    from infra.bootstrap import api_keys, bootstrap

    noumena = bootstrap()
    try:
        if not noumena.application.tenants.tenant_exists(tenant):
            _fail(f"tenant {tenant!r} does not exist: `noumena tenant create {tenant}` first")
        issued = api_keys(noumena.settings).create(tenant, label, tuple(agent or ()))
    finally:
        noumena.close()
    errors.print(f"key {issued.record.key_id} for tenant [bold]{tenant}[/] (shown once; only its hash is stored):")
    print(issued.key)


@keys_app.command("list")
def keys_list(tenant: Annotated[str | None, typer.Option("--tenant", help="Only this tenant's keys.")] = None
              ) -> None:
    """The keys issued: ids, tenants, labels (never the keys)."""
    from infra.bootstrap import api_keys
    from infra.settings import Settings

    table = Table("key id", "tenant", "label", "created", "acts as")
    for record in api_keys(Settings()).list(tenant):
        table.add_row(record.key_id, record.tenant, record.label, record.created_at,
                      ", ".join(record.agents) or "the whole tenant")
    console.print(table)


@keys_app.command("revoke")
def keys_revoke(key_id: str) -> None:
    """Revoke a key: a running server refuses it from its next request."""
    from domain.errors import UnknownApiKey
    from infra.bootstrap import api_keys
    from infra.settings import Settings

    try:
        record = api_keys(Settings()).revoke(key_id)
    except UnknownApiKey as error:
        _fail(str(error))
        return
    console.print(f"revoked {record.key_id} ({record.tenant})")


def mcp(
    key: Annotated[str, typer.Option("--key", envvar="NOUMENA_API_KEY", help="A tenant's API key: the tenant"
                                     " every tool works in.")],
) -> None:
    """Run the MCP server over stdio (tools: perspective, deepen, remember, correct, recall, forget)."""
    from api.mcp_server import run_stdio

    run_stdio(key)


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)
    app.command("mcp")(mcp)
    app.add_typer(keys_app, name="keys")
