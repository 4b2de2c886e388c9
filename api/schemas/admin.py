"""Administration: tenants and their API keys (admin key only)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, field_validator

from api.schemas.common import WritePublic
from domain.values import REF_SCHEMA_REGEX, Ref, TenantName, text

AgentRef = Annotated[Ref, WithJsonSchema({"type": "string", "pattern": "^agent:" + REF_SCHEMA_REGEX.split(":", 1)[1],
                                          "maxLength": 512})]
"""An agent's ref (checked as any ref, then for its kind); the OpenAPI document says `agent:` up front."""


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
    agents: list[AgentRef] = Field(default_factory=list, max_length=100, description="The agents the key acts"
                                   " as (`agent:<id>`): it then asks only as them, about persons they serve. Empty:"
                                   " a tenant-wide key, for services.")

    @field_validator("agents")
    @classmethod
    def _agents(cls, agents: list[str]) -> list[str]:
        for index, agent in enumerate(agents):
            if not agent.startswith("agent:"):
                raise ValueError(f"agents[{index}]: {agent!r} is not an agent ref (agent:<id>)")
        return agents


class KeyPublic(BaseModel):
    key_id: str
    tenant: str
    label: str
    created_at: str
    agents: list[str] = Field(default_factory=list)
    scope: Literal["tenant", "agents"] = Field(default="tenant", description="`tenant`: a service key acting"
                                               " for the whole tenant; `agents`: acts only as `agents`.")


class KeyIssued(KeyPublic):
    key: str = Field(description="The API key. Shown once: only its hash is stored.")


class KeysPublic(BaseModel):
    data: list[KeyPublic]
    count: int
