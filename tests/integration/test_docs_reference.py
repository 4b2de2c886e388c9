"""What the documentation names exists in the code: every `noumena ...` command with its options, every HTTP route,
every `make` target; and every route the API serves is documented. (The examples themselves run in
tests/e2e/test_docs_examples.py; the settings page is generated from the settings model.)"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from typer.main import get_command

from api.cli import app as cli_app
from tests.e2e.test_docs_examples import DOCUMENTS, ROOT, blocks_of

INLINE = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
ENV_PREFIX = re.compile(r"^(?:[A-Z_][A-Z0-9_]*=\S*\s+)+")
ROUTE = re.compile(r"^(GET|POST|PUT|PATCH|DELETE) (/[^\s?`]*)")
PLACEHOLDER = re.compile(r"\{[^}]*\}")


def _spans(without: re.Pattern[str] | None = None) -> list[tuple[str, str]]:
    """(where, text) for every inline code span and every line of a code block, in README.md and docs/*.md (less
    the text `without` matches, outside code blocks)."""
    found = []
    for document in DOCUMENTS:
        text = document.read_text(encoding="utf-8")
        name = str(document.relative_to(ROOT))
        without_blocks = text
        for block in blocks_of(document):
            found += [(f"{block.where}", line.strip()) for line in block.body.splitlines()]
            without_blocks = without_blocks.replace(block.body, "")
        if without is not None:
            without_blocks = without.sub("", without_blocks)
        found += [(name, span.strip()) for span in INLINE.findall(without_blocks)]
    return found


def _commands() -> list[tuple[str, str]]:
    found = []
    for where, text in _spans():
        for part in re.split(r"\$\(|\|\s|&&|;", text):
            part = ENV_PREFIX.sub("", part.strip())
            if part.startswith("noumena ") or part == "noumena":
                found.append((where, part))
    return found


def _resolve(words: list[str]) -> tuple[Any, list[str]]:
    """The command these words name, and the words left after it."""
    command: Any = get_command(cli_app)
    rest = list(words)
    while rest and _is_group(command) and rest[0] in command.commands:
        command = command.commands[rest.pop(0)]
    return command, rest


def _is_group(command: object) -> bool:
    return hasattr(command, "commands")  # click's Group, or typer's own copy of it


def _options(command: Any) -> set[str]:
    return {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}


def test_every_noumena_command_the_docs_name_exists_with_the_options_they_give_it() -> None:
    commands = _commands()
    assert len(commands) > 40, "the docs name the commands they describe"
    wrong = []
    for where, text in commands:
        words = text.split()[1:]
        command, rest = _resolve(words)
        if _is_group(command) and rest and "|" in rest[0]:  # `noumena dlq list|replay`
            missing = [w for w in rest[0].split("|") if re.fullmatch(r"[a-z][a-z-]*", w) and w not in command.commands]
            wrong += [f"{where}: `{text}`: no subcommand {w!r}" for w in missing]
            continue
        if _is_group(command):
            if rest and re.fullmatch(r"[a-z][a-z-]*", rest[0]):
                wrong.append(f"{where}: `{text}`: no command {rest[0]!r} under {command.name or 'noumena'!r}")
            continue
        known = _options(command)
        for token in rest:
            option = re.match(r"--[a-z][a-z-]*", token.strip("[]"))
            if option and option[0] not in known:
                wrong.append(f"{where}: `{text}`: `noumena {' '.join(words[:len(words) - len(rest)])}` has no "
                             f"option {option[0]}")
    assert not wrong, "\n".join(wrong)


def _served_routes() -> set[tuple[str, str]]:
    """The routes of the app's OpenAPI document (the one `noumena serve` publishes at /v1/openapi.json)."""
    from api.app import create_app
    from infra.bootstrap import bootstrap
    from infra.settings import Settings

    noumena = bootstrap(Settings(event_store="popo", home=Path("/nonexistent-docs-test-home")))
    try:
        paths = create_app(noumena, start_projector=False, start_kafka=False).openapi()["paths"]
        return {(method.upper(), PLACEHOLDER.sub("{}", path)) for path, methods in paths.items() for method in methods}
    finally:
        noumena.close()


def _documented_routes() -> dict[tuple[str, str], str]:
    found = {}
    for where, text in _spans():
        match = ROUTE.match(text)
        if match:
            found.setdefault((match[1], PLACEHOLDER.sub("{}", match[2].rstrip("/") or "/")), where)
    return found


def test_every_route_the_docs_name_is_served_and_every_served_route_is_documented() -> None:
    served, documented = _served_routes(), _documented_routes()
    assert len(served) > 20
    unknown = [f"{where}: {method} {path}" for (method, path), where in sorted(documented.items())
               if (method, path) not in served]
    assert not unknown, "the docs name routes the API does not serve:\n" + "\n".join(unknown)
    undocumented = sorted(f"{method} {path}" for method, path in served - documented.keys()
                          if path.startswith(("/v1/", "/healthz", "/readyz", "/metrics")))
    assert not undocumented, "routes no page documents (docs/http-mcp.md lists them):\n" + "\n".join(undocumented)


def test_every_make_target_the_docs_name_exists() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    targets = set(re.findall(r"^([a-z][a-z-]*):", makefile, re.MULTILINE))
    named = {(where, word) for where, text in _spans() for word in re.findall(r"^make ([a-z][a-z-]*)", text)}
    assert len(named) >= 5
    missing = sorted(f"{where}: make {target}" for where, target in named if target not in targets)
    assert not missing, "\n".join(missing)


REPO_PATH = re.compile(r"(?<![\w<$./-])((?:domain|projections|consumers|api|demo|infra|tests|docs|ui)/[\w.*/-]*[\w*])")


HISTORY = re.compile(r"<!--\s*history\s*-->.*?<!--\s*/history\s*-->", re.DOTALL)


def test_every_file_of_the_repository_the_docs_name_exists_unless_it_is_made_by_a_build() -> None:
    """Text between `<!-- history -->` and `<!-- /history -->` (where things used to be) is not checked."""
    named = {(where, path) for where, text in _spans(without=HISTORY) for path in REPO_PATH.findall(text)}
    assert len(named) > 30
    generated = set(subprocess.run(["git", "check-ignore", "--no-index", "--stdin"], cwd=ROOT, text=True,
                                   input="\n".join(f"{p}\n{p}/" for _, p in named), capture_output=True
                                   ).stdout.split())  # `dir/` patterns match a path given with its slash
    generated |= {p.rstrip("/") for p in generated}
    missing = sorted(f"{where}: {path}" for where, path in named if path not in generated and not any(ROOT.glob(path)))
    assert not missing, "the docs name files that are not in the repository:\n" + "\n".join(missing)


@pytest.mark.parametrize("text", ["noumena sql", "noumena consolidation list"])
def test_a_command_is_resolved_through_its_groups(text: str) -> None:
    command, rest = _resolve(text.split()[1:])
    assert not _is_group(command) and rest == []


def test_the_readme_is_read_in_five_minutes() -> None:
    """The README is at most 10 KB; the depth lives in docs/."""
    size = len((ROOT / "README.md").read_bytes())
    assert size <= 10 * 1024, f"README.md is {size} bytes; move the depth into a docs/ page"
