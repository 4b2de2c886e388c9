"""Tampering is not forgetting: in a real SQLite event store, one changed byte of a sealed record is an integrity
error that names the event (logged and counted), while a shredded key still reads as `[forgotten]`."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from domain import commands as c
from domain.errors import EventCorrupted
from domain.forgetting import FORGOTTEN
from infra.bootstrap import bootstrap
from infra.settings import Settings


def _settings(home: Path) -> Settings:
    return Settings(home=home, event_store="sqlite", encrypt_content=True)


def _write_people(home: Path) -> None:
    app = bootstrap(_settings(home))
    app.service.execute(c.CreateTenant(tenant="t"))
    app.service.execute(c.RegisterEntity(tenant="t", ref="person:li", label="Li MARKER"))
    app.service.execute(c.RegisterEntity(tenant="t", ref="person:wang", label="Wang MARKER"))
    app.close()


def _sealed_row(home: Path, ref: str) -> tuple[int, str, int, bytes]:
    """The row of the event that registered `ref`: (rowid, stream, version, state)."""
    with sqlite3.connect(home / "events.sqlite") as db:
        for rowid, stream, version, state in db.execute(
                "SELECT rowid, originator_id, originator_version, state FROM stored_events ORDER BY rowid"):
            if ref.encode() in state and b"\x00" in state:
                return rowid, stream, version, state
    raise AssertionError(f"no sealed event for {ref}")


def _corrupt_last_byte(home: Path, rowid: int, state: bytes) -> None:
    damaged = bytearray(state)
    damaged[-1] ^= 0x01  # one bit of the last record's tag
    with sqlite3.connect(home / "events.sqlite") as db:
        db.execute("UPDATE stored_events SET state = ? WHERE rowid = ?", (bytes(damaged), rowid))


def _corrupted_count() -> float:
    return REGISTRY.get_sample_value("noumena_corrupted_events_total") or 0.0


def test_one_corrupted_byte_of_a_sealed_record_is_an_integrity_error_naming_the_event(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    _write_people(tmp_path)
    rowid, stream, version, state = _sealed_row(tmp_path, "person:li")
    _corrupt_last_byte(tmp_path, rowid, state)
    before = _corrupted_count()

    app = bootstrap(_settings(tmp_path))
    try:
        with caplog.at_level(logging.ERROR, logger="infra.adapters.eventlog"), pytest.raises(EventCorrupted) as raised:
            app.log.read(0, 100)  # the log in position order, as the projector reads it
        error = raised.value
        assert (error.position, error.stream, error.version) == (rowid, stream, version)
        assert f"log position {rowid}" in str(error) and stream in str(error) and "integrity" in str(error)
        assert _corrupted_count() == before + 1
        assert any(f"log position {rowid}" in record.getMessage() for record in caplog.records)
        with pytest.raises(EventCorrupted, match=f"version {version}"):
            list(app.log.read_stream("t"))  # the stream, as the aggregate is folded
        with pytest.raises(EventCorrupted, match=f"log position {rowid}"):
            app.log.read_raw(0, 100)
        # the events before it still read
        assert [logged.position for logged in app.log.read(0, rowid - 1)] == list(range(1, rowid))
    finally:
        app.close()


def test_a_shredded_key_still_reads_as_forgotten_and_is_not_counted_as_corruption(tmp_path: Path) -> None:
    _write_people(tmp_path)
    app = bootstrap(_settings(tmp_path))
    try:
        app.application.forgetting.forget("t", "person:li")
        before = _corrupted_count()
        entities = app.service.ontology("t").entities
        assert entities["person:li"].label == FORGOTTEN
        assert entities["person:wang"].label == "Wang MARKER"
        events = [logged.event for logged in app.log.read(0, 100)]
        assert FORGOTTEN in [getattr(e, "label", None) for e in events]
        assert _corrupted_count() == before
    finally:
        app.close()
