"""Analysts read while the projector writes: a second process opens the published snapshot read-only, again and
again, and runs the point-in-time macros, while a projector process follows a log that is being written."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import duckdb

from infra.bootstrap import bootstrap
from infra.settings import Settings
from projections.files import ProjectionFiles
from tests.conftest import TickingClock
from tests.projection_support import Workload, first_line

READER = r"""
import json, sys, time
import duckdb
path, seconds = sys.argv[1], float(sys.argv[2])
reads, positions, errors = 0, [], []
deadline = time.monotonic() + seconds
while time.monotonic() < deadline:
    try:
        con = duckdb.connect(path, read_only=True)
    except duckdb.IOException:
        time.sleep(0.02)  # not published yet
        continue
    try:
        positions.append(con.execute("SELECT position FROM projection_position").fetchall()[0][0])
        con.execute("SELECT count(*) FROM facts_as_of(now())").fetchall()
        con.execute("SELECT count(*) FROM facts_as_of(now(), valid_at := '2026-09-02 00:00+00')").fetchall()
        con.execute("SELECT count(*) FROM entity_neighbours_as_of('person:a', now())").fetchall()
        con.execute("SELECT count(*) FROM activation_as_of('agent:z', now())").fetchall()
        reads += 1
    except Exception as error:
        errors.append(repr(error))
    finally:
        con.close()
    time.sleep(0.05)
print(json.dumps({"reads": reads, "positions": positions, "errors": errors}))
"""


def _snapshot_position(path: Path) -> int:
    with duckdb.connect(str(path), read_only=True) as con:
        return con.execute("SELECT position FROM projection_position").fetchall()[0][0]


def test_a_reader_process_runs_the_macros_on_the_snapshot_while_the_projector_writes(tmp_path: Path) -> None:
    home = tmp_path / "home"
    app = bootstrap(Settings(home=home, event_store="sqlite"), clock=TickingClock())
    workload = Workload(random.Random(7))
    for command in workload.setup():
        workload.run(app.service, command)
    stop = threading.Event()

    def write() -> None:
        while not stop.is_set():
            workload.run(app.service, workload.next())
            time.sleep(0.002)

    writer = threading.Thread(target=write, daemon=True)
    files = ProjectionFiles(home)
    env = {**os.environ, "NOUMENA_HOME": str(home), "NOUMENA_EVENT_STORE": "sqlite",
           "NOUMENA_SNAPSHOT_INTERVAL": "0.3", "NOUMENA_PROJECTION_POLL_INTERVAL": "0.02"}
    bin_dir = Path(sys.executable).parent
    projector = subprocess.Popen([str(bin_dir / "noumena"), "project"], env=env, stderr=subprocess.PIPE)
    try:
        assert projector.stderr is not None
        assert b"projecting into" in first_line(projector)  # imports and bootstrap are done
        writer.start()
        reader = subprocess.run([sys.executable, "-c", READER, str(files.snapshot), "4"], capture_output=True,
                                text=True, timeout=60, check=True)
        stop.set()
        writer.join()
        seen = json.loads(reader.stdout)
        assert seen["errors"] == []
        assert seen["reads"] >= 5
        assert seen["positions"] == sorted(seen["positions"]) and len(set(seen["positions"])) > 1

        asked = subprocess.run([str(bin_dir / "noumena"), "snapshot"], env=env, capture_output=True, text=True,
                               timeout=60, check=True)
        assert "running projector" in asked.stdout
        assert _snapshot_position(files.snapshot) == app.log.max_position()
    finally:
        stop.set()
        projector.send_signal(signal.SIGTERM)
        assert projector.wait(timeout=30) == 0, projector.stderr.read() if projector.stderr else ""
        app.close()
