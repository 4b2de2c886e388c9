"""`make lint`: nothing but the application reaches noumena's state except through the application's use cases.

import-linter sees imports; this sees attribute reads. Any module of the tree (an entry point, a consumer, the
runtime, a projection, the demo) that reads `.service` or `.log` off another object — the container (`Noumena`)
or the application — walks around the use cases (and their checks) without importing anything, so the contracts
cannot catch it. Exempt: the application itself (`domain/application/`, whose use cases are made of its service
and log), the composition root (`infra/bootstrap.py`, which builds them), and the tests (which set up and inspect
stores as specifications must; `tests/` is not checked). An object's own attributes (`self.log`) and a module's
functions (`math.log`, `np.log`, a logger's `log.warning`) are no such reads and are not reported."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHECKED = ("api", "consumers", "demo", "domain", "infra", "projections")
EXEMPT = ("domain/application/", "infra/bootstrap.py")
FORBIDDEN = {"service", "log"}
OWN = {"self", "cls"}


def _modules(tree: ast.Module) -> set[str]:
    """The names a module binds to imported modules (`import math`, `import numpy as np`)."""
    return {(alias.asname or alias.name).split(".")[0]
            for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}


def findings(root: Path = ROOT) -> list[str]:
    found = []
    for folder in CHECKED:
        for path in sorted((root / folder).rglob("*.py")):
            where = path.relative_to(root).as_posix()
            if where.startswith(EXEMPT):
                continue
            tree = ast.parse(path.read_text(), str(path))
            modules = _modules(tree)
            for node in ast.walk(tree):
                if not (isinstance(node, ast.Attribute) and node.attr in FORBIDDEN and isinstance(node.ctx, ast.Load)):
                    continue
                if isinstance(node.value, ast.Name) and node.value.id in OWN | modules:
                    continue
                found.append(f"{where}:{node.lineno}: reads .{node.attr} (call a use case of the application instead)")
    return found


if __name__ == "__main__":
    problems = findings()
    print("\n".join(problems) or "nothing outside the application and the composition root reads .service or .log")
    sys.exit(1 if problems else 0)
