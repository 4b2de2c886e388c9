"""Forgetting on request ("forget that", "forget me")."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from api.schemas.common import WritePublic


class ForgetCreate(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"subject": "person:li"}]})

    subject: Annotated[str, Field(min_length=3, max_length=320, pattern=r"^(person|session|fact|memory):\S+$",
                                  description="`person:<ref>` (forget me), `memory:<ref>`, `session:<id>` or"
                                  " `fact:<id>` (forget that).")]


class ForgetWritten(WritePublic):
    subject: str
    keys_deleted: int = Field(description="Data keys deleted: the content they sealed is unreadable everywhere.")
