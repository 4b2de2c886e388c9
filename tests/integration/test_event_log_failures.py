"""A failure of the event store leaves its adapter as the project's InfrastructureError, naming what was being
done, so the layers above (the Kafka consumer's retry, the API's 503) never see eventsourcing's or SQLite's
exception types. The failure is real: another connection holds the SQLite file's write lock."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import pytest
from eventsourcing.persistence import PersistenceError

from consumers.kafka_batch import is_transient
from domain import commands as c
from domain.application.ontology_service import OntologyService
from domain.errors import InfrastructureError
from infra.adapters.eventlog import EventsourcingLog
from infra.settings import Settings

T = "acme"


def test_a_locked_store_is_an_infrastructure_error_the_consumer_retries_and_the_log_works_once_it_is_free(
        tmp_path: Path) -> None:
    env = Settings(home=tmp_path, event_store="sqlite").event_store_env() | {"SQLITE_LOCK_TIMEOUT": "1"}
    log = EventsourcingLog(env)
    service = OntologyService(log, clock=lambda: datetime.now(UTC))
    try:
        service.execute(c.CreateTenant(tenant=T))
        lock = sqlite3.connect(tmp_path / "events.sqlite", isolation_level=None)
        lock.execute("BEGIN IMMEDIATE")  # SQLite's write lock, held by someone else
        try:
            with pytest.raises(InfrastructureError) as failed:
                service.execute(c.RegisterEntity(tenant=T, ref="person:li", label="Li"))
        finally:
            lock.rollback()
            lock.close()
        assert "the event store failed while appending a batch of 1 event(s)" in str(failed.value)
        assert "locked" in str(failed.value)
        assert isinstance(failed.value.__cause__, PersistenceError)  # the store's own error is kept as the cause
        assert is_transient(failed.value)  # the consumer retries the batch, never dead-letters it
        service.execute(c.RegisterEntity(tenant=T, ref="person:li", label="Li"))
        assert service.ontology(T).entities["person:li"].label == "Li"
    finally:
        log.close()


def test_a_store_that_is_not_a_database_is_an_infrastructure_error_when_read(tmp_path: Path) -> None:
    env = Settings(home=tmp_path, event_store="sqlite").event_store_env()
    log = EventsourcingLog(env)
    try:
        with sqlite3.connect(tmp_path / "events.sqlite") as other:
            other.execute("DROP TABLE stored_events")  # the log's table gone from under it
        for read in (lambda: log.read(0, 10), lambda: log.read_raw(0, 10), lambda: log.max_position(),
                     lambda: list(log.read_stream(T)), lambda: log.tenants()):
            with pytest.raises(InfrastructureError, match="the event store failed while") as failed:
                read()
            assert isinstance(failed.value.__cause__, PersistenceError)
    finally:
        log.close()
