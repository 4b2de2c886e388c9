"""The documentation's examples run, as they are written, against real components.

Every fenced ```python and ```sh block of README.md and docs/*.md is an example. The blocks of one document
become one bash script, in the order they appear, run in an empty temporary directory with `.venv/bin` first on
the PATH, so a later block sees what an earlier one wrote (files, a `noumena serve` started with `&`, exported
variables). A python block runs as its own process (`python - <<EOF`): each is complete on its own, as a reader
would paste it. A ```ts block is an ES module run by `node` (so it is written in the JavaScript subset of
TypeScript), with the TypeScript client built from clients/typescript installed beside it as `noumena-client`.
```json blocks must parse.

A block preceded by `<!-- not run: REASON -->` is only shown (`make test` itself, a cluster address). The runner
changes a few things in the text, so that the documents can show the values a reader would use while the test
never touches another process's port, topic or schema:

- the API ports `8000` and `8001` become free ports;
- `localhost:9092` becomes the test broker (`NOUMENA_KAFKA_BOOTSTRAP`, started by `infra/scripts/kafka.sh`);
- the topic `noumena.session-events` (and so its `.dlq`) becomes a topic of this run, and the consumer group one
  of its own (the environment's `NOUMENA_KAFKA_TOPIC` / `_GROUP` say the same to the commands);
- the PostgreSQL schema `noumena_demo` becomes a schema of this run. The environment keeps `NOUMENA_PG_HOST`,
  `_PORT`, `_USER`, `_PASSWORD` and `_DBNAME` (the server `infra/scripts/postgres.sh` started); every other `NOUMENA_`
  variable is removed, so the examples see the defaults.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.api_support import free_port

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<lang>[\w-]*)[^\n]*\n(?P<body>.*?)^(?P=indent)```[ \t]*$",
                   re.MULTILINE | re.DOTALL)
NOT_RUN = re.compile(r"<!--\s*not run:\s*(?P<reason>[^>]*?)\s*-->\s*$")
RUNNABLE = {"python", "sh", "ts"}
TS_CLIENT = ROOT / "clients" / "typescript"
KAFKA_ADDRESS = "localhost:9092"
DEFAULT_TOPIC = "noumena.session-events"
PG_SCHEMA = "noumena_demo"
API_PORT = re.compile(r"\b800[01]\b")
KEPT = {f"NOUMENA_PG_{name}" for name in ("HOST", "PORT", "USER", "PASSWORD", "DBNAME")}


@dataclass(frozen=True)
class Block:
    document: Path
    line: int
    lang: str
    body: str
    not_run: str | None

    @property
    def where(self) -> str:
        name = self.document.relative_to(ROOT) if self.document.is_relative_to(ROOT) else self.document.name
        return f"{name}:{self.line}"


def blocks_of(document: Path) -> list[Block]:
    text = document.read_text(encoding="utf-8")
    found = []
    for match in FENCE.finditer(text):
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = NOT_RUN.search(before)
        indent = match["indent"]
        body = "\n".join(line[len(indent):] if line.startswith(indent) else line
                         for line in match["body"].split("\n"))
        found.append(Block(document, text.count("\n", 0, match.start()) + 1, match["lang"], body,
                           marker["reason"] if marker else None))
    return found


def script_of(blocks: list[Block]) -> str:
    lines = ["set -euo pipefail"]
    for number, block in enumerate(blocks):
        if block.lang not in RUNNABLE or block.not_run is not None:
            continue
        lines.append(f"echo '>>> {block.where}' >&2")
        if block.lang == "sh":
            lines.append(block.body)
        elif block.lang == "ts":
            lines += [f"cat > example_{number}.mjs <<'NOUMENA_DOCS_TS_{number}'", block.body,
                      f"NOUMENA_DOCS_TS_{number}", f"node example_{number}.mjs"]
        else:
            lines += [f"python - <<'NOUMENA_DOCS_PY_{number}'", block.body, f"NOUMENA_DOCS_PY_{number}"]
    return "\n".join(lines) + "\n"


def _install_typescript_client(directory: Path) -> None:
    """The TypeScript client, compiled from its sources into `directory`/node_modules/noumena-client, as `npm install`
    would put it there (make install fetched its pinned compiler)."""
    package = directory / "node_modules" / "noumena-client"
    package.mkdir(parents=True)
    (package / "package.json").write_text((TS_CLIENT / "package.json").read_text())
    built = subprocess.run([str(TS_CLIENT / "node_modules" / ".bin" / "tsc"), "-p", str(TS_CLIENT / "tsconfig.json"),
                            "--outDir", str(package / "dist")], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stdout + built.stderr


def _kafka_bootstrap() -> str:
    from tests.kafka_support import kafka_bootstrap

    return kafka_bootstrap()


def _needs_kafka(document: Path) -> bool:
    return KAFKA_ADDRESS in document.read_text(encoding="utf-8")


def _needs_postgres(document: Path) -> bool:
    return "NOUMENA_EVENT_STORE=postgres" in document.read_text(encoding="utf-8")


def _params() -> list[object]:
    return [pytest.param(d, id=str(d.relative_to(ROOT)),
                         marks=([pytest.mark.kafka] if _needs_kafka(d) else [])
                         + ([pytest.mark.postgres] if _needs_postgres(d) else []))
            for d in DOCUMENTS]


@pytest.mark.parametrize("document", _params())
def test_the_examples_of_a_document_run_as_written(document: Path, tmp_path: Path) -> None:
    blocks = blocks_of(document)
    for block in blocks:
        if block.lang == "json" and block.not_run is None:
            try:
                json.loads(block.body)
            except json.JSONDecodeError as error:
                pytest.fail(f"{block.where}: the json block does not parse: {error}")
        if block.not_run is not None:
            assert block.not_run, f"{block.where}: say why the block is not run"
    runnable = [b for b in blocks if b.lang in RUNNABLE and b.not_run is None]
    if not runnable:
        return
    ports: dict[str, str] = {}
    script = API_PORT.sub(lambda m: ports.setdefault(m[0], str(free_port())), script_of(blocks))
    script = script.replace(PG_SCHEMA, f"docs_{uuid.uuid4().hex[:12]}")
    env = {k: v for k, v in os.environ.items() if not k.startswith("NOUMENA_") or k in KEPT}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(ROOT)
    if _needs_kafka(document):
        topic = f"noumena-docs.{uuid.uuid4().hex[:10]}"
        bootstrap = _kafka_bootstrap()
        script = script.replace(KAFKA_ADDRESS, bootstrap).replace(DEFAULT_TOPIC, topic)
        env |= {"NOUMENA_KAFKA_TOPIC": topic, "NOUMENA_KAFKA_DLQ_TOPIC": f"{topic}.dlq",
                "NOUMENA_KAFKA_GROUP": f"{topic}.group"}
    if any(block.lang == "ts" for block in runnable):
        _install_typescript_client(tmp_path)
    (tmp_path / "example.sh").write_text(script, encoding="utf-8")
    log = tmp_path / "example.log"
    with log.open("w") as out:  # a file, not a pipe: a server started with `&` would hold a pipe open
        process = subprocess.Popen(["bash", str(tmp_path / "example.sh")], cwd=tmp_path, env=env, stdout=out,
                                   stderr=subprocess.STDOUT, start_new_session=True)
        try:
            returncode: int | str = process.wait(timeout=300)
        except subprocess.TimeoutExpired:
            returncode = "over 300 s"
        finally:  # the script's process group holds whatever it started with `&`
            try:
                os.killpg(process.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            process.wait()
    output = log.read_text(errors="replace")
    assert returncode == 0, f"{document.name}'s examples failed ({returncode}; the last '>>>' names the block):\n" \
                            f"{output[-6000:]}"


def test_the_runner_finds_the_blocks_and_says_where_they_are(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("intro\n\n```sh\necho one\n```\n\n<!-- not run: needs a cluster -->\n```sh\nexit 1\n```\n\n"
                    "- a list\n\n    ```python\n    print('indented')\n    ```\n", encoding="utf-8")
    found = blocks_of(page)
    assert [(b.line, b.lang, b.body.strip(), b.not_run) for b in found] == [
        (3, "sh", "echo one", None), (8, "sh", "exit 1", "needs a cluster"),
        (14, "python", "print('indented')", None)]
    script = script_of(found)
    assert "exit 1" not in script and "print('indented')" in script
