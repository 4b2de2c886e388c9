"""A large tenant whose folded state a forget dropped is folded again by the snapshotter process, not in the
serving one: the forget deleted its snapshots, the snapshotter folds its log afresh (after the forget, so nothing
forgotten is in it), and this process loads that snapshot and reads its maps on demand. A small tenant is still
folded here. Either way the state equals a fold of the log and shows nothing the forget erased."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from domain import commands as c
from domain.ontology import Ontology
from infra.adapters.state_snapshots import FileStateSnapshots
from infra.bootstrap import Noumena, bootstrap
from infra.settings import Settings
from tests.conftest import TickingClock
from tests.race_support import wait_until

T = "refold"
REFS = [f"thing:e{i}" for i in range(30)]


def _tenant_with_a_marked_person(app: Noumena) -> str:
    run = app.service.execute_batch
    assert all(o.ok for o in run([c.CreateTenant(tenant=T), *(c.RegisterEntity(tenant=T, ref=r, label=r)
                                                              for r in REFS)]).outcomes)
    for start in range(0, 600, 100):
        run([c.AssertFact(tenant=T, subject=REFS[i % 30], relation=f"r{i % 5}", object=REFS[(i // 30) % 30],
                          reason=f"because {i}") for i in range(start, start + 100)])
    app.service.execute(c.RegisterEntity(tenant=T, ref="person:x", label="Xu REFOLDMARKER"))
    said = c.AssertFact(tenant=T, subject="person:x", relation="likes", object=REFS[0],
                        reason="REFOLDMARKER said", scope="person:x")
    return app.service.execute(said).events[0].fact_id  # type: ignore[attr-defined]


@pytest.mark.parametrize("fold_elsewhere_from, elsewhere", [(300, True), (10_000, False)])
def test_a_state_a_forget_dropped_is_folded_again_by_the_snapshotter_when_large_and_equals_the_log(
        tmp_path: Path, fold_elsewhere_from: int, elsewhere: bool) -> None:
    app = bootstrap(Settings(home=tmp_path, event_store="sqlite"), clock=TickingClock())
    try:
        app.service.FOLD_ELSEWHERE_FROM = fold_elsewhere_from
        fact_id = _tenant_with_a_marked_person(app)
        app.application.forgetting.forget(T, "person:x")
        with app.service.reading(T) as state:
            assert (FileStateSnapshots.reads(state) is not None) is elsewhere
            fold = Ontology(tenant=T)
            for event in app.log.read_stream(T):
                fold.apply(event)
            assert state == fold
            assert state.facts[fact_id].reason != "REFOLDMARKER said"
            assert "REFOLDMARKER" not in repr(state.entities.get("person:x"))
        assert app.service.execute(c.AssertFact(tenant=T, subject=REFS[1], relation="r9", object=REFS[2],
                                                reason="after the forget")).ok
        if elsewhere:
            for file in (tmp_path / "state").glob(f"{T}.snapshot*"):
                assert b"REFOLDMARKER" not in file.read_bytes()
    finally:
        app.close()


def test_a_second_forget_while_the_first_one_s_fold_runs_is_folded_on_its_own_and_no_use_waits_forever(
        tmp_path: Path) -> None:
    app = bootstrap(Settings(home=tmp_path, event_store="sqlite", state_snapshot_every=0), clock=TickingClock())
    try:
        app.service.execute(c.CreateTenant(tenant=T))
        for start in range(0, 30_000, 5_000):
            app.service.execute_batch([c.RegisterEntity(tenant=T, ref=f"person:p{i}", label=f"Person {i}")
                                       for i in range(start, start + 5_000)])
        app.service.reload(T)  # (as a forget does: the next use folds the tenant afresh, in a thread of its own)
        outcomes: list[int] = []

        def use() -> None:
            with app.service.reading(T) as state:
                outcomes.append(len(state.entities))

        first = threading.Thread(target=use)
        first.start()
        wait_until(lambda: any(t.name == "noumena-refold" and t.is_alive() for t in threading.enumerate()), 30,
                   "the first fold starts")
        app.service.reload(T)  # (a second forget while that fold runs: its result must not be kept)
        second = threading.Thread(target=use)
        second.start()
        started = time.monotonic()
        first.join(30)
        second.join(max(0.0, 30 - (time.monotonic() - started)))  # (a fold of this log takes a few seconds)
        assert not first.is_alive() and not second.is_alive(), "a use of the tenant waited for a fold that never came"
        assert outcomes == [30_000, 30_000]
    finally:
        app.close()
