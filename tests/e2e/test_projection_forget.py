"""A running `noumena project` purges itself after a forget: the live file, the snapshot and the registered
Parquet exports are rebuilt from the log, and no forgotten marker is left in any of them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb

from infra.bootstrap import bootstrap
from infra.settings import Settings
from projections.files import ProjectionFiles
from tests.conftest import TickingClock
from tests.integration.test_forgetting import GONE, T, _every_file, _plant, _scan


def _wait_for_snapshot_at(path: Path, position: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with duckdb.connect(str(path), read_only=True) as con:
                if con.execute("SELECT position FROM projection_position").fetchall()[0][0] >= position:
                    return
        except duckdb.Error:
            pass
        time.sleep(0.1)
    raise AssertionError(f"the snapshot never reached position {position}")


def test_a_running_projector_rebuilds_itself_its_snapshot_and_the_exports_after_a_forget(tmp_path: Path) -> None:
    home, exports = tmp_path / "home", tmp_path / "exports"
    app = bootstrap(Settings(home=home, event_store="sqlite"), clock=TickingClock())
    _plant(app.service)
    files = ProjectionFiles(home)
    env = {**os.environ, "NOUMENA_HOME": str(home), "NOUMENA_EVENT_STORE": "sqlite",
           "NOUMENA_SNAPSHOT_INTERVAL": "0.2", "NOUMENA_PROJECTION_POLL_INTERVAL": "0.05"}
    noumena = str(Path(sys.executable).parent / "noumena")
    projector = subprocess.Popen([noumena, "project"], env=env, stderr=subprocess.PIPE)
    try:
        _wait_for_snapshot_at(files.snapshot, app.log.max_position())
        subprocess.run([noumena, "export", "--parquet", str(exports)], env=env, check=True, capture_output=True)
        assert "MARKER-ZHAO-NAME" in _scan(_every_file(home, exports), GONE)

        app.application.forgetting.forget(T, "person:zhao")  # the live file is held by the projector: it purges itself
        _wait_for_snapshot_at(files.snapshot, app.log.max_position())
        deadline = time.monotonic() + 30
        while _scan(_every_file(exports), GONE) and time.monotonic() < deadline:
            time.sleep(0.1)  # the exports are rewritten right after the snapshot
    finally:
        projector.send_signal(signal.SIGTERM)
        assert projector.wait(timeout=30) == 0, projector.stderr.read() if projector.stderr else ""
        app.close()
    assert _scan(_every_file(home, exports), GONE) == {}
    with duckdb.connect(str(files.snapshot), read_only=True) as con:
        labels = dict(con.execute("SELECT ref, label FROM entities").fetchall())
    assert labels["person:zhao"] == "[forgotten]" and labels["person:qian"] == "Qian KEEP-QIAN-NAME"
