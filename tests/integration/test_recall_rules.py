"""The recall workflow applies the input rules of domain/values.py before it looks anything up (the
rules themselves are specified in tests/unit/test_edge_rules.py)."""

from __future__ import annotations

from typing import Any

import pytest

from domain import commands as c
from domain.application.recall import recall
from domain.errors import InvalidInput

SURROGATE = "\ud800"


def test_recall_refuses_an_invalid_relation_before_looking(make_noumena: Any) -> None:
    noumena = make_noumena("popo")
    noumena.service.execute(c.CreateTenant(tenant="acme"))
    with pytest.raises(InvalidInput) as refused:
        recall(noumena.service, "acme", "agent:a", None, "person:li", relation="knows\n")
    assert refused.value.field == "relation"
    with pytest.raises(InvalidInput) as refused:
        recall(noumena.service, "acme", f"agent:{SURROGATE}", None, "person:li")
    assert refused.value.field == "agent"
