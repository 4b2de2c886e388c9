"""Relation types: the rules a relation name carries. Unknown names are allowed and get the defaults."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from domain.events import DomainEvent


class RelationType(BaseModel):
    """functional: one current object per (subject, scope), a new object supersedes the old.
    symmetric: `a r b` is the same fact as `b r a`. weight: how strongly activation flows along it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    functional: bool = False
    symmetric: bool = False
    weight: float = Field(default=1.0, ge=0.0, le=10.0)


class RelationTypeDefined(DomainEvent):
    topic = "relation.defined"

    name: str
    functional: bool
    symmetric: bool
    weight: float


BUILTIN_RELATIONS: dict[str, RelationType] = {
    r.name: r
    for r in (
        RelationType(name="status", functional=True),
        RelationType(name="stage", functional=True),
        RelationType(name="has_status", functional=True),
        RelationType(name="settlement_preference", functional=True),
        RelationType(name="works_for", functional=True),
        RelationType(name="assigned_to", functional=True),
        RelationType(name="reports_to", functional=True),
        RelationType(name="serves"),
        RelationType(name="prefers"),
        RelationType(name="about"),
        RelationType(name="mentions", weight=0.5),
        RelationType(name="knows", symmetric=True),
        RelationType(name="colleague_of", symmetric=True),
        RelationType(name="related_to", symmetric=True, weight=0.5),
    )
}


_DEFAULTS: dict[str, RelationType] = {}


def default_relation(name: str) -> RelationType:
    """The rules of a relation nobody defined: not functional, not symmetric, weight 1."""
    rule = _DEFAULTS.get(name)
    if rule is None:
        rule = _DEFAULTS[name] = RelationType(name=name)
    return rule
