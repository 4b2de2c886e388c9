"""Our SQLite recorder overrides eventsourcing's private `_insert_events` (one `executemany` for a batch, the
positions it wrote, the tracking row and `before_commit` in the same transaction). A private method can change in
any release without notice, so this pins what the override relies on: an upgrade that renames it, changes its
parameters or stops calling it from `insert_events` fails here, not silently in production."""

from __future__ import annotations

import inspect

from eventsourcing.sqlite import SQLiteProcessRecorder

from infra.adapters.eventlog import SQLiteLogRecorder


def _shape(function) -> list[tuple[str, inspect._ParameterKind]]:
    return [(p.name if p.kind is not p.VAR_KEYWORD else "**", p.kind)
            for p in inspect.signature(function).parameters.values()]


def test_the_override_has_the_signature_of_the_library_method_it_replaces():
    library = SQLiteProcessRecorder._insert_events
    ours = SQLiteLogRecorder._insert_events
    assert ours is not library
    assert _shape(ours) == _shape(library)


def test_the_library_still_routes_every_batch_through_the_overridden_method_in_one_transaction():
    source = inspect.getsource(SQLiteProcessRecorder.insert_events)
    assert "self._insert_events(c, stored_events, **kwargs)" in source
    assert "transaction(commit=True)" in source


def test_the_library_still_writes_the_tracking_row_through_the_method_our_override_calls():
    assert callable(getattr(SQLiteProcessRecorder, "_insert_tracking", None))
    assert "tracking" in inspect.getsource(SQLiteProcessRecorder._insert_events)
