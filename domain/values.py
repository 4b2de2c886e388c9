"""Value types shared by commands and events: refs, scopes, time, confidence, provenance."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    ValidationInfo,
)

from domain.errors import InvalidInput

# Every pattern is matched with `fullmatch`: `$` in Python also matches before a final newline, so `person:li\n`
# would pass a `^...$` search. The `^`/`$` kept in the texts are for the OpenAPI document (ECMA regexes, where `$`
# is the true end).
REF_REGEX = r"^[a-z][a-z0-9_-]*:\S(?:.*\S)?$"
REF_PATTERN = re.compile(REF_REGEX[1:-1])
"""A ref is `kind:identifier`: a lower-case kind, a colon, and a non-blank identifier."""
_EDGE = r"[^\s\x1c-\x1f\x85]"
"""A character that is white space neither to Python nor to an ECMA regex (Python's white space also takes
U+001C-U+001F and U+0085, ECMA's does not): the OpenAPI document's patterns use it where ours say "not white
space", so whatever a client generates from the document passes the checks here."""
REF_SCHEMA_REGEX = rf"^[a-z][a-z0-9_-]*:{_EDGE}(?:.*{_EDGE})?$"
"""REF_REGEX as the OpenAPI document states it (a subset of what REF_PATTERN accepts)."""

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
_CONTROL = re.compile("[\x00-\x1f\x7f]")


def check_text(value: str) -> str:
    """Any text (a label, a reason, a message): valid Unicode, so it can be encoded, stored and sent back.

    A JSON string may carry `\\ud800` (half of a UTF-16 pair): Python decodes it to a lone surrogate, which no
    UTF-8 encoder accepts. Refused here, on every entry point, rather than failing later in a store."""
    if not value.isascii() and _LONE_SURROGATE.search(value):
        raise ValueError("contains a lone UTF-16 surrogate (e.g. \\ud800): not valid Unicode text")
    return value


def lone_surrogate_path(value: Any, path: tuple[str | int, ...] = ()) -> tuple[str | int, ...] | None:
    """Where in decoded JSON a string (or an object key) holds a lone surrogate; None when nowhere."""
    if isinstance(value, str):
        return path if not value.isascii() and _LONE_SURROGATE.search(value) else None
    if isinstance(value, dict):
        for key, item in value.items():
            found = lone_surrogate_path(key, (*path, key)) if isinstance(key, str) else None
            found = found or lone_surrogate_path(item, (*path, str(key)))
            if found is not None:
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found = lone_surrogate_path(item, (*path, index))
            if found is not None:
                return found
    return None


def text(min_length: int = 0, max_length: int = 20_000) -> Any:
    """A text field of the given length bounds that is valid Unicode (see `check_text`)."""
    return Annotated[str, Field(min_length=min_length, max_length=max_length), AfterValidator(check_text)]


Text = text(1, 20_000)
Label = text(1, 500)

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
    check_text(value)
    if not REF_PATTERN.fullmatch(value):
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
    check_text(value)
    if _CONTROL.search(value):
        raise ValueError("an identifier holds no control characters (newline, tab, NUL)")
    return value


RELATION_REGEX = r"^[a-z][a-z0-9_]{0,63}$"
TENANT_REGEX = r"^[a-z0-9][a-z0-9_-]{0,62}$"
IDENTIFIER_REGEX = r"^[^\s\x00-\x1f\x7f\x85](?:[^\x00-\x1f\x7f]*[^\s\x00-\x1f\x7f\x85])?$"
RELATION_PATTERN = re.compile(RELATION_REGEX[1:-1])
TENANT_PATTERN = re.compile(TENANT_REGEX[1:-1])


def _check_relation(value: str) -> str:
    if value in _VALID_RELATIONS:
        return value
    if not RELATION_PATTERN.fullmatch(value):
        raise ValueError(f"relation {value!r} must be snake_case: a-z, 0-9 and _ (at most 64)")
    return _remember(_VALID_RELATIONS, value)


def _check_tenant(value: str) -> str:
    if value in _VALID_TENANTS:
        return value
    if not TENANT_PATTERN.fullmatch(value):
        raise ValueError(f"tenant {value!r} must be 1-63 of a-z, 0-9, '-' or '_'")
    return _remember(_VALID_TENANTS, value)


# The patterns also go into the JSON Schema (so the OpenAPI document says what is accepted); the checks above are
# what runs (one pass, cached), so pydantic does not match them twice.
Ref = Annotated[str, AfterValidator(_check_ref),
                Field(json_schema_extra={"pattern": REF_SCHEMA_REGEX, "maxLength": 512})]
Scope = Annotated[str, AfterValidator(_check_scope),
                  Field(json_schema_extra={"pattern": rf"^(org|(person|session):{_EDGE}(?:.*{_EDGE})?)$",
                                           "maxLength": 512})]
Identifier = Annotated[str, AfterValidator(_check_identifier),
                       Field(json_schema_extra={"pattern": IDENTIFIER_REGEX, "minLength": 1, "maxLength": 256})]
RelationName = Annotated[str, AfterValidator(_check_relation),
                         Field(json_schema_extra={"pattern": RELATION_REGEX, "maxLength": 64})]
TenantName = Annotated[str, AfterValidator(_check_tenant),
                       Field(json_schema_extra={"pattern": TENANT_REGEX, "maxLength": 63})]
Confidence = Annotated[float, Strict(), Field(ge=0.0, le=1.0, allow_inf_nan=False)]
"""0..1, a JSON number: `true` or `"0.9"` are refused, not coerced."""
Flag = Annotated[bool, Strict()]
"""A JSON boolean: `0`, `1` or `"yes"` are refused, not coerced."""
Count = Annotated[int, Strict()]
"""A JSON integer: `true` or `"3"` are refused, not coerced."""

TIMESTAMP_MIN = datetime(1, 1, 2, tzinfo=UTC)
TIMESTAMP_MAX = datetime(9999, 12, 30, 23, 59, 59, 999999, tzinfo=UTC)
"""Every timestamp lies in [0001-01-02, 9999-12-30] once converted to UTC: a day inside the calendar Python,
DuckDB and PostgreSQL share on both ends, so it survives conversion to UTC and display in any offset."""
_ISO_TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d{1,9})?)?"
                            r"(?:[Zz]|[+-]\d{2}(?::?\d{2})?)")


def _timestamp_text(value: object) -> object:
    """Only an ISO 8601 string with a UTC offset (or a datetime, from Python): never an epoch number or `"-1"`,
    which pydantic's lax mode would read as seconds since 1970."""
    if isinstance(value, datetime):
        return value
    if not isinstance(value, str) or not _ISO_TIMESTAMP.fullmatch(value):
        raise ValueError("a timestamp is an ISO 8601 string with a date, a time and a UTC offset"
                         " (e.g. 2026-09-06T10:00:00+08:00)")
    return value


def check_timestamp(value: datetime) -> datetime:
    """In the shared range once converted to UTC (see TIMESTAMP_MIN / TIMESTAMP_MAX)."""
    try:
        utc = value.astimezone(UTC)
    except OverflowError:
        utc = None
    if utc is None or not TIMESTAMP_MIN <= utc <= TIMESTAMP_MAX:
        raise ValueError("out of range: a timestamp lies between 0001-01-02 and 9999-12-30 in UTC")
    return value


Timestamp = Annotated[AwareDatetime, BeforeValidator(_timestamp_text), AfterValidator(check_timestamp)]
"""An aware moment within the shared range, from an ISO 8601 string with an offset."""


def clamp_timestamp(value: datetime | None) -> datetime | None:
    """For reading what was stored before the range was enforced: a moment outside it reads as its bound."""
    if value is None:
        return None
    try:
        utc = value.astimezone(UTC) if value.tzinfo is not None else value.replace(tzinfo=UTC)
    except OverflowError:
        return TIMESTAMP_MAX if value.year > 5000 else TIMESTAMP_MIN
    return min(max(utc, TIMESTAMP_MIN), TIMESTAMP_MAX) if not TIMESTAMP_MIN <= utc <= TIMESTAMP_MAX else value


VALID_TIME_MIN = datetime(1000, 1, 1, tzinfo=UTC)
VALID_TIME_MAX = datetime(9000, 1, 1, tzinfo=UTC)
"""Valid times and source clocks must lie in [VALID_TIME_MIN, VALID_TIME_MAX): far enough for any history an
organization records, and far from the ends of Python's calendar, where moving a time between zones overflows
(year 1 at +08:00 and year 9999 at -05:00 cannot be compared with a UTC time) and where DuckDB's `infinity`
sentinels live. Outside it the value is refused with an error naming the field."""


def _check_valid_time(value: datetime) -> datetime:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError("a time must carry a time zone")
    try:
        inside = VALID_TIME_MIN <= value < VALID_TIME_MAX
    except OverflowError:
        inside = False
    if not inside:
        raise ValueError(f"{value.isoformat()} is outside the accepted range of times "
                         f"[{VALID_TIME_MIN.date().isoformat()}, {VALID_TIME_MAX.date().isoformat()})")
    return value


ValidTime = Annotated[Timestamp, AfterValidator(_check_valid_time)]
"""A valid time (`valid_from`, `valid_to`) or a source's clock (`occurred_at`): aware, and inside the range."""

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


def checked(check: Any, value: str, field: str) -> str:
    """Apply one of the checks above (`check_ref`, `check_relation`, ...) to a value that did not come through a
    model (a CLI option, a function argument); the error names `field`."""
    try:
        return str(check(value))
    except ValueError as error:
        raise InvalidInput(f"{field}: {error}", field=field) from None


check_ref, check_relation, check_identifier = _check_ref, _check_relation, _check_identifier


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


RefOrName = Annotated[str, AfterValidator(check_text), Field(
    min_length=1, max_length=512, description="A ref (`kind:id`, e.g. `person:wang`) or a name that names exactly one"
    " entity (`王总`, `Wang Wei`): a name naming none or several is refused listing the candidates.")]
"""Where an entry point accepts a name in place of a ref (resolved by domain/application/entity_finder.py)."""
