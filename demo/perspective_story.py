"""The seed's story seen from three agents, at two moments (seed 000, 现象; docs/design.md "Sources").

While the story is ingested, perspectives are served at their moments, exactly as a main session would be fed:

- day 9, two hours after contract v3 went to legal: Wang's agent (serving Wang, focus Li), the sales agent
  (focus contract v3) and the customer-service agent serving customer 甲;
- day 12, when Wang says 给李总再出一版报价, his agent briefs the quote worker with what it remembers (CNY
  because the last quote failed on the exchange rate; monthly settlement; contract v3 is at legal): an explicit
  `used` recall of those facts;
- day 14 ("now"): the same three perspectives, Wang's agent now focused on Li and the quote.

Serving records the pushed recalls (each at once, as `noumena serve` does with NOUMENA_RECALL_FLUSH_SECONDS=0:
the story's clock jumps days between moments), so the second moment ranks what was used higher (the testing
effect).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from demo.story import START, TENANT, StoryClock, build_story
from domain.activation import Tier
from domain.perspective import Perspective
from domain.recalls import RecallMode
from infra.bootstrap import Noumena
from projections.perspectives import Perspectives

WANG_AGENT, SALES_AGENT, CS_AGENT = "agent:wang-assistant", "agent:sales", "agent:cs"
LI, WANG, JIA, YI = "person:li", "person:wang", "person:jia", "person:yi"
QUOTE, CONTRACT = "file:quotes/q3.xlsx", "file:contracts/li-v3.docx"

VIEWS: dict[str, dict[str, Any]] = {
    "wang": {"agent": WANG_AGENT, "serving": WANG, "focus": [LI]},
    "sales": {"agent": SALES_AGENT, "focus": [CONTRACT]},
    "cs-jia": {"agent": CS_AGENT, "serving": JIA},
}
"""The three viewpoints; at "now" Wang's agent also has the quote in focus (Wang just asked for a new one)."""

MOMENT_1 = ("day 9: contract v3 has gone to legal", START + timedelta(days=9, hours=2))
BRIEFING = START + timedelta(days=12, minutes=30)
MOMENT_2 = ("day 14: now", START + timedelta(days=14))
BRIEFED_WITH = [
    (QUOTE, "failed_because", "memory:quote-failed-fx"),
    (LI, "prefers", "memory:li-monthly-settlement"),
    (CONTRACT, "waiting_on", "ticket:legal/118"),
]
"""The facts Wang's agent used to brief the quote worker."""


@dataclass
class PerspectiveStory:
    app: Noumena
    clock: StoryClock
    perspectives: Perspectives
    served: dict[str, dict[str, Perspective]] = field(default_factory=dict)
    """moment title -> view name -> the perspective served then."""

    def close(self) -> None:
        self.app.close()


def _fact_id(app: Noumena, subject: str, relation: str, obj: str) -> str:
    for fact in app.application.views.current_facts(TENANT, subject):
        if (fact["relation"], fact["object"]) == (relation, obj):
            return str(fact["fact_id"])
    raise LookupError(f"the story has no current fact {subject} {relation} {obj}")


def serve_story(home: Path) -> PerspectiveStory:
    """Ingest the story, serving the perspectives and recording the briefing at their moments."""
    story: dict[str, PerspectiveStory] = {}

    def perspectives(app: Noumena, clock: StoryClock) -> PerspectiveStory:
        if "it" not in story:
            story["it"] = PerspectiveStory(app, clock, Perspectives(app.projection_source(), clock))
        return story["it"]

    def serve(it: PerspectiveStory, title: str, moment: datetime, focus_quote: bool) -> None:
        it.clock.now = moment.astimezone(UTC)
        served = it.served.setdefault(title, {})
        for name, view in VIEWS.items():
            focus = list(view.get("focus", []))
            if name == "wang" and focus_quote:
                focus.append(QUOTE)
            served[name] = seen = it.perspectives.perspective_for(TENANT, view["agent"], view.get("serving"), focus)
            shown = seen.fact_ids(Tier.FULL, Tier.GIST)
            if shown:
                it.app.application.facts.mark_used(TENANT, view["agent"], shown, seen.perspective_id,
                                                   mode=RecallMode.PUSHED)

    def brief(it: PerspectiveStory) -> None:
        it.clock.now = BRIEFING.astimezone(UTC)
        ids = [_fact_id(it.app, *triple) for triple in BRIEFED_WITH]
        it.app.application.facts.mark_used(TENANT, WANG_AGENT, ids, mode=RecallMode.USED)

    schedule: list[tuple[datetime, Callable[[PerspectiveStory], None]]] = [
        (MOMENT_1[1], lambda it: serve(it, MOMENT_1[0], MOMENT_1[1], focus_quote=False)),
        (BRIEFING, brief),
        (MOMENT_2[1], lambda it: serve(it, MOMENT_2[0], MOMENT_2[1], focus_quote=True)),
    ]

    def before_each(app: Noumena, clock: StoryClock, envelope: dict[str, Any]) -> None:
        it = perspectives(app, clock)
        when = datetime.fromisoformat(envelope["occurred_at"])
        while schedule and schedule[0][0] < when:
            schedule.pop(0)[1](it)

    app, clock = build_story(home, before_each=before_each)
    it = perspectives(app, clock)
    while schedule:
        schedule.pop(0)[1](it)
    return it


def print_perspectives(console: Any, home: Path) -> None:
    """Print what the three agents saw at both moments (the `noumena demo` section on perspectives)."""
    story = serve_story(home)
    try:
        for title, views in story.served.items():
            console.print(f"[bold]Perspectives, {title}[/]")
            for name, perspective in views.items():
                console.print(f"[dim]({name}: perspective {perspective.perspective_id}, "
                              f"{perspective.context_tokens} tokens, counts {perspective.counts})[/]", soft_wrap=True)
                console.print(perspective.context, markup=False, highlight=False, soft_wrap=True)
                console.print()
    finally:
        story.close()
