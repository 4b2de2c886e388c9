"""Forgetting on request ("forget that", "forget me")."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from domain.values import Ref


class ForgetCreate(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"subject": "person:li"}]})

    subject: Ref
