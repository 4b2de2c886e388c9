"""Rebuilding the read model without forgotten content in a process of its own (`python -m infra.purge_worker`,
started by infra/serving.py after a forget).

The rebuild decodes and opens every event of the log in Python; in the server's process it would compete with
the requests for the interpreter lock for as long as it runs (seconds per 100,000 events). Here it only competes
for a core, at a lower priority (`nice` 10). The worker reads the server's Settings as JSON on stdin (with `out`,
the file to write), replays the log into `out`, republishes the snapshot and rewrites the exports from it, and
prints `{"position": N}`.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from infra.eventlog import EventsourcingLog
from infra.settings import Settings
from projections.purge import build_purged


def settings_as_json(settings: Settings, out: Path) -> str:
    """What the worker needs to open the same stores as `settings` (secrets included: it goes through a pipe)."""
    values: dict[str, Any] = {}
    for name in type(settings).model_fields:
        value = getattr(settings, name)
        values[name] = (value.get_secret_value() if isinstance(value, SecretStr)
                        else str(value) if isinstance(value, Path) else value)
    return json.dumps({"settings": values, "out": str(out)})


NICENESS = 10
"""The worker runs at a lower CPU priority than the server: on a busy machine the requests come first."""


def main() -> int:
    if hasattr(os, "nice"):
        os.nice(NICENESS)
    request = json.loads(sys.stdin.read())
    settings = Settings(**request["settings"])
    log = EventsourcingLog(settings.event_store_env(), settings.key_store())
    try:
        position = build_purged(log, settings.home, Path(request["out"]), settings.projection_batch_size)
    finally:
        log.close()
    print(json.dumps({"position": position}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
