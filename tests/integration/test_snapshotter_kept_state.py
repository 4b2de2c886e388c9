"""The snapshotter keeps a tenant's state from one request to the next (`FileStateSnapshots.take_from_log`): a request
folds only the events written since its last snapshot, reads no bucket of the files for keys it holds already, and
stores only the buckets those events changed, as a delta after its last one; every snapshot it stores is the fold of
the log up to it. A forget drops the kept state: no snapshot stored after it holds the forgotten content."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

from domain import commands as c
from domain.application.ontology_service import OntologyService
from domain.ontology import Ontology
from infra.adapters.state_snapshots import FileStateSnapshots
from infra.bootstrap import Noumena, bootstrap
from infra.settings import Settings
from tests.conftest import TickingClock

T = "kept"
REFS = [f"thing:e{i}" for i in range(40)]


def _writer(home: Path) -> Noumena:
    """A process that writes and takes no snapshot (the snapshotter here is the store each test drives)."""
    return bootstrap(Settings(home=home, event_store="sqlite", state_snapshot_every=0), clock=TickingClock())


@contextmanager
def _snapshotter(home: Path) -> Iterator[FileStateSnapshots]:
    """What the snapshotter process runs: a snapshot store on a log, key store and caches of its own."""
    own = _writer(home)
    store = FileStateSnapshots(home, own.log, own.log.keys, 1)
    try:
        yield store
    finally:
        store.close()
        own.close()


def _statement(i: int) -> c.AssertFact:
    """The i-th statement of the story: 40 entities, 10 relations."""
    return c.AssertFact(tenant=T, subject=REFS[i % 40], relation=f"r{i % 10}", object=REFS[(i // 40) % 40],
                        reason=f"because {i}")


def _facts(writer: Noumena, n: int) -> list[str]:
    run = writer.service.execute_batch
    assert all(o.ok for o in run([c.CreateTenant(tenant=T), *(c.RegisterEntity(tenant=T, ref=r, label=r)
                                                              for r in REFS)]).outcomes)
    facts: list[str] = []
    for start in range(0, n, 100):
        result = run([_statement(i) for i in range(start, min(n, start + 100))])
        facts += [o.events[0].fact_id for o in result.outcomes]  # type: ignore[attr-defined]
    return facts


def _corroborate(writer: Noumena, indexes: range) -> None:
    """The same statements again: each a corroboration of its fact, which changes that fact only."""
    writer.service.execute_batch([_statement(i) for i in indexes])


def _loaded(home: Path, writer: Noumena) -> Ontology:
    """The state a process starting now loads from the files, checked against the fold of the log up to it."""
    store = FileStateSnapshots(home, writer.log, writer.log.keys, 1)
    try:
        loaded = store.load(T)
        assert loaded is not None
        fold = Ontology(tenant=T)
        for event in list(writer.log.read_stream(T))[:loaded.version]:
            fold.apply(event)
        assert loaded == fold
        return loaded
    finally:
        store.close()


def _records(path: Path) -> int:
    with closing(sqlite3.connect(path)) as db:
        return int(db.execute("SELECT count(*) FROM records").fetchone()[0])


def test_the_snapshotter_keeps_its_state_and_folds_and_stores_only_what_was_written_since_its_last_snapshot(
        tmp_path):
    home = tmp_path / "home"
    writer = _writer(home)
    try:
        _facts(writer, 800)
        with _snapshotter(home) as store:
            first, kind = store.take_from_log(T) or (0, "")
            assert kind == "whole"  # (no snapshot yet: the log folded, the state written whole)
            _corroborate(writer, range(5))
            second, kind = store.take_from_log(T) or (0, "")
            assert kind == "changes" and second == first + 5  # (loaded from the files, the tail folded)
            service: OntologyService = store._kept[T][0]  # noqa: SLF001  (the state it keeps: looked at, not used)
            state = service.ontology(T)
            reads = FileStateSnapshots.reads(state)
            _corroborate(writer, range(5))  # (the same facts again)
            third, kind = store.take_from_log(T) or (0, "")
            assert kind == "changes" and third == second + 5
            assert service.ontology(T) is state  # the same state, brought forward...
            assert FileStateSnapshots.reads(state) == reads  # ...reading nothing it held already
            delta = store.folder / f"{T}.snapshot.{second}-{third}.delta"
            assert _records(delta) <= 5  # (the buckets of the five facts: nothing else changed)
            assert _loaded(home, writer).version == third
            _corroborate(writer, range(400, 405))  # (five other facts)
            fourth, kind = store.take_from_log(T) or (0, "")
            assert kind == "changes" and _records(store.folder / f"{T}.snapshot.{third}-{fourth}.delta") <= 5
            _corroborate(writer, range(5, 400))  # (many more: their buckets are read, once)
            fifth, kind = store.take_from_log(T) or (0, "")
            assert kind == "changes" and _loaded(home, writer).version == fifth
            assert store.take_from_log(T) is None  # (current: nothing to store)
    finally:
        writer.close()


def test_a_forget_between_two_requests_drops_the_kept_state_and_no_later_snapshot_holds_the_forgotten_content(
        tmp_path):
    home = tmp_path / "home"
    writer = _writer(home)
    try:
        _facts(writer, 200)
        run = writer.service.execute
        run(c.RegisterEntity(tenant=T, ref="person:x", label="Xu SNAPMARKER"))
        said = c.AssertFact(tenant=T, subject="person:x", relation="likes", object=REFS[0], reason="SNAPMARKER said",
                            scope="person:x")
        fact_id = run(said).events[0].fact_id  # type: ignore[attr-defined]
        with _snapshotter(home) as store:
            assert (store.take_from_log(T) or (0, ""))[1] == "whole"
            run(said)  # (a corroboration: the kept state reads the fact, its reason in memory)
            assert (store.take_from_log(T) or (0, ""))[1] == "changes"
            assert store._kept[T][0].ontology(T).facts[fact_id].reason == "SNAPMARKER said"  # noqa: SLF001
            writer.application.forgetting.forget(T, "person:x")
            _corroborate(writer, range(3))
            version, kind = store.take_from_log(T) or (0, "")
            assert kind == "whole"  # (folded afresh from the log: nothing kept from before the forget)
            loaded = _loaded(home, writer)
            assert loaded.version == version
            assert loaded.facts[fact_id].reason != "SNAPMARKER said"
            assert "SNAPMARKER" not in repr(loaded.entities.get("person:x"))
            for file in store.folder.glob(f"{T}.snapshot*"):
                assert b"SNAPMARKER" not in file.read_bytes()
            _corroborate(writer, range(3))
            assert (store.take_from_log(T) or (0, ""))[1] == "changes"  # (kept again, from the new snapshot)
            assert _loaded(home, writer).facts[fact_id].reason != "SNAPMARKER said"
    finally:
        writer.close()
