"""Administration with the admin key: tenants and API keys."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query

from api.auth import AdminDep, KeysDep, MemoryDep
from api.edge import EdgeRoute
from api.problems import not_found
from api.schemas.admin import KeyCreate, KeyIssued, KeyPublic, KeysPublic, TenantCreate, TenantWritten
from domain.ports import ApiKeyRecord
from domain.values import TenantName

router = APIRouter(prefix="/admin", tags=["admin"], route_class=EdgeRoute)


def _public(record: ApiKeyRecord) -> KeyPublic:
    fields = {k: v for k, v in vars(record).items() if k != "sha256"}
    return KeyPublic(**fields | {"agents": list(record.agents), "scope": "agents" if record.agents else "tenant"})


@router.post("/tenants", response_model=TenantWritten)
def create_tenant(tenant: TenantCreate, _: AdminDep, memory: MemoryDep) -> TenantWritten:
    """Create a tenant: one organization, one ontology."""
    written = memory.tenants.create_tenant(tenant.tenant, tenant.display_name)
    return TenantWritten(position=written.position, events=written.events, tenant=tenant.tenant)


@router.post("/keys", response_model=KeyIssued)
def create_key(request: KeyCreate, _: AdminDep, memory: MemoryDep, keys: KeysDep) -> KeyIssued:
    """Issue an API key for a tenant. The key is in this answer only; the server keeps its hash."""
    if not memory.tenants.tenant_exists(request.tenant):
        raise not_found(f"no tenant {request.tenant!r}", "body.tenant")
    issued = keys.create(request.tenant, request.label, tuple(request.agents))
    return KeyIssued(key=issued.key, **_public(issued.record).model_dump())


@router.get("/keys", response_model=KeysPublic)
def list_keys(_: AdminDep, keys: KeysDep,
              tenant: Annotated[TenantName | None, Query(description="Only this tenant's keys.")] = None
              ) -> KeysPublic:
    """The keys issued (ids, tenants, labels; never the keys)."""
    records = keys.list(tenant)
    return KeysPublic(data=[_public(r) for r in records], count=len(records))


@router.delete("/keys/{key_id}", response_model=KeyPublic)
def revoke_key(key_id: Annotated[str, Path(min_length=1, max_length=64)], _: AdminDep, keys: KeysDep
               ) -> KeyPublic:
    """Revoke a key: it stops working at once."""
    record = keys.revoke(key_id)
    return _public(record)
