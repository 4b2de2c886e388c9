"""Process-wide settings belong to the program: building noumena inside another program (a test, an application
that imports `bootstrap`) leaves its interpreter's collector as it was; the `noumena` entry point tunes it."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from pathlib import Path

from infra.bootstrap import bootstrap
from infra.settings import Settings

ROOT = Path(__file__).resolve().parents[2]


def test_bootstrap_leaves_the_embedding_programs_collector_thresholds_as_they_were(tmp_path):
    before = gc.get_threshold()
    gc.set_threshold(1234, 7, 9)
    try:
        app = bootstrap(Settings(home=tmp_path, event_store="sqlite"))
        app.close()
        assert gc.get_threshold() == (1234, 7, 9)
    finally:
        gc.set_threshold(*before)


def test_the_cli_entry_point_tunes_the_collector_for_a_long_lived_heap():
    probe = ("import gc, sys\n"
             "import api.cli\n"
             "sys.argv = ['noumena', '--help']\n"
             "try:\n    api.cli.main()\n"
             "except SystemExit:\n    pass\n"
             "print('THRESHOLD', gc.get_threshold())\n")
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert "THRESHOLD (5000, 10, 100)" in out.stdout, out.stderr


def test_the_cli_entry_point_runs_blas_on_one_thread_unless_the_operator_chose():
    probe = ("import os, sys\n"
             "import api.cli\n"
             "assert 'numpy' not in sys.modules, 'numpy loaded before main: the setting would come too late'\n"
             "sys.argv = ['noumena', '--help']\n"
             "try:\n    api.cli.main()\n"
             "except SystemExit:\n    pass\n"
             "print('THREADS', os.environ.get('OPENBLAS_NUM_THREADS'), os.environ.get('OMP_NUM_THREADS'))\n")
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")}
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env=env)
    assert "THREADS 1 1" in out.stdout, out.stderr
    chosen = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120,
                            env=env | {"OPENBLAS_NUM_THREADS": "2"})
    assert "THREADS 2 1" in chosen.stdout, chosen.stderr
