"""`make lint`: no class anywhere in the tree has more than 15 public methods.

A class that grows past that is doing several jobs (the application before its feature services, an index that
also answered for its parts); the limit makes the split happen when the class grows rather than in a later
clean-up. Public means defined in the class body with a name not starting with `_`, properties included, since
each is a way in that readers must learn. Every Python file git would track counts: the packages, the clients and
the tests alike."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 15
SKIPPED = {".venv", "node_modules", ".infra", ".git", "site", "build", "dist"}


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.py") if not SKIPPED & set(p.relative_to(root).parts))


def findings(root: Path = ROOT, limit: int = LIMIT) -> list[str]:
    found = []
    for path in _files(root):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            public = [f.name for f in node.body
                      if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef) and not f.name.startswith("_")]
            if len(set(public)) > limit:
                found.append(f"{path.relative_to(root).as_posix()}:{node.lineno}: class {node.name} has "
                             f"{len(set(public))} public methods (at most {limit}: split it by job)")
    return found


if __name__ == "__main__":
    problems = findings()
    print("\n".join(problems) or f"no class has more than {LIMIT} public methods")
    sys.exit(1 if problems else 0)
