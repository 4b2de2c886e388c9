"""The OpenAPI operationIds: stable, readable names a generated client turns into its method names
(`client.getPerspective(...)`), chosen here for every route instead of FastAPI's defaults
(`get_perspective_v1_perspectives_get`). They are a public contract: `tests/e2e/test_operation_ids.py` fails when
one changes or a route has none here."""

from __future__ import annotations

import re

from fastapi.routing import APIRoute

OPERATION_IDS: dict[tuple[str, str], str] = {
    ("POST", "/v1/events"): "ingestEvents",
    ("POST", "/v1/entities"): "registerEntity",
    ("GET", "/v1/entities"): "findEntities",
    ("GET", "/v1/entities/{ref}"): "getEntity",
    ("POST", "/v1/facts"): "assertFact",
    ("POST", "/v1/facts/{fact_id}/invalidate"): "invalidateFact",
    ("GET", "/v1/facts/{fact_id}"): "getFact",
    ("GET", "/v1/graph"): "getGraph",
    ("GET", "/v1/perspectives"): "getPerspective",
    ("POST", "/v1/perspectives/{perspective_id}/deepen"): "deepenPerspective",
    ("GET", "/v1/perspectives/{perspective_id}/explain"): "explainPerspective",
    ("POST", "/v1/memory/used"): "markUsed",
    ("POST", "/v1/memory/recall"): "recall",
    ("POST", "/v1/search"): "search",
    ("GET", "/v1/searches/{search_id}/explain"): "explainSearch",
    ("GET", "/v1/sessions/{session_id}/workers"): "listWorkers",
    ("POST", "/v1/sessions/{session_id}/context"): "assembleContext",
    ("GET", "/v1/contexts/{context_id}/explain"): "explainContext",
    ("POST", "/v1/forget"): "forget",
    ("POST", "/v1/admin/tenants"): "createTenant",
    ("POST", "/v1/admin/keys"): "createKey",
    ("GET", "/v1/admin/keys"): "listKeys",
    ("DELETE", "/v1/admin/keys/{key_id}"): "revokeKey",
    ("GET", "/healthz"): "healthz",
    ("GET", "/readyz"): "readyz",
    ("GET", "/metrics"): "metrics",
}


def _camel(name: str) -> str:
    head, *rest = re.split(r"_+", name)
    return head + "".join(part.title() for part in rest)


def operation_id(route: APIRoute) -> str:
    """The route's name from OPERATION_IDS; a route not listed there gets its function's name in camelCase (and
    the test of the list fails until it is added)."""
    method = sorted(route.methods)[0] if route.methods else "GET"
    path = re.sub(r"\{(\w+):path\}", r"{\1}", route.path_format)
    return OPERATION_IDS.get((method, path), _camel(route.name))
