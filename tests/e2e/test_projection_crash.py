"""Crash safety: a projector process killed with SIGKILL at random points while events flow, restarted again
and again, ends with exactly the tables of a clean rebuild (same content hash: nothing missing, nothing twice)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import duckdb
import pytest

from infra.bootstrap import bootstrap
from infra.settings import Settings
from projections.files import ProjectionFiles
from projections.projector import Projector
from projections.replay import replay
from tests.conftest import TickingClock
from tests.projection_support import Workload, content_hashes, first_line, table_differences

pytestmark = pytest.mark.slow  # minutes, not seconds (`-m 'not slow'` for a quick loop)

KILLS = 6


def _writer(app, workload: Workload, stop: threading.Event) -> None:  # type: ignore[no-untyped-def]
    while not stop.is_set():
        workload.run(app.service, workload.next())
        time.sleep(0.001)


def _position(path: Path) -> int:
    con = duckdb.connect(str(path), read_only=True)
    try:
        return con.execute("SELECT position FROM projection_position").fetchall()[0][0]
    except duckdb.CatalogException:
        return 0  # killed while creating the schema: that transaction never committed
    finally:
        con.close()


def test_a_projector_killed_at_random_points_ends_equal_to_a_clean_rebuild(tmp_path: Path) -> None:
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    home = tmp_path / "home"
    app = bootstrap(Settings(home=home, event_store="sqlite"), clock=TickingClock())
    workload = Workload(random.Random(seed + 1))
    for command in workload.setup():
        workload.run(app.service, command)
    stop = threading.Event()
    writer = threading.Thread(target=_writer, args=(app, workload, stop), daemon=True)
    writer.start()
    files = ProjectionFiles(home)
    env = {**os.environ, "NOUMENA_HOME": str(home), "NOUMENA_EVENT_STORE": "sqlite",
           "NOUMENA_SNAPSHOT_INTERVAL": "0.2", "NOUMENA_PROJECTION_POLL_INTERVAL": "0.02"}
    noumena = str(Path(sys.executable).parent / "noumena")
    positions = []
    try:
        for _ in range(KILLS):
            env["NOUMENA_PROJECTION_BATCH_SIZE"] = str(rng.choice([3, 40, 300, 2000]))
            process = subprocess.Popen([noumena, "project"], env=env, stdout=subprocess.DEVNULL,
                                       stderr=subprocess.PIPE)
            assert process.stderr is not None
            started = first_line(process)  # "projecting into ...": imports and bootstrap are done
            assert b"projecting into" in started, started + process.stderr.read()
            time.sleep(rng.uniform(0.2, 1.5))
            assert process.poll() is None, process.stderr.read().decode()
            process.send_signal(signal.SIGKILL)
            process.wait()
            if files.live.exists():
                positions.append(_position(files.live))
    finally:
        stop.set()
        writer.join()

    print(f"seed {seed}: positions after each kill {positions}, log {app.log.max_position()}")
    assert positions and positions[-1] > 0, f"the projector never got anywhere (seed {seed})"
    assert positions == sorted(positions), f"the stored position went backwards: {positions} (seed {seed})"
    with Projector(app.log, files.live) as projector:
        projector.catch_up()
        live = content_hashes(projector.con)
        assert projector.position == app.log.max_position()
        count, distinct = projector.con.execute(
            "SELECT count(*), count(DISTINCT position) FROM clock").fetchall()[0]
        assert count == distinct == app.log.max_position()
        clean = replay(app.log, tmp_path / "clean.duckdb")
        with duckdb.connect(str(clean.path), read_only=True) as con:
            rebuilt = content_hashes(con)
        assert rebuilt == live, f"seed {seed}; rows that differ (here: the killed projector's):\n" + \
            table_differences(projector.con, clean.path)
    if files.snapshot.exists():  # whatever was last published is a whole, usable database
        with duckdb.connect(str(files.snapshot), read_only=True) as con:
            con.execute("SELECT count(*) FROM facts_as_of(now())").fetchall()
    app.close()
