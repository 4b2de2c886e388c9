"""Authorization is decided once, in the application: every use case an entry point calls takes the caller first
(`who`: a `Caller`, or a tenant name for a tenant-wide one), and the HTTP routes and MCP tools pass the caller on
instead of taking its tenant or agents apart (which is how a check gets skipped)."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

from domain.application.application import Application

ROOT = Path(__file__).resolve().parents[2]
NOT_A_CALLERS_USE_CASE = {
    "create_tenant": "the admin key's (it has no tenant yet)",
    "tenant_exists": "the admin key's, before it issues a key",
    "fresh": "called by the read use cases themselves, after they decided",
}


def test_every_use_case_that_works_in_a_tenant_takes_the_caller_first() -> None:
    wrong = []
    for name, method in inspect.getmembers(Application, inspect.isfunction):
        if name.startswith("_") or name in NOT_A_CALLERS_USE_CASE:
            continue
        parameters = list(inspect.signature(method).parameters.values())[1:]
        if parameters and parameters[0].name in ("tenant", "who"):
            annotation = str(parameters[0].annotation)
            if parameters[0].name != "who" or "Caller" not in annotation:
                wrong.append(f"{name}({parameters[0].name}: {annotation})")
    assert not wrong, f"use cases taking a tenant instead of the caller: {wrong}"


def test_routes_and_tools_pass_the_caller_on_without_taking_it_apart() -> None:
    found = []
    for path in [*sorted((ROOT / "api" / "routes").glob("*.py")), ROOT / "api" / "mcp_server.py"]:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Attribute) and node.attr in ("tenant", "agents") and (
                    isinstance(node.value, ast.Name) and node.value.id == "caller"
                    or isinstance(node.value, ast.Call) and getattr(node.value.func, "id", None) == "caller"):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: caller.{node.attr}")
    assert not found, found
