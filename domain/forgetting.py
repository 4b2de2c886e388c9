"""Real forgetting in an append-only log: crypto-shredding.

Content fields (labels and aliases of people and memories, reasons, message contents, tasks, summaries) are
sealed in the log with data keys kept outside it. Each key has owners — the subjects whose forgetting must
erase it. Forgetting a subject deletes every key it owns, so every copy of that content in the log becomes
unreadable, and replays show `[forgotten]` with the structure (ids, refs, relations, times) intact.

Who owns which content (`content_key`):

- label and aliases of `person:` and `memory:` entities: the entity's key, owned by the entity; a memory's
  key is also deleted when a person a fact links it to is forgotten (`linked_memories`);
- a fact's reason (assert, corroborate, invalidate, correct): the fact's key, owned by the fact, by its `person:` or
  `session:` scope, and, for an org-scoped fact, by a `person:` subject or object. A fact's key is not
  stored on its own: it is derived from the key of its *group* (the facts with the same owners besides
  themselves, e.g. every fact scoped to `person:li`; org facts that name no person are spread over
  `ORG_GROUPS` groups by id). Forgetting an owner of the group deletes the group's key; forgetting one fact
  first stores its siblings' derived keys on their own, then deletes the group's key (`fact_groups`). So a
  new fact costs no key write, and forgetting one fact still erases exactly that fact;
- messages, tasks, worker reports, compaction summaries and payloads, consolidation notes: the session's key,
  owned by the session, its main session (for workers) and the person it serves.

So "forget me" (a person) erases their name, their episodic facts' reasons, the reasons of org facts about
them, and every session that served them: its messages, tasks, reports and summaries, its workers', and the
reasons of facts scoped to any of those sessions (`sessions_erased_with`: the forget deletes the keys those
sessions own as well). Forgetting a session erases its workers' the same way. In other people's facts that
mention them only their name is blanked: the other person's own words (the fact's reason) stay, and nothing else breaks.
"""

from __future__ import annotations

import re
import weakref
from dataclasses import dataclass, field
from typing import NamedTuple

from domain.entities import EntityRegistered, EntityUpdated
from domain.events import DomainEvent
from domain.facts import FactAsserted, FactCorrected, FactCorroborated, FactInvalidated

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
    receipt_id: str | None = None
    """The forget receipt's id (`fgt-...`): what a privacy officer quotes to show when and what was erased."""
    erased_with: tuple[str, ...] = ()
    """Further subjects erased with this one (the sessions that served a person, a session's workers)."""


class ContentKey(NamedTuple):
    """A data key by id, with its owners. With a `group`, the key is derived from the group's key and not stored
    itself: `owners` are then the group's, and the member itself (`fact:<id>`) owns its key too (see the module's
    docstring). (A named tuple: one is made for every fact written.)"""

    key_id: str
    owners: frozenset[str]
    group: str | None = None


ORG_GROUPS = 256
"""Org-scoped facts that name no person share a group key with 1/256 of their kind (by the first two hex digits
of the fact id), so forgetting one of them stores at most that share of sibling keys."""

_GROUPS: dict[tuple[str, str, str, str], tuple[str, frozenset[str]]] = {}
"""Group id and owners by (tenant, scope, person subject, person object or bucket): made once each."""


def fact_key(tenant: str, fact_id: str, scope: str, subject: str, obj: str) -> ContentKey:
    """The key of a fact's reason: owned by the fact and by the people or session it belongs to (its `person:`
    or `session:` scope; for an org fact, a `person:` subject or object), derived from the key of the group of
    facts with the same other owners."""
    if scope != "org":
        found = (tenant, scope, "", "")
    else:
        person_subject = subject if subject.startswith("person:") else ""
        person_object = obj if obj.startswith("person:") else ""
        found = (tenant, "org", person_subject, person_object) if person_subject or person_object else \
            (tenant, "org", "", fact_id[:2])
    group = _GROUPS.get(found)
    if group is None:
        if scope != "org":
            others = frozenset((scope,))
        else:
            others = frozenset(ref for ref in found[2:] if ref.startswith("person:"))
        name = " ".join(sorted(others)) if others else f"org/{fact_id[:2]}"
        if len(_GROUPS) >= _KEPT:
            _GROUPS.clear()
        group = _GROUPS[found] = (f"{tenant}/facts/{name}", others)
    return ContentKey(f"{tenant}/fact/{fact_id}", group[1], group[0])


def own_owners(key: ContentKey) -> frozenset[str]:
    """Every owner of the key itself: for a group member, the group's owners and the member (`fact:<id>`)."""
    if key.group is None:
        return key.owners
    return key.owners | {"fact:" + key.key_id.rsplit("/fact/", 1)[1]}


def fact_groups(state: object, fact_id: str) -> dict[str, dict[str, frozenset[str]]]:
    """For forgetting one fact: its group, with every other fact of that group and its owners (their keys are
    stored on their own before the group's key is deleted)."""
    tenant = getattr(state, "tenant", "")
    facts = getattr(state, "facts", {})
    fact = facts.get(fact_id)
    if fact is None:
        return {}
    group = fact_key(tenant, fact_id, fact.scope, fact.subject, fact.object).group
    assert group is not None
    siblings: dict[str, frozenset[str]] = {}
    for other in facts.values():
        if other.fact_id == fact_id:  # (a fact without a reason may have had one in a corroboration)
            continue
        key = fact_key(tenant, other.fact_id, other.scope, other.subject, other.object)
        if key.group == group:
            siblings[key.key_id] = own_owners(key)
    return {group: siblings}


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


_NO_KEY, _ENTITY, _ASSERTED, _FACT, _SESSION = range(5)
_KINDS: dict[type, int] = {}


def _kind(cls: type[DomainEvent]) -> int:
    """Which rule below seals this class of event (decided once per class)."""
    kind = _KINDS.get(cls)
    if kind is None:
        if not cls.content_fields:
            kind = _NO_KEY
        elif issubclass(cls, EntityRegistered | EntityUpdated):
            kind = _ENTITY
        elif issubclass(cls, FactAsserted):
            kind = _ASSERTED
        elif issubclass(cls, FactCorroborated | FactInvalidated | FactCorrected):
            kind = _FACT
        elif "session_id" in cls.model_fields:
            kind = _SESSION
        else:
            kind = _NO_KEY
        _KINDS[cls] = kind
    return kind


def content_key(state: object, event: DomainEvent) -> ContentKey | None:
    """The key that seals this event's content, computed from the ontology as it stands before the event."""
    kind = _KINDS.get(type(event))
    if kind is None:
        kind = _kind(type(event))
    if kind == _NO_KEY:
        return None
    tenant = event.tenant
    if kind == _ENTITY:
        ref = event.ref  # type: ignore[attr-defined]
        if not ref.startswith(("person:", "memory:")):
            return None
        return ContentKey(f"{tenant}/entity/{ref}", frozenset((ref,)))
    if kind == _ASSERTED or kind == _FACT:
        if event.reason is None:  # type: ignore[attr-defined]
            return None
        fact_id = event.fact_id  # type: ignore[attr-defined]
        if kind == _ASSERTED:
            return fact_key(tenant, fact_id, event.scope, event.subject, event.object)  # type: ignore[attr-defined]
        fact = getattr(state, "facts", {}).get(fact_id)
        if fact is None:
            return fact_key(tenant, fact_id, "org", "", "")
        return fact_key(tenant, fact_id, fact.scope, fact.subject, fact.object)
    session_id = event.session_id  # type: ignore[attr-defined]
    known = _SESSION_KEYS.get(tenant)  # (by tenant, then session: no key id to build for a cached key)
    cached = known.get(session_id) if known is not None else None
    if cached is not None and cached[0]() is state:
        return cached[1]
    key_id = f"{tenant}/session/{session_id}"
    serving = getattr(event, "serving", None)  # (fields only some session events have)
    parent = getattr(event, "parent_session_id", None)
    key = ContentKey(key_id, _session_owners(state, session_id, serving, parent))
    if session_id in getattr(state, "sessions", {}):
        if known is None:
            known = _SESSION_KEYS[tenant] = {}
        elif len(known) >= _KEPT:
            known.clear()
        # a known session's owners do not change; the state is held weakly, so a state dropped after a forget
        # (with the content it folded) is not kept alive here
        known[session_id] = (weakref.ref(state), key)
    return key


_SESSION_KEYS: dict[str, dict[str, tuple[weakref.ref[object], ContentKey]]] = {}
"""By tenant, by session id: the state it was worked out from (held weakly) and the session's key."""
_KEPT = 100_000


def linked_memories(state: object, person: str) -> list[str]:
    """The keys of the `memory:` entities a fact links to a person (by the fact's subject or object, or by its
    `person:` scope): "forget me" erases them too. Found in the ontology when the person is forgotten (its
    `memory_links`, kept as facts are asserted), so writing a fact records nothing for it."""
    if not person.startswith("person:"):
        return []
    tenant = getattr(state, "tenant", "")
    return [f"{tenant}/entity/{ref}" for ref in sorted(getattr(state, "memory_links", {}).get(person, ()))]


def sessions_erased_with(state: object, subject: str) -> list[str]:
    """The sessions whose every key goes with `subject` (as `session:<id>` owners): for a person, every session
    that served them and those sessions' workers; for a session, its workers (and theirs). Their keys own more
    than messages: a fact scoped to one of them (`scope: session:<id>`) is owned by that session alone, so
    forgetting the person must name the session too."""
    sessions = getattr(state, "sessions", {})
    if subject.startswith("person:"):
        todo = [s.session_id for s in sessions.values() if s.serving == subject]
    elif subject.startswith("session:"):
        todo = [subject.split(":", 1)[1]]
    else:
        return []
    found: dict[str, None] = {}
    while todo:
        session_id = todo.pop()
        if f"session:{session_id}" in found:
            continue
        found[f"session:{session_id}"] = None
        session = sessions.get(session_id)
        if session is not None:
            todo.extend(session.workers)
    found.pop(subject, None)
    return list(found)


@dataclass(frozen=True)
class ForgetPlan:
    """What forgetting a subject deletes besides the keys it owns, worked out from the ontology: the groups to
    split (`fact_groups`), further keys (`linked_memories`) and further owners whose every key goes too
    (`sessions_erased_with`)."""

    splits: dict[str, dict[str, frozenset[str]]] = field(default_factory=dict)
    also: tuple[str, ...] = ()
    owners: tuple[str, ...] = ()


def state_snapshot_key(tenant: str) -> ContentKey:
    """The key that seals snapshots of the tenant's folded state (which holds content): deleted by every forget in
    the tenant, so no snapshot taken before it opens again, wherever a copy of it lies."""
    return ContentKey(f"{tenant}/state-snapshot", frozenset())


def forget_plan(state: object, subject: str) -> ForgetPlan:
    splits = fact_groups(state, subject.split(":", 1)[1]) if subject.startswith("fact:") else {}
    return ForgetPlan(splits, tuple(linked_memories(state, subject)), tuple(sessions_erased_with(state, subject)))


def check_subject(subject: str) -> str:
    if not SUBJECT_PATTERN.match(subject):
        raise ValueError(f"{subject!r} is not a forgettable subject: person:<ref>, session:<id>, fact:<id> or "
                         "memory:<ref>")
    return subject
