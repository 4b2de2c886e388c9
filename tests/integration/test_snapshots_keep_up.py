"""The state snapshot keeps up with writes that never pause (a bulk import, a busy stream): a writer asks for a
snapshot each time its state is `every` events ahead of its last request (not each time the state doubles), and a
request the writer makes again while the first waits for a pause is handed to the snapshotter at once, and one it
makes while the snapshot is being taken as soon as that is answered; so a process killed in the middle of bulk
writes restarts from a snapshot a bounded number of events behind."""

from __future__ import annotations

import time
from pathlib import Path

from domain import commands as c
from infra.adapters.state_snapshots import FileStateSnapshots
from infra.bootstrap import Noumena, bootstrap
from infra.settings import Settings
from tests.conftest import TickingClock

T = "bulk"


def _asked_by_hand(tmp_path: Path) -> tuple[Noumena, FileStateSnapshots]:
    """A store whose snapshots are asked for by the test only, and handed over neither when the writes pause nor
    `latest` after a request (within the test's time)."""
    settings = Settings(home=tmp_path / "home", event_store="sqlite", state_snapshot_every=10**6)
    noumena = bootstrap(settings, clock=TickingClock())
    store = noumena.snapshots
    assert store.snapshotter is not None
    store.snapshotter.pause, store.snapshotter.latest = 30.0, 120.0
    return noumena, store


def test_a_request_made_again_while_the_first_waits_for_a_pause_is_taken_at_once_while_writes_go_on(tmp_path):
    noumena, store = _asked_by_hand(tmp_path)
    run = noumena.service.execute
    try:
        run(c.CreateTenant(tenant=T))
        store.request(T)
        asked = time.monotonic()
        n = 0
        while time.monotonic() - asked < 0.5:  # writes with no pause: the request waits
            run(c.RegisterEntity(tenant=T, ref=f"thing:w{n}", label="w"))
            n += 1
        assert not store.stored
        store.request(T)  # (the writer's state moved on by another interval)
        while not store.stored and time.monotonic() - asked < 90:
            run(c.RegisterEntity(tenant=T, ref=f"thing:w{n}", label="w"))
            n += 1
        assert store.stored, "the request pressed again was not taken while the writes went on"
        assert time.monotonic() - asked < 90
    finally:
        noumena.close()


def test_a_writer_asks_for_a_snapshot_every_interval_not_only_when_its_state_doubles(tmp_path):
    settings = Settings(home=tmp_path / "home", event_store="sqlite", state_snapshot_every=50)
    noumena = bootstrap(settings, clock=TickingClock())
    store = noumena.snapshots
    assert store.snapshotter is not None
    store.snapshotter.pause = 0.05
    asked: list[str] = []
    request = store.request
    store.request = lambda tenant: (asked.append(tenant), request(tenant))
    try:
        noumena.service.execute(c.CreateTenant(tenant=T))
        for start in range(0, 400, 10):
            noumena.service.execute_batch([c.RegisterEntity(tenant=T, ref=f"thing:e{i}", label=f"e{i}")
                                           for i in range(start, start + 10)])
        # 401 events: asked about every 50 (when the state doubled it asked at 51, 102 and 204 only)
        assert len(asked) >= 7, asked
    finally:
        noumena.close()


def test_a_tenant_asked_for_again_while_its_snapshot_is_taken_is_handed_over_again_as_soon_as_it_is_answered(
        tmp_path):
    noumena, store = _asked_by_hand(tmp_path)
    run = noumena.service.execute
    try:
        run(c.CreateTenant(tenant=T))
        store.snapshotter.request(T, at_once=True)
        started = time.monotonic()
        n = 0
        while not store.stored and time.monotonic() - started < 90:  # asked for again while it is taken
            run(c.RegisterEntity(tenant=T, ref=f"thing:w{n}", label="w"))
            store.request(T)
            n += 1
        assert store.stored
        answered = time.monotonic()
        while len(store.stored) < 2 and time.monotonic() - answered < 20:  # writes go on, asking nothing more
            run(c.RegisterEntity(tenant=T, ref=f"thing:w{n}", label="w"))
            n += 1
        assert len(store.stored) >= 2, "the request made while the snapshot was taken was not handed over"
        assert store.stored[1][1] > store.stored[0][1]
        assert time.monotonic() - answered < 20  # (not when the writes pause, nor `latest` after the request)
    finally:
        noumena.close()
