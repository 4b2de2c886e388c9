"""`noumena demo`: the seed's story in a fresh temporary store, and what the log says was believed when."""

from __future__ import annotations

import tempfile
from datetime import UTC
from pathlib import Path

from rich.console import Console

from demo.story import MOMENTS, TENANT, build_story
from domain.facts import FactStatus
from domain.ontology import Ontology
from domain.sessions import LIVE_WORKER_STATUSES
from projections.ontology_as_of import believed_at


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
        events = app.events()
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
        from demo.perspective_story import print_perspectives

        print_perspectives(console, Path(home))
