"""A tiny organization written as log records (position, topic, payload), for the perspective index tests."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from domain.ontology import fact_id_for
from projections.perspective_index import PerspectiveIndex, fold

START = datetime(2026, 1, 1, tzinfo=UTC)


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None


class Org:
    """Records for one tenant, as the projector would read them from the log."""

    def __init__(self, tenant: str = "acme", start: datetime = START) -> None:
        self.tenant = tenant
        self.now = start
        self.records: list[tuple[int, str, dict[str, Any]]] = []
        self._generations: dict[tuple[str, str, str, str], int] = {}

    def record(self, topic: str, **data: Any) -> None:
        """Append a record of `topic` with `data`, now (for events this class has no method for)."""
        data.update(tenant=self.tenant, recorded_at=self.now.isoformat())
        self.records.append((len(self.records) + 1, topic, data))

    def copy(self) -> Org:
        """Another organization with these records so far, writing on from them independently."""
        other = Org(self.tenant, self.now)
        other.records, other._generations = list(self.records), dict(self._generations)
        return other

    def advance(self, days: float) -> Org:
        self.now += timedelta(days=days)
        return self

    def entity(self, ref: str, hub: bool = False, label: str | None = None) -> str:
        self.record("entity.registered", ref=ref, label=label or ref, aliases=[], hub=hub)
        return ref

    def session(self, session_id: str, agent: str, serving: str | None = None,
                occurred: datetime | None = None) -> str:
        self.record("session.started", session_id=session_id, agent=agent, kind="main", serving=serving,
                     occurred_at=_iso(occurred))
        return f"session:{session_id}"

    def compact(self, session_id: str, occurred: datetime | None = None, summary: str = "compacted") -> None:
        self.record("session.compacted", session_id=session_id, through_message_id="m", summary=summary,
                     occurred_at=_iso(occurred))

    def dispatch(self, session_id: str, worker_session_id: str, about: tuple[str, ...] = ()) -> None:
        self.record("worker.dispatched", session_id=session_id, worker_session_id=worker_session_id, task="task",
                     about=list(about))

    def fact(self, subject: str, relation: str, obj: str, scope: str = "org", confidence: float = 0.8,
             reason: str | None = None, occurred: datetime | None = None) -> str:
        key = (subject, relation, obj, scope)
        generation = self._generations.get(key, 0)
        self._generations[key] = generation + 1
        fact_id = fact_id_for(self.tenant, key, generation)
        self.record("fact.asserted", fact_id=fact_id, subject=subject, relation=relation, object=obj, scope=scope,
                     reason=reason, confidence=confidence,
                     provenance={"session_id": None, "message_ids": [], "occurred_at": _iso(occurred)})
        return fact_id

    def corroborate(self, fact_id: str, confidence: float = 0.9, occurred: datetime | None = None) -> None:
        self.record("fact.corroborated", fact_id=fact_id, previous_confidence=0.8, confidence=confidence,
                     provenance={"session_id": None, "message_ids": [], "occurred_at": _iso(occurred)})

    def correct(self, fact_id: str, occurred: datetime | None = None) -> None:
        self.record("fact.corrected", fact_id=fact_id, reason="corrected",
                     provenance={"session_id": None, "message_ids": [], "occurred_at": _iso(occurred)})

    def invalidate(self, fact_id: str) -> None:
        self.record("fact.invalidated", fact_id=fact_id, reason="no longer holds", provenance={})

    def archive(self, fact_id: str) -> None:
        self.record("fact.archived", fact_id=fact_id, cause="session ended")

    def restore(self, fact_id: str) -> None:
        self.record("fact.restored", fact_id=fact_id, cause="recalled")

    def recall(self, agent: str, fact_ids: list[str], mode: str = "used") -> None:
        self.record("facts.recalled", agent=agent, fact_ids=fact_ids, mode=mode, perspective_id=None)

    def index(self, until: datetime | None = None, one_by_one: bool = False) -> PerspectiveIndex:
        """The records folded in bulk, or (`one_by_one`) applied one record at a time and never compacted: the
        follower's path."""
        if not one_by_one:
            return fold(self.tenant, self.records, until=until.timestamp() if until else None)
        assert until is None, "the follower's path applies every record"
        index = PerspectiveIndex(self.tenant)
        for position, topic, data in self.records:
            index.apply(position, topic, data)
        return index
