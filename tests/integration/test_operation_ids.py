"""The OpenAPI document's operationIds are a public contract (generated clients name their methods after them):
they match the list checked in beside this test, so renaming one, or adding a route without naming it in
api/operation_ids.py, fails here until the list is changed on purpose."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from api.app import create_app
from infra.bootstrap import bootstrap
from infra.settings import Settings

CHECKED_IN = Path(__file__).with_name("operation_ids.txt")


@pytest.fixture(scope="module")
def document(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    noumena = bootstrap(Settings(home=tmp_path_factory.mktemp("openapi") / "home", event_store="sqlite"))
    try:
        return dict(create_app(noumena, start_projector=False, start_kafka=False).openapi())
    finally:
        noumena.close()


def _operations(document: dict[str, Any]) -> list[str]:
    return sorted(f"{operation['operationId']} {method.upper()} {path}"
                  for path, operations in document["paths"].items() for method, operation in operations.items())


def test_every_operation_id_is_the_one_checked_in(document: dict[str, Any]) -> None:
    assert _operations(document) == CHECKED_IN.read_text().split("\n")[:-1]


def test_operation_ids_are_unique_readable_camel_case(document: dict[str, Any]) -> None:
    ids = [line.split()[0] for line in _operations(document)]
    assert len(ids) == len(set(ids))
    assert all(re.fullmatch(r"[a-z]+(?:[A-Z][a-z]+)*", i) for i in ids), ids
