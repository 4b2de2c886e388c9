"""The event log adapter: eventsourcing's recorders (SQLite file, PostgreSQL, or POPO in memory)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from eventsourcing.persistence import (
    InfrastructureFactory,
    IntegrityError,
    PersistenceError,
    ProcessRecorder,
    Tracking,
)
from eventsourcing.utils import Environment

from domain.errors import InfrastructureError
from domain.events import DomainEvent
from domain.ports import AlreadyTracked, KeyStore, Logged, Pending, TrackingPosition, VersionConflict
from infra.mapper import EventMapper, stream_id


class EventsourcingLog:
    """Implements domain.ports.EventLog on one eventsourcing process recorder (events + tracking)."""

    def __init__(self, env: dict[str, str], keys: KeyStore | None = None) -> None:
        try:
            self._factory = InfrastructureFactory.construct(Environment(env={**env, "ORIGINATOR_ID_TYPE": "text"}))
            recorder = self._factory.process_recorder()
        except PersistenceError as error:
            raise InfrastructureError(f"cannot open the event store: {error}") from error
        assert isinstance(recorder, ProcessRecorder)
        self.recorder = recorder
        self.mapper = EventMapper(keys)
        self.keys = keys

    def read_stream(self, tenant: str, after_version: int = 0) -> Iterable[DomainEvent]:
        stored = self.recorder.select_events(stream_id(tenant), gt=after_version or None)
        return [self.mapper.to_event(s.topic, s.state) for s in stored]

    def append(self, pending: Sequence[Pending], tracking: TrackingPosition | None = None) -> list[int]:
        stored = self.mapper.to_stored_batch(pending)
        track = Tracking(application_name=tracking.name, notification_id=tracking.position) if tracking else None
        try:
            positions = self.recorder.insert_events(stored, tracking=track)
        except IntegrityError:
            if tracking is not None and self.recorder.has_tracking_id(tracking.name, tracking.position):
                raise AlreadyTracked(tracking) from None
            raise VersionConflict() from None
        return list(positions or [])

    def read(self, after_position: int, limit: int) -> Sequence[Logged]:
        notifications = self.recorder.select_notifications(
            start=after_position, limit=limit, inclusive_of_start=False
        )
        return [Logged(n.id, self.mapper.to_event(n.topic, n.state)) for n in notifications]

    def read_raw(self, after_position: int, limit: int) -> Sequence[tuple[int, str, bytes]]:
        """Notifications as JSON bytes with their content opened (or `[forgotten]`), for readers that parse
        JSON themselves (the projector)."""
        notifications = self.recorder.select_notifications(
            start=after_position, limit=limit, inclusive_of_start=False
        )
        return [(n.id, n.topic, self.mapper.unsealed_state(n.topic, n.state)) for n in notifications]

    def tenants(self) -> list[str]:
        """Every tenant ever created, in order of creation."""
        from domain.tenants import TenantCreated

        found: list[str] = []
        position = 0
        while True:
            page = self.recorder.select_notifications(start=position, limit=1000, inclusive_of_start=False,
                                                      topics=[TenantCreated.stored_topic()])
            if not page:
                return found
            found += [self.mapper.to_event(n.topic, n.state).tenant for n in page]
            position = page[-1].id

    def max_position(self) -> int:
        return self.recorder.max_notification_id() or 0

    def tracked_position(self, name: str) -> int | None:
        return self.recorder.max_tracking_id(name)

    def close(self) -> None:
        self._factory.close()
        if self.keys is not None:
            self.keys.close()  # type: ignore[attr-defined]
