"""Sessions: an agent's main session per person served, and the worker sessions it dispatches."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from domain.events import DomainEvent

if TYPE_CHECKING:  # (the ontology folds sessions: a runtime import would be circular)
    from domain.ontology import Ontology


class SessionKind(StrEnum):
    MAIN = "main"
    WORKER = "worker"


class WorkerStatus(StrEnum):
    DISPATCHED = "dispatched"
    WORKING = "working"
    WAITING = "waiting"
    DONE = "done"
    FAILED = "failed"


MAX_TURNS_KEPT = 200
"""How many recent turns of a session the in-memory state keeps; older ones stay in the log."""

LIVE_WORKER_STATUSES = frozenset({WorkerStatus.DISPATCHED, WorkerStatus.WORKING, WorkerStatus.WAITING})


class SessionStarted(DomainEvent):
    topic = "session.started"
    content_fields = ("task",)

    session_id: str
    agent: str
    kind: SessionKind
    serving: str | None = None
    parent_session_id: str | None = None
    task: str | None = None
    occurred_at: datetime | None = None


class MessageAppended(DomainEvent):
    topic = "message.appended"
    content_fields = ("content",)

    session_id: str
    message_id: str
    role: str
    content: str
    occurred_at: datetime | None = None


class WorkerDispatched(DomainEvent):
    topic = "worker.dispatched"
    content_fields = ("task",)

    session_id: str
    worker_session_id: str
    task: str
    about: tuple[str, ...] = ()
    occurred_at: datetime | None = None


class WorkerReported(DomainEvent):
    topic = "worker.reported"
    content_fields = ("summary",)

    session_id: str
    status: WorkerStatus
    summary: str
    about: tuple[str, ...] = ()
    occurred_at: datetime | None = None


class SessionCompacted(DomainEvent):
    """The agent runtime compacted a session's context: the trigger for consolidation ("sleep")."""

    topic = "session.compacted"
    content_fields = ("summary", "mentions", "facts", "invalidations")

    session_id: str
    through_message_id: str
    summary: str | None = None
    mentions: tuple[dict[str, Any], ...] = ()
    facts: tuple[dict[str, Any], ...] = ()
    invalidations: tuple[dict[str, Any], ...] = ()
    occurred_at: datetime | None = None


class SessionEnded(DomainEvent):
    topic = "session.ended"

    session_id: str
    occurred_at: datetime | None = None


def message_fingerprint(role: str, content: str) -> int:
    """What tells a message sent again from another message under the same id: a digest of its role and content,
    the same in every process (the folded state moves between processes in state snapshots: `hash()` of a string
    differs from one interpreter to the next)."""
    digest = hashlib.blake2b(f"{role}\0{content}".encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "little", signed=True)


@dataclass(slots=True)
class SessionState:
    session_id: str
    agent: str
    kind: SessionKind
    serving: str | None
    parent_session_id: str | None
    task: str | None
    started_at: datetime
    ended: bool = False
    message_ids: dict[str, tuple[str | None, int]] = field(default_factory=dict)
    """message_id -> (the event_id that appended it, `message_fingerprint` of its role and content), in order."""
    workers: list[str] = field(default_factory=list)
    about: tuple[str, ...] = ()
    status: WorkerStatus | None = None
    last_summary: str | None = None
    compactions: int = 0
    turns: list[tuple[str, str, str]] = field(default_factory=list)
    """The most recent turns (message_id, role, content), at most MAX_TURNS_KEPT, for extraction and context."""
    summaries: list[tuple[str, str]] = field(default_factory=list)
    """(compaction_id, summary) of every compaction that carried a summary, in order."""


def workers_for(state: Ontology, main_session_id: str, about: str | None = None, live_only: bool = True
                ) -> list[SessionState]:
    """The workers of a main session (the live ones by default), about `about` if given, newest first."""
    main = state.require_session(main_session_id)
    workers = [state.sessions[w] for w in main.workers if w in state.sessions]
    if live_only:
        workers = [w for w in workers if w.status in LIVE_WORKER_STATUSES and not w.ended]
    if about is not None:
        workers = [w for w in workers if about in w.about]
    return list(reversed(workers))
