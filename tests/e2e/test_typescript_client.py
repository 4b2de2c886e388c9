"""The TypeScript client (clients/typescript): its types compile (`tsc --noEmit`), the types generated from the
OpenAPI document are up to date (the document and the generated file regenerated and compared, by their types), and its
`node --test` suite passes against a served noumena (every route, typed errors, read-your-writes, retries
against a stand-in answering 503 then 200)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.api_support import ADMIN_KEY, Server, api_server  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]
CLIENT = ROOT / "clients" / "typescript"
BIN = CLIENT / "node_modules" / ".bin"
PROSE = {"description", "summary", "examples", "example"}


@pytest.fixture(scope="module")
def tools() -> Path:
    """The client's pinned tools (make install runs `npm ci` there; so does this, when they are missing)."""
    if not (BIN / "tsc").exists():
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--silent"], cwd=CLIENT, check=True, timeout=600)
    return BIN


def _run(*command: str | Path, env: dict[str, str] | None = None, timeout: int = 300
         ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(c) for c in command], cwd=CLIENT, capture_output=True, text=True, timeout=timeout,
                          env=env)


def test_the_types_compile(tools: Path) -> None:
    checked = _run(tools / "tsc", "-p", "tsconfig.json", "--noEmit")
    assert checked.returncode == 0, checked.stdout + checked.stderr


def _shape(document: Any) -> Any:
    """The document without its prose (descriptions, summaries, examples): what the types are made of."""
    if isinstance(document, dict):
        return {k: _shape(v) for k, v in document.items() if k not in PROSE}
    if isinstance(document, list):
        return [_shape(v) for v in document]
    return document


def _code(types: str) -> list[str]:
    """Generated TypeScript without its comments (the descriptions, as JSDoc), as tokens."""
    return re.sub(r"/\*\*.*?\*/|^\s*//.*$", "", types, flags=re.S | re.M).split()


def test_the_generated_types_are_those_of_the_current_openapi_document(tools: Path, tmp_path: Path) -> None:
    """Compared by their types: a change of wording in the API's descriptions alone does not make them stale."""
    document = tmp_path / "openapi.json"
    made = subprocess.run([sys.executable, str(CLIENT / "scripts" / "openapi.py"), str(document)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stderr
    assert _shape(json.loads(document.read_text())) == _shape(json.loads((CLIENT / "openapi.json").read_text())), \
        "clients/typescript/openapi.json is out of date (the API changed): run make clients-types"
    generated = tmp_path / "schema.ts"
    ran = _run(tools / "openapi-typescript", CLIENT / "openapi.json", "--output", generated)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert _code(generated.read_text()) == _code((CLIENT / "src" / "schema.ts").read_text()), \
        "clients/typescript/src/schema.ts is out of date: run make clients-types"


def test_the_node_suite_passes_against_a_served_noumena(tools: Path, api_server: Server,  # noqa: F811
                                                        tmp_path: Path) -> None:
    build = tmp_path / "build"
    shutil.copytree(CLIENT, build, ignore=shutil.ignore_patterns("node_modules", "dist"))
    (build / "node_modules").symlink_to(CLIENT / "node_modules")
    built = subprocess.run([str(tools / "tsc"), "-p", "tsconfig.json"], cwd=build, capture_output=True, text=True,
                           timeout=300)
    assert built.returncode == 0, built.stdout + built.stderr
    env = {**os.environ, "NOUMENA_URL": api_server.url, "NOUMENA_ADMIN_KEY": ADMIN_KEY}
    ran = subprocess.run(["node", "--test", "test/"], cwd=build, capture_output=True, text=True, timeout=600,
                         env=env)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert re.search(r"^# pass 4$", ran.stdout, re.M) and re.search(r"^# fail 0$", ran.stdout, re.M), ran.stdout
