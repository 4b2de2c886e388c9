"""`make lint`: entry points and consumers reach noumena only through the application's use cases.

import-linter sees imports; this sees attribute reads. A route, a CLI command, an MCP tool or a consumer that reads
`.service` or `.log` off the container or the application walks around the use cases (and their checks) without
importing anything, so the contracts cannot catch it. Reads of a logger (`log.warning`) are calls on a module-level
name, not attribute reads of another object, and are not affected."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHECKED = ("api", "consumers")
FORBIDDEN = {"service", "log"}
STORY = {"demo/run.py", "demo/perspective_story.py"}
"""The demo tells what the log holds at each moment of the seed's story, reading the log as an analyst would;
it serves no caller."""


def findings(root: Path = ROOT) -> list[str]:
    found = []
    for folder in CHECKED:
        for path in sorted((root / folder).rglob("*.py")):
            if str(path.relative_to(root)) in STORY:
                continue
            tree = ast.parse(path.read_text(), str(path))
            for node in ast.walk(tree):
                if isinstance(node, ast.Attribute) and node.attr in FORBIDDEN and isinstance(node.ctx, ast.Load):
                    found.append(f"{path.relative_to(root)}:{node.lineno}: reads .{node.attr} "
                                 "(call a use case of the application instead)")
    return found


if __name__ == "__main__":
    problems = findings()
    print("\n".join(problems) or "entry points and consumers read no .service or .log")
    sys.exit(1 if problems else 0)
