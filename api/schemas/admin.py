"""Administration: tenants and their API keys (admin key only)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from api.schemas.common import WritePublic
from domain.values import TenantName, text


class TenantCreate(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"tenant": "acme", "display_name": "ACME Export Ltd."}]})

    tenant: TenantName
    display_name: text(0, 200) = ""


class TenantWritten(WritePublic):
    tenant: str


class KeyCreate(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"tenant": "acme", "label": "sales agent runtime"}]})

    tenant: TenantName
    label: text(0, 200) = ""


class KeyPublic(BaseModel):
    key_id: str
    tenant: str
    label: str
    created_at: str


class KeyIssued(KeyPublic):
    key: str = Field(description="The API key. Shown once: only its hash is stored.")


class KeysPublic(BaseModel):
    data: list[KeyPublic]
    count: int
