"""`noumena demo`: the seed's story in a fresh temporary store, and what the log says was believed when."""

from __future__ import annotations

import tempfile
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console
from rich.table import Table

from api.story import MOMENTS, TENANT, story_envelopes
from consumers.ingest import Ingestor
from domain.commands import CreateTenant
from domain.facts import FactStatus
from domain.ontology import Ontology
from domain.sessions import LIVE_WORKER_STATUSES
from infra.bootstrap import Noumena, bootstrap
from infra.settings import Settings
from projections.believed import believed_at


class StoryClock:
    """Transaction time for the demo: each event is recorded at the story moment it happened."""

    def __init__(self) -> None:
        self.now = datetime(2026, 9, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


def build_story(home: Path) -> tuple[Noumena, StoryClock]:
    """Ingest the story into a store at `home`, one envelope at a time, each recorded at its story time."""
    clock = StoryClock()
    app = bootstrap(Settings(home=home, event_store="sqlite"), clock=clock)
    app.service.execute(CreateTenant(tenant=TENANT, display_name="Wang's export company"))
    ingestor = Ingestor(app.service)
    for envelope in story_envelopes():
        clock.now = datetime.fromisoformat(envelope["occurred_at"]).astimezone(UTC)
        result = ingestor.ingest([envelope])
        if result.rejected:
            raise RuntimeError(f"the story itself was rejected: {result.rejected[0].reason}")
    return app, clock


def _facts_table(title: str, state: Ontology) -> Table:
    table = Table(title=title, title_justify="left", show_lines=False)
    for column in ("subject", "relation", "object", "scope", "reason"):
        table.add_column(column)
    label = {ref: e.label for ref, e in state.entities.items()}
    for fact in sorted(state.facts.values(), key=lambda f: f.asserted_at):
        if fact.status is not FactStatus.CURRENT:
            continue
        table.add_row(label.get(fact.subject, fact.subject), fact.relation, label.get(fact.object, fact.object),
                      fact.scope, fact.reason or "")
    return table


def run_demo(console: Console) -> None:
    with tempfile.TemporaryDirectory(prefix="noumena-demo-") as home:
        app, _clock = build_story(Path(home))
        events = [logged.event for logged in app.log.read(0, 1_000_000)]
        console.print(f"[bold]noumena demo[/] - the seed's story, {len(events)} events in a fresh store at {home}\n")
        for title, moment in MOMENTS:
            state = believed_at(TENANT, events, moment.astimezone(UTC))
            ended = [f for f in state.facts.values() if f.status is FactStatus.INVALIDATED]
            console.print(_facts_table(f"What was believed {title} - {moment.isoformat()}", state))
            for fact in ended:
                console.print(f"  [dim]no longer believed: {fact.subject} {fact.relation} {fact.object}"
                              f" ({fact.ended_reason})[/]")
            live = [s for s in state.sessions.values() if s.status in LIVE_WORKER_STATUSES]
            for worker in live:
                console.print(f"  [cyan]worker {worker.session_id}[/] ({worker.status}): {worker.task}"
                              f" - {worker.last_summary or 'no report yet'}")
            console.print()
        app.close()
