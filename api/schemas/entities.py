"""Entities: references to things that live elsewhere."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from api.schemas.common import WritePublic
from domain.commands import EntityNaming
from domain.values import Label


class EntityCreate(EntityNaming):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"ref": "person:li", "label": "Li Wei", "aliases": ["Mr. Li", "李总"], "hub": False}]})

    aliases: tuple[Label, ...] = Field(default=(), max_length=100)


class EntityWritten(WritePublic):
    ref: str


class EntityPublic(BaseModel):
    ref: str = Field(examples=["person:li"])
    label: str = Field(examples=["Li Wei"])
    aliases: list[str] = Field(default_factory=list)
    hub: bool = False
    needs_review: bool = False
    merged_into: str | None = None
    registered_at: datetime | None = None
    updated_at: datetime | None = None
    version: int | None = None


class EntityFoundPublic(BaseModel):
    """An entity a name may mean (or, without `q`, one entity of the listing)."""

    ref: str = Field(examples=["person:wang"])
    label: str = Field(examples=["Wang Wei"])
    kind: str = Field(examples=["person"], description="The ref's kind: the part before the colon.")
    aliases: list[str] = Field(default_factory=list, examples=[["王总"]])
    hub: bool = Field(default=False, description="Many unrelated parties touch it: reachable, never traversed.")
    score: float | None = Field(default=None, examples=[0.96],
                                description="How well `q` names it, 0..1 (1: the ref itself); null without `q`.")
    match: str | None = Field(default=None, examples=["exact"], description="How `q` matched: `ref`, `exact`,"
                              " `prefix`, `word`, `word-prefix`, `contains` or `fuzzy` (one edit away).")
    matched: str | None = Field(default=None, examples=["王总"],
                                description="The name (label, alias or ref identifier) `q` matched.")


class EntitiesPublic(BaseModel):
    data: list[EntityFoundPublic]
    count: int = Field(description="How many match in all (the page is `data`).")
