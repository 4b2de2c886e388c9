"""Per-tenant writer locks across processes on PostgreSQL (domain.ports.TenantWriteLocks): session-level advisory
locks, one per tenant and schema.

A writer holds its tenant's lock from reading the log's tail through deciding to its append, so writers of one
tenant in several processes never conflict on the stream version. PostgreSQL queues the sessions waiting for a
lock in order, so a waiting writer is served in turn however tight another process's loop is (optimistic retries
alone let a process in a tight loop win again and again). A lock is held on a connection of the thread that took
it: a thread waiting for its tenant blocks nobody else of its process, and the lock goes with the connection when
a process dies. Waiting is bounded (`lock_timeout`); past it the write is refused with a ConcurrencyError, which
callers treat as "try again" (the API answers 503 with Retry-After).
"""

from __future__ import annotations

import hashlib
import threading
from typing import Any

from domain.errors import ConcurrencyError, InfrastructureError

IDLE_CONNECTIONS = 4
"""Connections kept open for the next lock once no thread holds one (more are opened while more threads wait)."""


class PostgresTenantWriteLocks:
    def __init__(self, connect_kwargs: dict[str, object], schema: str, wait_seconds: float) -> None:
        self._connect_kwargs = connect_kwargs
        self._schema = schema or "public"
        self._wait_ms = max(1, int(wait_seconds * 1000))
        self._wait_seconds = wait_seconds
        self._idle: list[Any] = []
        self._pool_lock = threading.Lock()
        self._local = threading.local()

    def _lock_id(self, tenant: str) -> int:
        digest = hashlib.blake2b(f"noumena-writer:{self._schema}:{tenant}".encode(), digest_size=8).digest()
        return int.from_bytes(digest, "big", signed=True)

    def _held(self) -> dict[str, int]:
        held: dict[str, int] | None = getattr(self._local, "held", None)
        if held is None:
            held = self._local.held = {}
        return held

    def _connection(self) -> Any:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            return conn
        with self._pool_lock:
            conn = self._idle.pop() if self._idle else None
        if conn is None:
            import psycopg

            try:
                conn = psycopg.connect(**self._connect_kwargs, autocommit=True)  # type: ignore[arg-type]
                conn.execute(f"SET lock_timeout = {self._wait_ms}")
            except psycopg.Error as error:
                raise InfrastructureError(f"cannot connect for the tenant writer locks: {error}") from error
        self._local.conn = conn
        return conn

    def _let_go_of_connection(self, broken: bool = False) -> None:
        conn = self._local.conn
        self._local.conn = None
        if broken or conn.closed:
            conn.close()
            return
        with self._pool_lock:
            if len(self._idle) < IDLE_CONNECTIONS:
                self._idle.append(conn)
                return
        conn.close()

    def acquire(self, tenant: str, wait: bool = True) -> bool:
        import psycopg

        held = self._held()
        if held.get(tenant):
            held[tenant] += 1
            return True
        conn = self._connection()
        try:
            if wait:
                conn.execute("SELECT pg_advisory_lock(%s)", (self._lock_id(tenant),))
                got = True
            else:
                row = conn.execute("SELECT pg_try_advisory_lock(%s)", (self._lock_id(tenant),)).fetchone()
                got = bool(row and row[0])
        except psycopg.errors.LockNotAvailable:
            if not held:
                self._let_go_of_connection()
            raise ConcurrencyError(f"tenant {tenant!r} has been written by another process for over "
                                   f"{self._wait_seconds:g} s; try again") from None
        except psycopg.Error as error:
            # (the session is gone, and with it whatever it held: this thread starts again on a new one)
            self._local.held = {}
            self._let_go_of_connection(broken=True)
            raise InfrastructureError(f"the tenant writer lock failed: {error}") from error
        if got:
            held[tenant] = 1
        elif not held:
            self._let_go_of_connection()
        return got

    def release(self, tenant: str) -> None:
        import psycopg

        held = self._held()
        if tenant not in held:  # (its session was lost meanwhile, and the lock with it)
            return
        if held[tenant] > 1:
            held[tenant] -= 1
            return
        del held[tenant]
        try:
            self._local.conn.execute("SELECT pg_advisory_unlock(%s)", (self._lock_id(tenant),))
        except psycopg.Error:  # (a lost session holds nothing any more)
            self._local.held = {}
            self._let_go_of_connection(broken=True)
            return
        if not held:
            self._let_go_of_connection()

    def close(self) -> None:
        with self._pool_lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()
