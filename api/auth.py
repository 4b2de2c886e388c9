"""Authentication: a bearer API key names exactly one tenant; the admin key manages tenants and keys.

The tenant every route works in comes from here and nowhere else: never from a body, a path or a query. Routes
pass the caller (the tenant and the agents a key is scoped to) to the use case, which decides what it may do
(domain/access.py); no route checks on its own.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from api.problems import ApiProblem
from domain.access import Caller, admin_key_matches
from domain.application.application import Application
from domain.ports import ApiKeys
from infra.settings import Settings

bearer = HTTPBearer(auto_error=False, description="`Authorization: Bearer nk_...` (a tenant's API key) or the"
                    " admin key for /v1/admin routes.")
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]


async def get_memory(request: Request) -> Application:
    """The application (domain/application/application.py) this process serves."""
    memory: Application = request.app.state.memory
    return memory


async def get_keys(request: Request) -> ApiKeys:
    keys: ApiKeys = request.app.state.keys
    return keys


async def get_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


MemoryDep = Annotated[Application, Depends(get_memory)]
KeysDep = Annotated[ApiKeys, Depends(get_keys)]
SettingsDep = Annotated[Settings, Depends(get_settings)]


def _unauthorized(detail: str) -> ApiProblem:
    return ApiProblem(401, "unauthorized", "Unauthorized", detail, field="Authorization",
                      headers={"WWW-Authenticate": "Bearer"})


async def current_caller(keys: KeysDep, credentials: Credentials) -> Caller:
    """The tenant and agents of the presented API key (async: a dict lookup and a file stat, no thread hop)."""
    if credentials is None:
        raise _unauthorized("send an API key: Authorization: Bearer nk_...")
    record = keys.record_for(credentials.credentials)
    if record is None:
        raise _unauthorized("unknown or revoked API key")
    return Caller(record.tenant, record.agents)


CallerDep = Annotated[Caller, Depends(current_caller)]


async def require_admin(settings: SettingsDep, credentials: Credentials) -> None:
    """Only the admin key passes."""
    if credentials is None:
        raise _unauthorized("send the admin key: Authorization: Bearer <NOUMENA_ADMIN_KEY>")
    if not admin_key_matches(settings.admin_key.get_secret_value(), credentials.credentials):
        raise _unauthorized("this route needs the admin key")


AdminDep = Annotated[None, Depends(require_admin)]
