"""Real forgetting in an append-only log: crypto-shredding.

Content fields (labels and aliases of people and memories, reasons, message contents, tasks, summaries) are
sealed in the log with data keys kept outside it. Each key has owners — the subjects whose forgetting must
erase it. Forgetting a subject deletes every key it owns, so every copy of that content in the log becomes
unreadable, and replays show `[forgotten]` with the structure (ids, refs, relations, times) intact.

Who owns which content (`content_key`):

- label and aliases of `person:` and `memory:` entities: the entity's key, owned by the entity, and a memory
  also by every person a fact links it to;
- a fact's reason (assert, corroborate, invalidate): the fact's key, owned by the fact, by its `person:` or
  `session:` scope, and, for an org-scoped fact, by a `person:` subject or object;
- messages, tasks, worker reports, compaction summaries and payloads, consolidation notes: the session's key,
  owned by the session, its main session (for workers) and the person it serves.

So "forget me" (a person) erases their name, their episodic facts' reasons, the reasons of org facts about
them, and every session that served them. In other people's facts that mention them only their name is
blanked: the other person's own words (the fact's reason) stay, and nothing else breaks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from domain.entities import EntityRegistered, EntityUpdated
from domain.events import DomainEvent
from domain.facts import FactAsserted, FactCorroborated, FactInvalidated

FORGOTTEN = "[forgotten]"
"""What a forgotten text reads as, everywhere."""

EMPTY_WHEN_FORGOTTEN = frozenset({"aliases", "mentions", "facts", "invalidations", "rejections"})
"""Content fields that are lists: forgotten, they read as empty."""

SUBJECT_PATTERN = re.compile(r"^(person|session|fact|memory):\S{1,300}$")


class SubjectForgotten(DomainEvent):
    """A subject was forgotten: its keys were deleted. Holds no content, only what was forgotten and how much."""

    topic = "subject.forgotten"

    subject: str
    keys_deleted: int


@dataclass(frozen=True, slots=True)
class ContentKey:
    key_id: str
    owners: frozenset[str]


def _session_owners(state: object, session_id: str, serving: str | None = None, parent: str | None = None
                    ) -> frozenset[str]:
    owners = {f"session:{session_id}"}
    session = getattr(state, "sessions", {}).get(session_id)
    if session is not None:
        serving = serving or session.serving
        parent = parent or session.parent_session_id
    if parent:
        owners.add(f"session:{parent}")
        main = getattr(state, "sessions", {}).get(parent)
        if main is not None and main.serving and not serving:
            serving = main.serving
    if serving and serving.startswith("person:"):
        owners.add(serving)
    return frozenset(owners)


def content_key(state: object, event: DomainEvent) -> ContentKey | None:
    """The key that seals this event's content, computed from the ontology as it stands before the event."""
    if not event.content_fields:
        return None
    tenant = event.tenant
    if isinstance(event, EntityRegistered | EntityUpdated):
        if not event.ref.startswith(("person:", "memory:")):
            return None
        return ContentKey(f"{tenant}/entity/{event.ref}", frozenset({event.ref}))
    if isinstance(event, FactAsserted | FactCorroborated | FactInvalidated):
        if event.reason is None:
            return None
        fact = getattr(state, "facts", {}).get(event.fact_id)
        scope = event.scope if isinstance(event, FactAsserted) else (fact.scope if fact else "org")
        subject = event.subject if isinstance(event, FactAsserted) else (fact.subject if fact else "")
        obj = event.object if isinstance(event, FactAsserted) else (fact.object if fact else "")
        owners = {f"fact:{event.fact_id}"}
        if scope != "org":
            owners.add(scope)
        else:
            owners |= {ref for ref in (subject, obj) if ref.startswith("person:")}
        return ContentKey(f"{tenant}/fact/{event.fact_id}", frozenset(owners))
    fields = _FIELDS.get(type(event))
    if fields is None:  # (pydantic's getattr on a missing field is slow: ask the class, once)
        fields = _FIELDS[type(event)] = frozenset(type(event).model_fields)
    if "session_id" not in fields:
        return None
    session_id = event.session_id  # type: ignore[attr-defined]
    key_id = f"{tenant}/session/{session_id}"
    cached = _SESSION_KEYS.get(key_id)
    if cached is not None and cached[0] is state:
        return cached[1]
    serving = event.serving if "serving" in fields else None  # type: ignore[attr-defined]
    parent = event.parent_session_id if "parent_session_id" in fields else None  # type: ignore[attr-defined]
    key = ContentKey(key_id, _session_owners(state, session_id, serving, parent))
    if session_id in getattr(state, "sessions", {}):
        _SESSION_KEYS[key_id] = (state, key)  # a known session's owners do not change
    return key


_SESSION_KEYS: dict[str, tuple[object, ContentKey]] = {}
_FIELDS: dict[type, frozenset[str]] = {}


def owner_grants(state: object, event: DomainEvent) -> tuple[ContentKey, ...]:
    """Further owners a fact gives a memory: a `memory:` entity linked to a person (by the fact's subject or
    object, or by its `person:` scope) becomes theirs too, so "forget me" erases the memories about them."""
    if not isinstance(event, FactAsserted):
        return ()
    memories = [ref for ref in (event.subject, event.object) if ref.startswith("memory:")]
    if not memories:
        return ()
    people = {ref for ref in (event.subject, event.object, event.scope) if ref.startswith("person:")}
    if not people:
        return ()
    return tuple(ContentKey(f"{event.tenant}/entity/{ref}", frozenset(people | {ref})) for ref in memories)


def check_subject(subject: str) -> str:
    if not SUBJECT_PATTERN.match(subject):
        raise ValueError(f"{subject!r} is not a forgettable subject: person:<ref>, session:<id>, fact:<id> or "
                         "memory:<ref>")
    return subject
