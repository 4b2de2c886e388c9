"""Contexts: the budgeted block a main session puts in its prompt, compiled for one request."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from api.schemas.common import MIN_POSITION_TEXT
from domain.context import ContextAsked
from domain.values import Count, text


class ContextRequest(BaseModel):
    """The request being answered: what it names is in focus."""

    model_config = ConfigDict(extra="forbid")

    message: text(0, 50_000) | None = Field(default=None, examples=["给李总再出一版报价"])
    budget_tokens: Count | None = Field(default=None, ge=1, le=200_000,
                                      description="Token budget of the whole block (default 3000).")
    min_position: Count | None = Field(default=None, ge=0, description=MIN_POSITION_TEXT)


class ContextBlockPublic(BaseModel):
    role: str = Field(description="constraints | perspective | workers | summary | turns")
    budget_tokens: int
    tokens: int
    text: str
    fact_ids: list[str]
    message_ids: list[str]
    summary_ids: list[str]
    session_ids: list[str]


class FocusPublic(BaseModel):
    ref: str
    label: str
    found_in: str = Field(description="`message`, `turn <message id>` or `worker <session id>`.")


class OmissionPublic(BaseModel):
    role: str
    kind: str
    stage: str = Field(description="`role`: cut to fit its role's budget; `total`: cut to fit the whole.")
    text: str
    ids: list[str]


class ContextPublic(ContextAsked):
    """A served context. `text` is the markdown block; every block carries the ids its lines came from."""

    context_id: str = Field(description="Pass to /v1/contexts/{context_id}/explain.")
    budget_tokens: int
    tokens: int
    text: str
    focus: list[FocusPublic]
    perspective_id: str | None = None
    blocks: list[ContextBlockPublic]
    omitted: list[OmissionPublic]
    deduplicated: list[str]
