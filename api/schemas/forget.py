"""Forgetting on request ("forget that", "forget me")."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from api.schemas.common import WritePublic


class ForgetCreate(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"subject": "person:li"}]})

    subject: Annotated[str, Field(min_length=3, max_length=320,
                                  pattern=r"^(person|session|fact|memory):[^\s\x00-\x1f\x7f\x85]+$",
                                  description="`person:<ref>` (forget me), `memory:<ref>`, `session:<id>` or"
                                  " `fact:<id>` (forget that).")]


class ForgetWritten(WritePublic):
    """The forget's receipt: what was erased and when, under an id recorded in the log."""

    subject: str
    keys_deleted: int = Field(description="Data keys deleted: the content they sealed is unreadable everywhere.")
    receipt_id: str = Field(description="Recorded in the `subject.forgotten` event: quote it to show the forget.")
    forgotten_at: datetime | None = Field(default=None, description="When the forget was recorded.")
    erased_with: list[str] = Field(default_factory=list, description="Further subjects erased with this one: the "
                                   "sessions that served a person, a session's workers.")
    events_affected: int | None = Field(default=None, description="Stored events whose content is now unreadable.")
    files_rewritten: list[str] = Field(default_factory=list, description="Copies outside the log rewritten "
                                       "without the content, by kind, with how many files.")
