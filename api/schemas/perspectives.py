"""Perspectives: what an agent sees from where it stands, in five clarity tiers, within a token budget."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from domain.perspective import Standpoint


class PerspectiveItemPublic(BaseModel):
    model_config = ConfigDict(extra="allow")

    tier: str = Field(description="full | gist | marker | count", examples=["full"])
    fact_id: str
    subject: str
    relation: str
    object: str
    activation: float
    hops: int


class PerspectivePublic(Standpoint):
    """A served perspective. `context` is the markdown block to put in the prompt; every line names fact ids."""

    model_config = ConfigDict(extra="allow")

    perspective_id: str
    items: list[PerspectiveItemPublic]
    counts: dict[str, int] = Field(description="Facts per tier, forgotten included.")
    context: str


class ExplanationPublic(BaseModel):
    """Everything needed to reproduce a perspective: its inputs, parameters and outputs."""

    model_config = ConfigDict(extra="allow")

    perspective_id: str
    inputs: dict[str, Any]
    parameters: dict[str, Any]
    outputs: dict[str, Any]
