"""`noumena forget` (a subprocess, as an operator runs it) prints the receipt of what it erased."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.integration.test_forgetting_receipt import T


def test_the_cli_prints_the_receipt(tmp_path):
    env = {"NOUMENA_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    root = Path(__file__).resolve().parents[2]
    script = ("from infra.bootstrap import bootstrap\nfrom infra.settings import Settings\nfrom pathlib import Path\n"
              "from tests.integration.test_forgetting_receipt import _plant\n"
              f"app = bootstrap(Settings(home=Path({str(tmp_path)!r})))\n_plant(app)\napp.close()\n")
    subprocess.run([sys.executable, "-c", script], cwd=root, check=True, env=env)
    done = subprocess.run([sys.executable, "-m", "api", "forget", "person:x", "--tenant", T], cwd=root,
                          env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "receipt fgt-" in done.stdout and "events affected: 5" in done.stdout
    assert "erased with it: session:s-x" in done.stdout
