"""One hierarchy for every error the domain can raise; entry points map these to exit codes or HTTP."""

from __future__ import annotations


class NoumenaError(Exception):
    """Base of every error noumena raises on purpose."""


class DomainError(NoumenaError):
    """A command broke a rule of the ontology. `field` names the offending input when there is one."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


class InvalidInput(DomainError):
    """A value is malformed: a bad ref, a naive timestamp, a confidence outside 0..1, ..."""


class UnknownTenant(DomainError):
    def __init__(self, tenant: str) -> None:
        super().__init__(f"tenant {tenant!r} does not exist", field="tenant")
        self.tenant = tenant


class TenantAlreadyExists(DomainError):
    def __init__(self, tenant: str) -> None:
        super().__init__(f"tenant {tenant!r} already exists", field="tenant")


class UnknownEntity(DomainError):
    def __init__(self, ref: str, tenant: str, field: str = "ref") -> None:
        super().__init__(f"entity {ref!r} is not registered in tenant {tenant!r}", field=field)
        self.ref = ref


class UnknownFact(DomainError):
    def __init__(self, what: str, field: str = "fact_id") -> None:
        super().__init__(f"no fact {what}", field=field)


class FactNotCurrent(DomainError):
    """Only a current fact can be invalidated or corroborated; the message names its state."""

    def __init__(self, fact_id: str, status: str, superseded_by: str | None = None, field: str = "fact_id",
                 hint: str = "") -> None:
        extra = f" (superseded by {superseded_by})" if superseded_by else ""
        super().__init__(f"fact {fact_id} is not current: it is {status}{extra}{hint}", field=field)
        self.fact_id = fact_id
        self.status = status


class UnknownSession(DomainError):
    def __init__(self, session_id: str, field: str = "session_id") -> None:
        super().__init__(f"session {session_id!r} is not known", field=field)
        self.session_id = session_id


class SessionAlreadyEnded(DomainError):
    def __init__(self, session_id: str) -> None:
        super().__init__(f"session {session_id!r} has ended", field="session_id")


class SubjectWasForgotten(DomainError):
    """A write names a person who was forgotten and not registered anew since (see docs/forgetting.md)."""

    def __init__(self, ref: str, receipt_id: str, field: str) -> None:
        receipt = f" (forget receipt {receipt_id})" if receipt_id else ""
        super().__init__(f"{ref} was forgotten{receipt}: nothing more can be written about them until they are "
                         f"registered anew (register the entity {ref} again)", field=field)
        self.ref = ref


class ForgetRunning(DomainError):
    """A tenant forgets one subject at a time (per process): another forget asked meanwhile is refused, naming the
    running one, rather than queued behind it."""

    def __init__(self, tenant: str, running: str, started_at: str, subject: str) -> None:
        super().__init__(f"tenant {tenant!r} is already forgetting {running} (started {started_at}); one forget per "
                         f"tenant runs at a time: ask to forget {subject} again once that one has answered",
                         field="subject")
        self.running = running


class SessionConflict(DomainError):
    """A session id was reused with different attributes."""


class InvalidSettings(NoumenaError, ValueError):
    """The configuration cannot work; refused at start. `setting` names the environment variable to fix."""

    def __init__(self, message: str, *, setting: str) -> None:
        super().__init__(message)
        self.setting = setting


class InfrastructureError(NoumenaError):
    """Something below the domain failed (store, broker, file). Carries the cause."""


class EventCorrupted(NoumenaError):
    """A stored event does not read back as it was written: a sealed field fails its integrity check (its key
    exists, so it was not forgotten). The log was tampered with or damaged; the message names the event."""

    def __init__(self, position: int | None, stream: str, version: int, field: str, key_name: str) -> None:
        where = f"at log position {position} " if position is not None else ""
        super().__init__(f"stored event {where}(stream {stream!r}, version {version}) is corrupted: its sealed "
                         f"field {field!r} (key {key_name!r}) fails its integrity check")
        self.position = position
        self.stream = stream
        self.version = version
        self.field = field
        self.key_name = key_name


class ConcurrencyError(InfrastructureError):
    """Another writer appended to the same tenant log first and retries ran out."""


class EmbedderUnavailable(InfrastructureError):
    """The embedder could not give vectors: its model would not load, or its service timed out, answered an HTTP
    error, or answered something that is not the expected embeddings (the message names which). Search falls back
    to lexical ranking and says so."""


class NotPermitted(DomainError):
    """The caller's key does not allow this (an agent-scoped key asking as another agent, or for a person its
    agents do not serve, or on a route that needs a tenant-wide key)."""


class UnknownServed(NoumenaError):
    """No evidence of a served read under this id here: never served from this home, another tenant's, or past
    the evidence store's bounds (age, size)."""

    what = "read"

    def __init__(self, served_id: str) -> None:
        super().__init__(f"no {self.what} {served_id!r} was served from this home (or its evidence is past the"
                         " store's age or size bound)")
        self.served_id = served_id


class UnknownPerspective(UnknownServed):
    what = "perspective"


class UnknownContext(UnknownServed):
    what = "context"


class UnknownSearch(UnknownServed):
    what = "search"


class UnknownApiKey(NoumenaError):
    """No key with that id is stored."""
