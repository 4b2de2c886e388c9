"""Write the served API's OpenAPI document to clients/typescript/openapi.json (what src/schema.d.ts is generated
from): `python clients/typescript/scripts/openapi.py [path]`. Built in process, nothing served."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))


def document() -> str:
    from api.app import create_app
    from infra.bootstrap import bootstrap
    from infra.settings import Settings

    with tempfile.TemporaryDirectory() as home:
        noumena = bootstrap(Settings(home=Path(home), event_store="sqlite"))
        try:
            schema = create_app(noumena, start_projector=False, start_kafka=False).openapi()
        finally:
            noumena.close()
    return json.dumps(schema, indent=1, ensure_ascii=False, sort_keys=True) + "\n"


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "clients" / "typescript" / "openapi.json"
    target.write_text(document())
