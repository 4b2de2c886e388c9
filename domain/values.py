"""Value types shared by commands and events: refs, scopes, time, confidence, provenance."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated

from pydantic import AfterValidator, AwareDatetime, BaseModel, ConfigDict, Field, ValidationInfo

REF_PATTERN = re.compile(r"^[a-z][a-z0-9_-]*:\S(?:.*\S)?$")
"""A ref is `kind:identifier`: a lower-case kind, a colon, and a non-blank identifier."""

KNOWN_KINDS = frozenset({"person", "agent", "file", "ticket", "session", "memory", "org", "thing", "topic"})


_VALID_REFS: set[str] = set()
_VALID_RELATIONS: set[str] = set()
_VALID_TENANTS: set[str] = set()
"""Values found valid before, one set per check (each check is a pure function of the text, and the same few
thousand come back with every event). Bounded: past the limit, new values are checked every time."""
_VALID_KEPT = 100_000


def _remember(found: set[str], value: str) -> str:
    if len(found) < _VALID_KEPT:
        found.add(value)
    return value


def _check_ref(value: str) -> str:
    if value in _VALID_REFS:
        return value
    if len(value) > 512:
        raise ValueError("a ref is at most 512 characters")
    if not REF_PATTERN.match(value):
        raise ValueError(f"{value!r} is not a ref of the form kind:identifier (e.g. person:li)")
    return _remember(_VALID_REFS, value)


def _check_scope(value: str) -> str:
    if value == "org":
        return value
    _check_ref(value)
    if not (value.startswith("person:") or value.startswith("session:")):
        raise ValueError(f"scope {value!r} must be 'org', 'person:<ref>' or 'session:<id>'")
    return value


def _check_identifier(value: str) -> str:
    if not value or value != value.strip() or len(value) > 256:
        raise ValueError("must be a non-blank identifier of at most 256 characters without edge whitespace")
    return value


RELATION_PATTERN = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
TENANT_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")


def _check_relation(value: str) -> str:
    if value in _VALID_RELATIONS:
        return value
    if not RELATION_PATTERN.match(value):
        raise ValueError(f"relation {value!r} must be snake_case: a-z, 0-9 and _ (at most 64)")
    return _remember(_VALID_RELATIONS, value)


def _check_tenant(value: str) -> str:
    if value in _VALID_TENANTS:
        return value
    if not TENANT_PATTERN.match(value):
        raise ValueError(f"tenant {value!r} must be 1-63 of a-z, 0-9, '-' or '_'")
    return _remember(_VALID_TENANTS, value)


Ref = Annotated[str, AfterValidator(_check_ref)]
Scope = Annotated[str, AfterValidator(_check_scope)]
Identifier = Annotated[str, AfterValidator(_check_identifier)]
RelationName = Annotated[str, AfterValidator(_check_relation)]
TenantName = Annotated[str, AfterValidator(_check_tenant)]
Confidence = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]
Timestamp = AwareDatetime

DEFAULT_CONFIDENCE = 0.8
"""Confidence of an assertion that states none: trusted, but with room to grow through corroboration."""


def corroborated_confidence(current: float, incoming: float) -> float:
    """Noisy-OR: two independent sources that each hold with p and q together hold with 1-(1-p)(1-q).

    It never lowers confidence, never exceeds 1, and a repeat of a weak source raises a strong fact little.
    """
    return round(1.0 - (1.0 - current) * (1.0 - incoming), 6)


def valid_to_after_valid_from(valid_to: datetime | None, info: ValidationInfo) -> datetime | None:
    """A field validator for `valid_to`: the valid interval must move forward (the error names `valid_to`)."""
    valid_from = info.data.get("valid_from")
    if valid_to is not None and valid_from is not None and valid_to <= valid_from:
        raise ValueError("valid_to must be after valid_from")
    return valid_to


def ref_kind(ref: str) -> str:
    return ref.split(":", 1)[0]


class Provenance(BaseModel):
    """Where a fact came from: the session and messages, who extracted it, and the ingest event id."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    session_id: str | None = None
    message_ids: tuple[str, ...] = ()
    actor: str | None = None
    event_id: str | None = None
    occurred_at: datetime | None = None
