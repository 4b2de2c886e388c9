"""CLI commands for Kafka ingestion: `noumena consume`, `noumena dlq list|replay|discard`,
`noumena kafka create-topics`. Thin: parse, call, print."""

from __future__ import annotations

import faulthandler
import json
import logging
import signal
import threading
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

console = Console()
errors = Console(stderr=True)
dlq_app = typer.Typer(help="Inspect and replay dead letters (inputs that could not be stored).",
                      no_args_is_help=True)
kafka_app = typer.Typer(help="Kafka administration for noumena's topics.", no_args_is_help=True)


def _settings(**overrides: Any) -> Any:
    from infra.settings import Settings

    settings = Settings()
    return settings.model_copy(update={k: v for k, v in overrides.items() if v is not None})


def consume(
    topic: Annotated[str | None, typer.Option(help="Source topic (default: NOUMENA_KAFKA_TOPIC).")] = None,
    group: Annotated[str | None, typer.Option(help="Consumer group (default: NOUMENA_KAFKA_GROUP).")] = None,
    batch_size: Annotated[int | None, typer.Option(min=1, help="Most messages per poll and write.")] = None,
    metrics_port: Annotated[int | None, typer.Option(help="Serve Prometheus metrics on this port.")] = None,
    until_idle: Annotated[bool, typer.Option(help="Exit once every assigned partition is stored.")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Consume session events from Kafka into the event log, exactly once; bad input goes to the DLQ."""
    from consumers.kafka_consumer import SessionEventConsumer
    from consumers.metrics import serve_metrics
    from infra.bootstrap import bootstrap

    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = _settings(kafka_topic=topic, kafka_group=group, kafka_batch_size=batch_size)
    stop = threading.Event()
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # `kill -USR1 <pid>`: every thread's stack, stderr
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    from domain.errors import InfrastructureError

    noumena = bootstrap(settings)
    try:
        try:
            consumer = SessionEventConsumer(noumena.consumer_ports())
        except InfrastructureError as error:
            errors.print(f"[red]cannot consume[/]: {error}", soft_wrap=True)
            raise typer.Exit(2) from None
        server = serve_metrics(metrics_port) if metrics_port else None
        errors.print(f"consuming [bold]{settings.kafka_topic}[/] as group [bold]{settings.kafka_group}[/]"
                     f" from {settings.kafka_bootstrap}; dead letters to {settings.kafka_dlq_topic}"
                     + (f"; metrics on :{metrics_port}/metrics" if metrics_port else ""))
        try:
            # A poll that hangs this long (a client bug, never seen after the fix in SessionEventConsumer's
            # constructor) ends the process for its supervisor to restart: always safe, the log has the position.
            stall = max(120.0, 3 * settings.kafka_session_timeout_ms / 1000)
            consumer.run(stop, until_idle=until_idle, exit_if_poll_stalls_s=stall)
        finally:
            consumer.close()
            if server is not None:
                server.shutdown()
        m = consumer.metrics
        errors.print(f"consumed {m.total('consumed')}: stored {m.total('stored_messages')} "
                     f"(repeats {m.total('repeats')}, after parking {m.total('unparked')}), dead-lettered "
                     f"{m.total('dead_lettered')} (truncated {m.total('dead_letters_truncated')}), parked "
                     f"{m.total('parked')}, skipped {m.total('skipped')}")
    finally:
        noumena.close()


@dlq_app.command("list")
def dlq_list(
    all_: Annotated[bool, typer.Option("--all", help="Include dead letters already replayed.")] = False,
    limit: Annotated[int, typer.Option(min=1)] = 100,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per line.")] = False,
) -> None:
    """Show dead letters, one per input (source topic/partition/offset), with their reasons."""
    from consumers.dead_letters.records import header
    from consumers.dead_letters.replay import dead_letters
    from infra.bootstrap import bootstrap

    noumena = bootstrap(_settings())
    try:
        foreign: list[tuple[int, int]] = []
        views = dead_letters(noumena.consumer_ports(), include_replayed=all_, foreign=foreign)
    finally:
        noumena.close()
    for partition, offset in foreign:
        errors.print(f"[yellow]not a noumena dead letter[/] (no noumena.dlq headers): DLQ record {partition}@{offset}")
    if as_json:
        for v in views[:limit]:
            d = v.letter.letter
            print(json.dumps({"source_topic": d.source.topic, "source_partition": d.source.partition,
                              "source_offset": d.source.offset, "reason": d.reason, "field": d.field,
                              "attempt": d.attempt, "dead_lettered_at": d.dead_lettered_at.isoformat(),
                              "id": v.id, "pending": v.pending, "forgotten": v.forgotten,
                              "discarded": v.discarded, "truncated": header(d, "truncated") is not None,
                              "original_size": header(d, "original.size"),
                              "original_sha256": header(d, "original.sha256"),
                              "dlq_partition": v.letter.dlq_partition,
                              "dlq_offset": v.letter.dlq_offset,
                              "value": None if d.value is None else d.value.decode("utf-8", "replace")},
                             ensure_ascii=False))
        return
    table = Table(title=f"dead letters ({len(views)}{' incl. replayed and discarded' if all_ else ' pending'})")
    for column in ("source", "reason", "field", "attempt", "dead-lettered at", "status", "value"):
        table.add_column(column, overflow="fold")
    for v in views[:limit]:
        d = v.letter.letter
        preview = "[forgotten]" if v.forgotten else "∅" if d.value is None else d.value[:80].decode("utf-8", "replace")
        if header(d, "truncated"):
            preview = f"[truncated: {header(d, 'original.size')} bytes, sha256 {header(d, 'original.sha256')}] " \
                + preview
        table.add_row(v.id, d.reason, d.field or "", str(d.attempt),
                      d.dead_lettered_at.strftime("%Y-%m-%d %H:%M:%S"), v.status, preview)
    console.print(table)
    if len(views) > limit:
        console.print(f"... and {len(views) - limit} more (--limit)")


@dlq_app.command("replay")
def dlq_replay() -> None:
    """Re-submit pending dead letters (after a fix), oldest original timestamp first across partitions, again and
    again while a pass stores something; those that still fail stay in the DLQ and are listed, as is every dead
    letter that cannot be opened. Exits 1 if any still fail or could not be opened."""
    from consumers.dead_letters.replay import replay
    from infra.bootstrap import bootstrap

    noumena = bootstrap(_settings())
    try:
        ports = noumena.consumer_ports()
        report = replay(ports, on_stored=ports.on_stored)  # a replayed compaction starts consolidation
    finally:
        noumena.close()
    for line in report.unopened:
        errors.print(f"[yellow]not opened[/] {line}", soft_wrap=True)
    for reason in report.reasons:
        errors.print(f"[yellow]still failing[/] {reason}", soft_wrap=True)
    console.print(f"replayed {report.replayed}: stored {report.stored}, still failing {report.still_failing}, "
                  f"not opened {len(report.unopened)} ({report.passes} pass{'es' if report.passes != 1 else ''})")
    if report.still_failing or report.unopened:
        raise typer.Exit(1)


@dlq_app.command("discard")
def dlq_discard(
    ids: Annotated[list[str], typer.Argument(help="Dead letters by id (topic/partition@offset, as `dlq list`).")],
    reason: Annotated[str, typer.Option("--reason", help="Why it is given up (kept with it).")],
) -> None:
    """Give up dead letters that can never succeed: each stays on the topic, shown by `dlq list --all` with the
    reason, and is never replayed."""
    from consumers.dead_letters.replay import discard
    from infra.bootstrap import bootstrap

    noumena = bootstrap(_settings())
    try:
        done = discard(noumena.consumer_ports(), ids, reason)
    except ValueError as error:
        errors.print(f"[red]nothing discarded[/]: {error}")
        raise typer.Exit(2) from None
    finally:
        noumena.close()
    for id_ in done:
        console.print(f"discarded {id_}: {reason}")


@kafka_app.command("create-topics")
def create_topics(
    partitions: Annotated[int, typer.Option(min=1, help="Partitions of the session-events topic.")] = 6,
    dlq_partitions: Annotated[int, typer.Option(min=1, help="Partitions of the DLQ and park topics.")] = 2,
    replication: Annotated[int, typer.Option(min=1, help="Replication factor of all three.")] = 1,
) -> None:
    """Create the session-events, dead-letter and park topics (the consumer never creates topics)."""
    from consumers.kafka_admin import ensure_topic
    from consumers.kafka_config import connection_options

    settings = _settings()
    options = connection_options(settings)
    for topic, count in ((settings.kafka_topic, partitions), (settings.kafka_dlq_topic, dlq_partitions),
                         (settings.park_topic(), dlq_partitions)):
        created = ensure_topic(options, topic, count, replication)
        console.print(f"{topic}: {'created' if created else 'exists'}")


def register(app: typer.Typer) -> None:
    """Add the Kafka commands to the `noumena` app."""
    app.command("consume")(consume)
    app.add_typer(dlq_app, name="dlq")
    app.add_typer(kafka_app, name="kafka")
