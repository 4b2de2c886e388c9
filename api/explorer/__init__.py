"""The explorer: a web page at `/ui` to see what each agent sees, why, and what was believed when.

Static files only, shipped in the package (`api/explorer/static`); the graph library is vendored there by
`make install` from the pinned npm package in `ui/` (see docs/explorer.md). The page talks to the public `/v1`
API with the API key the person enters, exactly as any other client: this module adds no route and no data.

The answers carry a strict Content-Security-Policy: scripts, styles and connections from this origin only, so
nothing is fetched from elsewhere at run time and an injected label cannot run as script.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import FastAPI
from starlette.responses import Response
from starlette.staticfiles import StaticFiles

STATIC = Path(__file__).resolve().parent / "static"
GRAPH_LIBRARY = STATIC / "vendor" / "cytoscape.esm.min.js"
"""Copied from ui/node_modules by `make install`; the page says so in words when it is missing."""

HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:;"
                               " connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


class _ExplorerFiles(StaticFiles):
    async def get_response(self, path: str, scope: Any) -> Response:
        response = await super().get_response(path, scope)
        response.headers.update(HEADERS)
        return response


def mount_explorer(app: FastAPI) -> None:
    """Serve the page at `/ui/` (`/ui` redirects there)."""
    app.mount("/ui", _ExplorerFiles(directory=STATIC, html=True), name="explorer")
