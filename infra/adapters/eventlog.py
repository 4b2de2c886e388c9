"""The event log adapter: eventsourcing's recorders (SQLite file, PostgreSQL, or POPO in memory)."""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from eventsourcing.persistence import (
    InfrastructureFactory,
    IntegrityError,
    PersistenceError,
    ProcessRecorder,
    StoredEvent,
    Tracking,
)
from eventsourcing.sqlite import SQLiteProcessRecorder
from eventsourcing.utils import Environment
from prometheus_client import Counter
from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_random

from domain.errors import EventCorrupted, InfrastructureError
from domain.events import DomainEvent
from domain.ports import AlreadyTracked, KeyStore, Logged, Pending, TrackingPosition, VersionConflict
from infra.adapters.mapper import EventMapper, SealedFieldCorrupted, stream_id

log = logging.getLogger(__name__)
CORRUPTED_EVENTS = Counter("noumena_corrupted_events", "Stored events read whose sealed fields failed their "
                           "integrity check (their key exists: tampering or damage, not forgetting).")


class SQLiteLogRecorder(SQLiteProcessRecorder):
    """eventsourcing's SQLite process recorder, with a batch written by one `executemany`, and `before_commit`
    (an optional argument of `insert_events`) run after the batch and its tracking row are written, inside the
    transaction: a failure there writes nothing."""

    def _insert_events(self, c: Any, stored_events: Sequence[StoredEvent], **kwargs: Any) -> Sequence[int] | None:
        rows = [(s.originator_id if isinstance(s.originator_id, str) else s.originator_id.hex,
                 s.originator_version, s.topic, s.state) for s in stored_events]
        positions: list[int] = []
        if rows:
            c.executemany(self.insert_events_statement, rows)
            c.execute("SELECT last_insert_rowid()")
            last = c.fetchone()[0]
            positions = list(range(last - len(rows) + 1, last + 1))
            # One writer at a time appends rowids max + 1; should SQLite ever have picked others, ask for each.
            c.execute(f"SELECT originator_id, originator_version FROM {self.events_table_name} WHERE rowid = ?",
                      (positions[0],))
            first = c.fetchone()
            if first is None or tuple(first) != rows[0][:2]:
                positions = []
                for row in rows:
                    c.execute(f"SELECT rowid FROM {self.events_table_name} WHERE originator_id = ? AND "
                              "originator_version = ?", row[:2])
                    positions.append(c.fetchone()[0])
        tracking: Tracking | None = kwargs.get("tracking")
        if tracking is not None:
            self._insert_tracking(c, tracking)
        before_commit: Callable[[], None] | None = kwargs.get("before_commit")
        if before_commit is not None:
            before_commit()
        return positions


@contextmanager
def store_failures(doing: str) -> Iterator[None]:
    """The store's own failures (eventsourcing's PersistenceError: a lost connection, a locked, missing or damaged
    database; SQLite's, from the key store the mapper calls) as the project's InfrastructureError, naming what was
    being done. Callers above this adapter (the Kafka consumer's retry, the API's 503) know no store's types."""
    try:
        yield
    except (PersistenceError, sqlite3.Error) as error:
        raise InfrastructureError(f"the event store failed while {doing}: {error}") from error


def _schema_race(error: BaseException) -> bool:
    """A failure another process's setup of the same schema can cause: its DDL, or its record of the schema's
    migration (eventsourcing's `__migration__` tracking row), committed between our check and our write."""
    text = str(error)
    return isinstance(error, PersistenceError) and any(sign in text for sign in (
        "concurrently updated", "already exists", "duplicate key value", "tracking for __migration__"))


class EventsourcingLog:
    """Implements domain.ports.EventLog on one eventsourcing process recorder (events + tracking). Every failure
    of the store leaves it as an InfrastructureError (`store_failures`)."""

    def __init__(self, env: dict[str, str], keys: KeyStore | None = None) -> None:
        env = {**env, "ORIGINATOR_ID_TYPE": "text"}
        if env.get("PERSISTENCE_MODULE") == "eventsourcing.sqlite":
            env.setdefault("PROCESS_RECORDER_TOPIC", "infra.adapters.eventlog:SQLiteLogRecorder")
        try:
            # Processes opening a fresh PostgreSQL schema at once race on its DDL ("tuple concurrently updated",
            # or a duplicate type); the loser finds the tables made when it tries again.
            for attempt in Retrying(retry=retry_if_exception(_schema_race), stop=stop_after_attempt(5),
                                    wait=wait_random(0.05, 0.5), reraise=True):
                with attempt:
                    self._factory = InfrastructureFactory.construct(Environment(env=env))
                    recorder = self._factory.process_recorder()
        except PersistenceError as error:
            raise InfrastructureError(f"cannot open the event store: {error}") from error
        assert isinstance(recorder, ProcessRecorder)
        self.recorder = recorder
        self.mapper = EventMapper(keys)
        self.keys = keys

    def read_stream(self, tenant: str, after_version: int = 0) -> Iterable[DomainEvent]:
        with store_failures(f"reading the stream of tenant {tenant!r}"):
            stored = self.recorder.select_events(stream_id(tenant), gt=after_version or None)
        return [self._event(s) for s in stored]

    def _event(self, stored: StoredEvent) -> DomainEvent:
        try:
            return self.mapper.to_event(stored.topic, stored.state)
        except SealedFieldCorrupted as error:
            raise self._corrupted(stored, error) from error

    def _unsealed(self, stored: StoredEvent) -> bytes:
        try:
            return self.mapper.unsealed_state(stored.topic, stored.state)
        except SealedFieldCorrupted as error:
            raise self._corrupted(stored, error) from error

    @staticmethod
    def _corrupted(stored: StoredEvent, error: SealedFieldCorrupted) -> EventCorrupted:
        """The integrity error naming the event (its log position when read as a notification, its stream and
        version), logged and counted (`noumena_corrupted_events_total`)."""
        stream = stored.originator_id if isinstance(stored.originator_id, str) else stored.originator_id.hex
        named = EventCorrupted(getattr(stored, "id", None), stream, stored.originator_version, error.field,
                               error.key_name)
        CORRUPTED_EVENTS.inc()
        log.error("%s", named)
        return named

    def append(self, pending: Sequence[Pending], tracking: TrackingPosition | None = None) -> list[int]:
        # The batch's new data keys are being committed while it is sealed and written; the events commit only
        # once they are, and while the key store holds off forgets (the SQLite recorder does this inside its
        # transaction, after the rows are written; other stores before writing).
        with store_failures(f"appending a batch of {len(pending)} event(s)"):
            stored, keys_ready = self.mapper.to_stored_pending(pending)
            track = Tracking(application_name=tracking.name, notification_id=tracking.position) if tracking else None
            extra: dict[str, Any] = {}
            held: list[Callable[[], None]] = []
            if keys_ready is not None:
                if isinstance(self.recorder, SQLiteLogRecorder):
                    extra["before_commit"] = lambda: held.append(keys_ready())
                else:
                    held.append(keys_ready())
            try:
                positions = self.recorder.insert_events(stored, tracking=track, **extra)
            except IntegrityError:
                if tracking is not None and self.recorder.has_tracking_id(tracking.name, tracking.position):
                    raise AlreadyTracked(tracking) from None
                raise VersionConflict() from None
            finally:
                for let_go in held:
                    let_go()
        return list(positions or [])

    def read(self, after_position: int, limit: int) -> Sequence[Logged]:
        with store_failures(f"reading the log after position {after_position}"):
            notifications = self.recorder.select_notifications(
                start=after_position, limit=limit, inclusive_of_start=False
            )
        return [Logged(n.id, self._event(n)) for n in notifications]

    def read_raw(self, after_position: int, limit: int) -> Sequence[tuple[int, str, bytes]]:
        """Notifications as JSON bytes with their content opened (or `[forgotten]`), for readers that parse
        JSON themselves (the projector)."""
        with store_failures(f"reading the log after position {after_position}"):
            notifications = self.recorder.select_notifications(
                start=after_position, limit=limit, inclusive_of_start=False
            )
        return [(n.id, n.topic, self._unsealed(n)) for n in notifications]

    def tenants(self) -> list[str]:
        """Every tenant ever created, in order of creation."""
        from domain.tenants import TenantCreated

        found: list[str] = []
        position = 0
        while True:
            with store_failures("listing the tenants"):
                page = self.recorder.select_notifications(start=position, limit=1000, inclusive_of_start=False,
                                                          topics=[TenantCreated.stored_topic()])
            if not page:
                return found
            found += [self._event(n).tenant for n in page]
            position = page[-1].id

    def max_position(self) -> int:
        with store_failures("reading the log's last position"):
            return self.recorder.max_notification_id() or 0

    def count_sealed_with(self, deleted: Iterable[str], page: int = 5000, tenant: str | None = None) -> int:
        """How many stored events have content sealed with one of the `deleted` keys (by name; a member of a
        deleted group key counts unless its own key was stored when the group was split): a forget receipt's
        "events affected". Reads only each event's key name (no decryption), and only `tenant`'s stream when
        named (a tenant's keys seal only its own events), so a forget in a small tenant never reads a large one's.

        The store counts the events per key name itself (`key_name_counts`: one SQL query on SQLite and
        PostgreSQL), so this process's interpreter only sees each distinct key name once, with one key lookup
        each: a forget in a busy tenant does not hold the interpreter lock for a pass over its events."""
        return self.sealed_with(deleted, page, tenant)[0]

    def sealed_with(self, deleted: Iterable[str], page: int = 5000, tenant: str | None = None,
                    positions: bool = False) -> tuple[int, list[int]]:
        """`count_sealed_with`, and with `positions` also the log positions of those events (ascending): what
        now reads `[forgotten]` because of this deletion, found by key name in the store (SQLite and PostgreSQL
        select them in SQL, for `tenant`: the events sealed with a deleted key or a member of a deleted group
        key, one query) without opening a single event."""
        from infra.adapters.keys.derivation import DERIVED_NAME, derived_name

        gone = set(deleted)
        if not gone:
            return 0, []
        if tenant is not None and (isinstance(self.recorder, SQLiteProcessRecorder)
                                   or type(self.recorder).__module__ == "eventsourcing.postgres"):
            groups = sorted({name for name in gone if DERIVED_NAME.match(name + "/x") is not None
                             and name.startswith(f"{tenant}/root/")})
            with store_failures("finding the events sealed with deleted keys"):
                found = self._sealed_by_name(sorted(gone), groups, len(f"{tenant}/root/") + 32, tenant)
            members = {name for _, name in found if name is not None}
            kept = self._stored_among(members) if members else set()
            hit = [at for at, name in found if name is None or name not in kept]
            return len(hit), hit if positions else []
        counts = self.key_name_counts(tenant, page)
        names = [name for name in counts if name in gone]
        members_counted: dict[str, int] = {}  # sealed with a member of a deleted group: counts unless kept alone
        for name, events in counts.items():
            if name not in gone and (derived := derived_name(name)) is not None and derived[1] in gone \
                    and self.keys is not None:
                members_counted[name] = events
        if members_counted:
            kept = self._stored_among(members_counted)
            names += [name for name in members_counted if name not in kept]
        count = sum(counts[name] for name in names)
        return count, (self.positions_sealed_with_names(names, tenant, page) if positions and names else [])

    def _stored_among(self, names: Iterable[str]) -> set[str]:
        """Which of these member key names have a key stored under that very name (kept when their group was
        split): their events still read."""
        if self.keys is None:
            return set(names)
        stored_among = getattr(self.keys, "stored_among", None)
        return (stored_among(names) if stored_among is not None else
                {name for name in names if self.keys.get(name) is not None})

    def _sealed_by_name(self, gone: list[str], groups: list[str], group_length: int, tenant: str
                        ) -> list[tuple[int, str | None]]:
        """(position, None) for each event of `tenant` sealed with a key named in `gone`, (position, its key name)
        for each one sealed with a member of a group key in `groups` (`group_length` characters long), ascending."""
        recorder: Any = self.recorder
        if isinstance(recorder, SQLiteProcessRecorder):
            statement = (f"SELECT rowid, CASE WHEN name IN (SELECT value FROM json_each(?2)) THEN NULL ELSE name END"
                         f" FROM (SELECT rowid, CAST({self._SQLITE_NAME} AS TEXT) AS name FROM (SELECT rowid, state,"
                         f" instr(state, x'00') AS cut FROM {recorder.events_table_name} WHERE originator_id = ?1)"
                         " WHERE cut > 0) WHERE name IN (SELECT value FROM json_each(?2)) OR (substr(name, ?4 + 1, 1)"
                         " = '/' AND substr(name, 1, ?4) IN (SELECT value FROM json_each(?3))) ORDER BY rowid")
            with recorder.datastore.transaction(commit=False) as c:
                c.execute(statement, [stream_id(tenant), json.dumps(gone), json.dumps(groups), group_length])
                return [(int(row[0]), row[1]) for row in c.fetchall()]
        from psycopg.sql import SQL, Identifier

        statement = SQL(
            "SELECT notification_id, CASE WHEN name = ANY(%(gone)s) THEN NULL ELSE name END AS name FROM (SELECT"
            f" notification_id, {self._POSTGRES_NAME} AS name FROM (SELECT notification_id, state,"
            " position('\\x00'::bytea in state) AS cut FROM {schema}.{table} WHERE originator_id = %(stream)s)"
            " AS sealed WHERE cut > 0) AS named WHERE name = ANY(%(gone)s) OR (substring(name from %(length)s + 1"
            " for 1) = '\\x2f'::bytea AND substring(name from 1 for %(length)s) = ANY(%(groups)s))"
            " ORDER BY notification_id"
        ).format(schema=Identifier(recorder.datastore.schema), table=Identifier(recorder.events_table_name))
        with recorder.datastore.get_connection() as conn, conn.cursor() as curs:
            curs.execute(statement, {"stream": stream_id(tenant), "gone": [name.encode() for name in gone],
                                     "groups": [name.encode() for name in groups], "length": group_length})
            return [(int(row["notification_id"]), bytes(row["name"]).decode() if row["name"] is not None else None)
                    for row in curs.fetchall()]

    def positions_sealed_with_names(self, names: Sequence[str], tenant: str | None = None, page: int = 5000
                                    ) -> list[int]:
        """The log positions (ascending) of the stored events (of `tenant`'s stream, or of the whole log) whose
        content is sealed with a key of one of these exact `names`."""
        wanted = sorted(set(names))
        with store_failures("finding the events sealed with deleted keys"):
            if isinstance(self.recorder, SQLiteProcessRecorder):
                return self._sqlite_positions(wanted, tenant)
            if type(self.recorder).__module__ == "eventsourcing.postgres":
                return self._postgres_positions(wanted, tenant)
            from infra.adapters.sealed_format import read_sealed

            found: list[int] = []
            lookup = set(wanted)
            position = 0
            while True:
                notifications = self.recorder.select_notifications(start=position, limit=page,
                                                                   inclusive_of_start=False)
                if not notifications:
                    return found
                found += [n.id for n in notifications
                          if (tenant is None or n.originator_id == stream_id(tenant)) and 0 in n.state
                          and read_sealed(n.state).key_name in lookup]
                position = notifications[-1].id

    def key_name_counts(self, tenant: str | None = None, page: int = 5000) -> dict[str, int]:
        """Key name -> how many stored events (of `tenant`'s stream, or of the whole log) are sealed with it.
        SQLite and PostgreSQL count in the store from each state's header (infra/adapters/sealed_format.py: the byte 0
        after the JSON, a format byte, the key name's length in two bytes, the key name); another recorder is
        read a page at a time."""
        with store_failures("counting the events sealed with each key"):
            if isinstance(self.recorder, SQLiteProcessRecorder):
                rows = self._sqlite_key_name_counts(tenant)
            elif type(self.recorder).__module__ == "eventsourcing.postgres":
                rows = self._postgres_key_name_counts(tenant)
            else:
                from infra.adapters.sealed_format import read_sealed

                counts: dict[str, int] = {}
                for states in self._pages(page, tenant):
                    for state in states:
                        if 0 in state:
                            name = read_sealed(state).key_name
                            counts[name] = counts.get(name, 0) + 1
                return counts
        return {bytes(name).decode(): int(events) for name, events in rows}

    # SQLite has no function for a byte's value; instr() of the one-byte blob in the 256 bytes 00..ff is it + 1.
    _SQLITE_BYTE_AT = "(instr(x'" + bytes(range(256)).hex() + "', substr(state, {}, 1)) - 1)"
    _SQLITE_NAME = (f"substr(state, cut + 4, {_SQLITE_BYTE_AT.format('cut + 2')} * 256 + "
                    f"{_SQLITE_BYTE_AT.format('cut + 3')})")
    """The key name in a sealed state's header (infra/sealed_format.py), `cut` being the position of its byte 0."""
    _POSTGRES_NAME = "substring(state from cut + 4 for get_byte(state, cut + 1) * 256 + get_byte(state, cut + 2))"

    def _sqlite_key_name_counts(self, tenant: str | None) -> list[tuple[bytes, int]]:
        recorder: Any = self.recorder
        statement = (f"SELECT {self._SQLITE_NAME} AS name, count(*) FROM (SELECT state, instr(state, x'00') AS cut"
                     f" FROM {recorder.events_table_name}{' WHERE originator_id = ?' if tenant is not None else ''})"
                     " WHERE cut > 0 GROUP BY name")
        with recorder.datastore.transaction(commit=False) as c:
            c.execute(statement, [stream_id(tenant)] if tenant is not None else [])
            return [(row[0], row[1]) for row in c.fetchall()]

    def _sqlite_positions(self, names: list[str], tenant: str | None) -> list[int]:
        recorder: Any = self.recorder
        statement = (f"SELECT rowid FROM (SELECT rowid, state, instr(state, x'00') AS cut FROM"
                     f" {recorder.events_table_name}{' WHERE originator_id = ?' if tenant is not None else ''})"
                     f" WHERE cut > 0 AND CAST({self._SQLITE_NAME} AS TEXT) IN (SELECT value FROM json_each(?))"
                     " ORDER BY rowid")
        with recorder.datastore.transaction(commit=False) as c:
            c.execute(statement, [*([stream_id(tenant)] if tenant is not None else []), json.dumps(names)])
            return [int(row[0]) for row in c.fetchall()]

    def _postgres_key_name_counts(self, tenant: str | None) -> list[tuple[bytes, int]]:
        from psycopg.sql import SQL, Identifier

        recorder: Any = self.recorder
        statement = SQL(
            f"SELECT {self._POSTGRES_NAME} AS name, count(*) AS events FROM (SELECT state, "
            "position('\\x00'::bytea in state) AS cut "
            "FROM {schema}.{table}" + (" WHERE originator_id = %s" if tenant is not None else "") + ") AS sealed "
            "WHERE cut > 0 GROUP BY name"
        ).format(schema=Identifier(recorder.datastore.schema), table=Identifier(recorder.events_table_name))
        with recorder.datastore.get_connection() as conn, conn.cursor() as curs:
            curs.execute(statement, [stream_id(tenant)] if tenant is not None else [])
            return [(row["name"], row["events"]) for row in curs.fetchall()]

    def _postgres_positions(self, names: list[str], tenant: str | None) -> list[int]:
        from psycopg.sql import SQL, Identifier

        recorder: Any = self.recorder
        statement = SQL(
            "SELECT notification_id FROM (SELECT notification_id, state, position('\\x00'::bytea in state) AS cut"
            " FROM {schema}.{table}" + (" WHERE originator_id = %s" if tenant is not None else "") + ") AS sealed"
            f" WHERE cut > 0 AND {self._POSTGRES_NAME} = ANY(%s) ORDER BY notification_id"
        ).format(schema=Identifier(recorder.datastore.schema), table=Identifier(recorder.events_table_name))
        with recorder.datastore.get_connection() as conn, conn.cursor() as curs:
            curs.execute(statement, [*([stream_id(tenant)] if tenant is not None else []),
                                     [name.encode() for name in names]])
            return [int(row["notification_id"]) for row in curs.fetchall()]

    def _pages(self, page: int, tenant: str | None) -> Iterator[list[bytes]]:
        """The stored states of the whole log (or of `tenant`'s stream), a page at a time."""
        position = 0
        while True:
            if tenant is None:
                notifications = self.recorder.select_notifications(start=position, limit=page,
                                                                   inclusive_of_start=False)
                if not notifications:
                    return
                yield [n.state for n in notifications]
                position = notifications[-1].id
            else:
                stored = self.recorder.select_events(stream_id(tenant), gt=position or None, limit=page)
                if not stored:
                    return
                yield [s.state for s in stored]
                position = stored[-1].originator_version

    def tracked_position(self, name: str) -> int | None:
        with store_failures(f"reading the tracked position of {name!r}"):
            return self.recorder.max_tracking_id(name)

    def close(self) -> None:
        self._factory.close()
        if self.keys is not None:
            self.keys.close()  # type: ignore[attr-defined]
