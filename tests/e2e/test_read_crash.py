"""What a crash loses of the uses served reads made: only those held since the last flush, never a
fact; the evidence of the reads is kept. A real process serves perspectives and dies without a clean shutdown."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from domain.activation import Tier
from infra.bootstrap import bootstrap
from infra.settings import Settings
from tests.integration.test_read_growth import T, _org, state_uses

ROOT = Path(__file__).resolve().parents[2]


def test_a_crash_loses_only_the_uses_not_yet_flushed(tmp_path: Path) -> None:
    home = tmp_path / "home"
    settings_ = Settings(home=home, event_store="sqlite", embedder="none")
    noumena = bootstrap(settings_)
    facts = _org(noumena.application)
    written = noumena.log.max_position()
    noumena.close()
    script = (
        "import os, sys\n"
        "from infra.bootstrap import bootstrap\n"
        "from infra.settings import Settings\n"
        f"n = bootstrap(Settings(home={str(home)!r}, event_store='sqlite', embedder='none'))\n"
        "for a in range(3):\n"
        f"    p = n.application.reading.perspective({T!r}, f'agent:a{{a}}')\n"
        "print(p.perspective_id, n.recalls.held, flush=True)\n"
        "os._exit(9)  # no clean shutdown\n"
    )
    crashed = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True,
                             timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert crashed.returncode == 9, crashed.stderr
    perspective_id, held = crashed.stdout.split()
    assert int(held) > 0
    again = bootstrap(settings_)
    try:
        assert again.log.max_position() == written  # the held uses are gone; no fact is
        state = again.service.ontology(T)
        assert {f for ids in facts.values() for f in ids} <= set(state.facts) and state.recall_uses == {}
        assert again.application.reading.explain(T, perspective_id).agent == "agent:a2"  # its evidence was kept
        served = again.application.reading.perspective(T, "agent:a0")
        again.application.reading.flush_recalls()
        assert set(state_uses(again)) == set(served.fact_ids(Tier.FULL, Tier.GIST))
    finally:
        again.close()


