"""`noumena demo`: the seed's story in a fresh temporary store, and what the log says was believed when."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console

from api.story import MOMENTS, TENANT, story_envelopes
from domain.facts import FactStatus
from domain.ontology import Ontology
from domain.sessions import LIVE_WORKER_STATUSES
from infra.bootstrap import Noumena, bootstrap
from infra.settings import Settings
from projections.ontology_as_of import believed_at


class StoryClock:
    """Transaction time for the demo: each event is recorded at the story moment it happened."""

    def __init__(self) -> None:
        self.now = datetime(2026, 9, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


def build_story(home: Path, before_each: Callable[[Noumena, StoryClock, dict[str, Any]], None] | None = None
                ) -> tuple[Noumena, StoryClock]:
    """Ingest the story into a store at `home`, one envelope at a time, each recorded at its story time.

    `before_each(app, clock, envelope)` runs before each envelope is ingested (the perspective story uses it to
    serve perspectives and record recalls at their moments between envelopes)."""
    clock = StoryClock()
    app = bootstrap(Settings(home=home, event_store="sqlite"), clock=clock)
    app.application.create_tenant(TENANT, "Wang's export company")
    ingestor = app.application.ingestor
    for envelope in story_envelopes():
        if before_each is not None:
            before_each(app, clock, envelope)
        clock.now = datetime.fromisoformat(envelope["occurred_at"]).astimezone(UTC)
        result = ingestor.ingest([envelope])
        if result.rejected:
            raise RuntimeError(f"the story itself was rejected: {result.rejected[0].reason}")
        if envelope["type"] == "session.compacted":
            app.on_stored.drain(60)  # consolidation runs in the background; the story waits for its "sleep"
    return app, clock


def _line(state: Ontology, fact_id: str) -> str:
    fact = state.facts[fact_id]
    label = {ref: e.label for ref, e in state.entities.items()}
    scope = "" if fact.scope == "org" else f" [{fact.scope}]"
    reason = f" - {fact.reason}" if fact.reason else ""
    return f"{label.get(fact.subject, fact.subject)} -{fact.relation}-> {label.get(fact.object, fact.object)}" \
        f"{scope}{reason}"


def run_demo(console: Console) -> None:
    with tempfile.TemporaryDirectory(prefix="noumena-demo-") as home:
        app, _clock = build_story(Path(home))
        events = [logged.event for logged in app.log.read(0, 1_000_000)]
        console.print(f"[bold]noumena demo[/] - the seed's story, {len(events)} events in a fresh store at {home}\n")
        previous: set[str] = set()
        for title, moment in MOMENTS:
            state = believed_at(TENANT, events, moment.astimezone(UTC))
            current = {f.fact_id for f in state.facts.values() if f.status is FactStatus.CURRENT}
            console.print(f"[bold]What the log says was believed {title}[/] ({moment.isoformat()}): "
                          f"{len(current)} current facts")
            for fact_id in sorted(current - previous, key=lambda i: state.facts[i].asserted_at):
                console.print(f"  [green]+[/] {_line(state, fact_id)}")
            for fact_id in sorted(previous - current):
                fact = state.facts[fact_id]
                console.print(f"  [red]-[/] no longer believed: {_line(state, fact_id)} ({fact.ended_reason})")
            live = [s for s in state.sessions.values() if s.status in LIVE_WORKER_STATUSES]
            for worker in live:
                console.print(f"  [cyan]worker {worker.session_id}[/] ({worker.status}): {worker.task}"
                              f" - {worker.last_summary or 'no report yet'}")
            console.print()
            previous = current
        app.close()
    with tempfile.TemporaryDirectory(prefix="noumena-demo-perspectives-") as home:
        from api.perspective_story import print_perspectives

        print_perspectives(console, Path(home))
