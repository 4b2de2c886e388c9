"""A tenant dropped by a forget is folded again in a thread of its own, reading the log; closing the container while
that fold runs stops the fold and waits for its thread to end before the stores close (a thread reading a store
closed under it once took the process down inside SQLite). The pool of the SQLite store usually refuses such a read
with an error instead, so this guards the order (no fold thread outlives close) more than it shows the crash."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from domain import commands as c
from infra.bootstrap import bootstrap
from infra.settings import Settings
from tests.race_support import wait_until

T = "acme"


def _folders() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "noumena-refold" and t.is_alive()]


def test_closing_during_a_fold_after_a_forget_waits_for_the_fold_thread(tmp_path: Path) -> None:
    app = bootstrap(Settings(home=tmp_path, event_store="sqlite"))
    app.service.execute(c.CreateTenant(tenant=T))
    for start in range(0, 30_000, 5_000):
        app.service.execute_batch([c.RegisterEntity(tenant=T, ref=f"person:p{i}", label=f"Person {i}")
                                   for i in range(start, start + 5_000)])
    app.service.reload(T)  # (what a forget does: the next use folds the tenant afresh, in a thread of its own)
    outcome: list[BaseException | None] = []

    def read() -> None:
        try:
            with app.service.reading(T) as state:
                state.require_entity("person:p1", "subject")
            outcome.append(None)
        except BaseException as error:  # (the stores closed under this reader: any answer but a crash will do)
            outcome.append(error)

    reader = threading.Thread(target=read)
    reader.start()
    wait_until(lambda: bool(_folders()), 30, "the fold after the forget starts")
    started = time.monotonic()
    app.close()
    assert not _folders(), "close() returned while a fold thread still reads the log"
    assert time.monotonic() - started < 30  # (the fold stops at once when the stores are closing)
    reader.join(30)
    assert outcome, "the reader never returned"
