"""Authentication: a bearer API key names exactly one tenant; the admin key manages tenants and keys.

The tenant every route works in comes from here and nowhere else: never from a body, a path or a query.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from api.application import MemoryApplication
from api.problems import ApiProblem
from infra.api_keys import admin_key_matches

bearer = HTTPBearer(auto_error=False, description="`Authorization: Bearer nk_...` (a tenant's API key) or the"
                    " admin key for /v1/admin routes.")
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]


async def get_memory(request: Request) -> MemoryApplication:
    memory: MemoryApplication = request.app.state.memory
    return memory


MemoryDep = Annotated[MemoryApplication, Depends(get_memory)]


def _unauthorized(detail: str) -> ApiProblem:
    return ApiProblem(401, "unauthorized", "Unauthorized", detail, field="Authorization",
                      headers={"WWW-Authenticate": "Bearer"})


async def current_tenant(memory: MemoryDep, credentials: Credentials) -> str:
    """The tenant of the presented API key (async: a dict lookup and a file stat, no thread hop needed)."""
    if credentials is None:
        raise _unauthorized("send an API key: Authorization: Bearer nk_...")
    tenant = memory.keys.tenant_for(credentials.credentials)
    if tenant is None:
        raise _unauthorized("unknown or revoked API key")
    return tenant


async def require_admin(memory: MemoryDep, credentials: Credentials) -> None:
    """Only the admin key passes."""
    if credentials is None:
        raise _unauthorized("send the admin key: Authorization: Bearer <NOUMENA_ADMIN_KEY>")
    if not admin_key_matches(memory.settings.admin_key.get_secret_value(), credentials.credentials):
        raise _unauthorized("this route needs the admin key")


TenantDep = Annotated[str, Depends(current_tenant)]
AdminDep = Annotated[None, Depends(require_admin)]
