"""A forget's work over the whole log, in a process of its own (`python -m infra.runtime.purge_worker`): rebuilding
the read model without forgotten content (started by infra/runtime/serving.py after a forget).

The rebuild decodes and opens every event of the log in Python; in the server's process it would compete with
the requests for the interpreter lock for as long as it runs (seconds per 100,000 events). Here it only takes a
core no request wants (the background class: infra/runtime/priority.py). The worker reads the server's Settings
as JSON on stdin (with `out`, the file to write), replays the log into `out`, republishes the snapshot and
rewrites the exports from it, and prints `{"position": N}`.

The priority is lowered before anything else runs: the imports of the stores and projections (numpy, DuckDB,
polars, pydantic: costly to import) come after it, so not even the worker's start competes with the requests.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from infra.settings import Settings


def settings_as_json(settings: Settings, out: Path) -> str:
    """What the worker needs to open the same stores as `settings` (secrets included: it goes through a pipe), and
    the file to rebuild into (`out`)."""
    from infra.settings import for_another_process

    return json.dumps({"settings": for_another_process(settings), "out": str(out)})


def run_worker(settings: Settings, out: Path) -> dict[str, Any]:
    """Run the worker on one job and return what it printed (an error naming its exit code and stderr if it failed)."""
    import subprocess

    from domain.errors import InfrastructureError

    done = subprocess.run([sys.executable, "-m", "infra.runtime.purge_worker"], input=settings_as_json(settings, out),
                          capture_output=True, text=True, timeout=3600, check=False)
    if done.returncode != 0:
        raise InfrastructureError(f"purge worker exited with {done.returncode}: {done.stderr[-2000:]}")
    answer: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return answer


def main() -> int:
    from infra.runtime.priority import lower_to_background

    lower_to_background()
    # (imported after the priority is lowered: see the module's docstring)
    from infra.adapters.eventlog import EventsourcingLog
    from infra.settings import Settings
    from projections.purge import build_purged

    request = json.loads(sys.stdin.read())
    settings = Settings(**request["settings"])
    log = EventsourcingLog(settings.event_store_env(), settings.key_store())
    try:
        answer = {"position": build_purged(log, settings.home, Path(request["out"]), settings.projection_batch_size)}
    finally:
        log.close()
    print(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main())
