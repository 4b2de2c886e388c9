"""Recalls: an agent used facts. Each recall is a use that strengthens those facts for that agent only."""

from __future__ import annotations

from datetime import datetime, timedelta
from enum import StrEnum

from pydantic import AwareDatetime, BaseModel, ConfigDict

from domain.events import DomainEvent


class RecallMode(StrEnum):
    PUSHED = "pushed"
    """Shown at full or gist clarity in a served perspective."""
    DEEPENED = "deepened"
    """Surfaced by a deeper look (one more hop, a lower threshold)."""
    USED = "used"
    """The agent said it used the fact."""
    LOOKED_UP = "looked_up"
    """The agent went looking for it (a tier-aware recall)."""


class FactsRecalled(DomainEvent):
    topic = "facts.recalled"

    agent: str
    fact_ids: tuple[str, ...]
    mode: RecallMode
    perspective_id: str | None = None


COALESCE_SECONDS = 3_600
"""Served reads record at most one use per agent, fact and this many seconds (UTC hours: a use's bucket is
`floor(epoch / 3600)`). The activation model counts a use younger than an hour as an hour old
(`ActivationParameters.minimum_age_seconds`), so more uses within one hour change a base level only by their
number, never by their age; docs/perspectives.md, "Recalls, coalesced", says how much that is."""


def hour_bucket(epoch_seconds: float) -> int:
    """The coalescing bucket of a use at `epoch_seconds`: the UTC hour it falls in."""
    return int(epoch_seconds // COALESCE_SECONDS)


class AgentUses(BaseModel):
    """The uses of one agent in a coalesced recall: fact `fact_ids[i]` was first used, in its hour, at
    `since + seconds[i]` (the event's `since`), by a read of mode `mode`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    agent: str
    mode: RecallMode
    fact_ids: tuple[str, ...]
    seconds: tuple[int, ...]


class RecallsCoalesced(DomainEvent):
    """Many served reads' recalls in one event: at most one use per agent, fact and hour (domain/recalls.py
    `COALESCE_SECONDS`), each at the moment of its first use in that hour. Written by the application's recall
    buffer (domain/application/recall_buffer.py) once per flush, per tenant."""

    topic = "recalls.coalesced"

    since: AwareDatetime
    """The earliest use in the event (whole seconds); each use is at `since + seconds`."""
    uses: tuple[AgentUses, ...]

    def used(self) -> list[tuple[str, RecallMode, str, datetime]]:
        """(agent, mode, fact id, used at) for every use in the event."""
        return [(group.agent, group.mode, fact_id, self.since + timedelta(seconds=offset))
                for group in self.uses for fact_id, offset in zip(group.fact_ids, group.seconds, strict=True)]
