"""Real forgetting in an append-only log: crypto-shredding.

Content fields (labels and aliases of people and memories, reasons, message contents, tasks, summaries) are
sealed in the log with data keys kept outside it. Each key has owners — the subjects whose forgetting must
erase it. Forgetting a subject deletes every key it owns, so every copy of that content in the log becomes
unreadable, and replays show `[forgotten]` with the structure (ids, refs, relations, times) intact.

Who owns which content (`content_key`); docs/forgetting.md states it as one rule ("a text goes with the person
whose words it is, or whose words it is about when no one else can be named for it"):

- label and aliases of `person:` and `memory:` entities: the entity's key, owned by the entity; a memory's
  key is also deleted when a person a fact links it to is forgotten (`linked_entities`);
- label and aliases of any other entity but agents and sessions (`CLEAR_LABELS`): the entity's key, owned by the
  entity and, when it was named in a session (`session_id`: a consolidation's), by that session, its main
  session and the person it serves; forgetting a person also deletes the keys of the entities linked to them and
  to no other person still remembered (`linked_entities`);
- a fact's reason (assert, corroborate, invalidate, correct): the fact's key, owned by the fact, by its `person:` or
  `session:` scope, and, for an org-scoped fact, by its `person:` subject or object; in an org fact between two
  people, a reason whose author (`author_of`: the person its source session serves, or a `person:` actor) is one
  of them is owned by that person alone, so forgetting the other leaves it. A fact's key is not
  stored on its own: it is derived from the key of its *group* (the facts with the same owners besides
  themselves, e.g. every fact scoped to `person:li`; org facts that name no person are spread over
  `ORG_GROUPS` groups by id). Forgetting an owner of the group deletes the group's key; forgetting one fact
  first stores its siblings' derived keys on their own, then deletes the group's key (`fact_groups`). So a
  new fact costs no key write, and forgetting one fact still erases exactly that fact;
- messages, tasks, worker reports, compaction summaries and payloads, consolidation notes: the session's key,
  owned by the session, its main session (for workers) and the person it serves.

So "forget me" (a person) erases their name, their episodic facts' reasons, the reasons of org facts about
them (but not the other party's own words), the labels of what their sessions named or what is linked to them
alone, and every session that served them: its messages, tasks, reports and summaries, its workers', and the
reasons of facts scoped to any of those sessions (`sessions_erased_with`: the forget deletes the keys those
sessions own as well). Forgetting a session erases its workers' the same way. Nothing more is written into a
forgotten person's sessions (domain/rules.py). Other people's words stay, and nothing else breaks.
"""

from __future__ import annotations

import re
import weakref
from dataclasses import dataclass, field
from functools import cache
from typing import NamedTuple

from domain.entities import EntityRegistered, EntityUpdated
from domain.events import DomainEvent
from domain.facts import FactAsserted, FactCorrected, FactCorroborated, FactInvalidated

FORGOTTEN = "[forgotten]"
"""What a forgotten text reads as, everywhere."""

EMPTY_WHEN_FORGOTTEN = frozenset({"aliases", "mentions", "facts", "invalidations", "rejections"})
"""Content fields that are lists: forgotten, they read as empty."""

CLEAR_LABELS = ("agent:", "session:")
"""Entities whose labels stay in the clear: the organization's own agents, and sessions (whose labels are made
from their ids, never from content). Every other entity's label and aliases are sealed under its own key."""

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


def author_of(state: object, provenance: object) -> str | None:
    """Whose words an event's reason is: the person served by the session it was drawn from (a worker's main
    session's), else a `person:` actor; None when no person can be named."""
    session_id = getattr(provenance, "session_id", None)
    if session_id is not None:
        sessions = getattr(state, "sessions", {})
        session = sessions.get(session_id)
        if session is not None:
            serving = session.serving
            if serving is None and session.parent_session_id in sessions:
                serving = sessions[session.parent_session_id].serving
            if serving is not None and serving.startswith("person:"):
                return serving  # type: ignore[no-any-return]
    actor = getattr(provenance, "actor", None)
    return actor if actor is not None and actor.startswith("person:") else None


def fact_key(tenant: str, fact_id: str, scope: str, subject: str, obj: str, author: str | None = None
             ) -> ContentKey:
    """The key of a fact's reason: owned by the fact and by the people or session it belongs to (its `person:`
    or `session:` scope; for an org fact, a `person:` subject or object), derived from the key of the group of
    facts with the same other owners. In an org fact between two people, a reason whose `author` is one of them
    is that person's own words: sealed for them alone (key id `.../fact/<id>/by/<person>`), so forgetting the
    other party leaves it (and forgetting the author erases it)."""
    key_id = f"{tenant}/fact/{fact_id}"
    if scope != "org":
        found = (tenant, scope, "", "")
    else:
        person_subject = subject if subject.startswith("person:") else ""
        person_object = obj if obj.startswith("person:") else ""
        if author is not None and person_subject and person_object and person_subject != person_object and \
                author in (person_subject, person_object):
            found, key_id = (tenant, "org", author, ""), f"{key_id}/by/{author}"
        elif person_subject or person_object:
            found = (tenant, "org", person_subject, person_object)
        else:
            found = (tenant, "org", "", fact_id[:2])
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
    return ContentKey(key_id, group[1], group[0])


def fact_keys(tenant: str, fact: object) -> list[ContentKey]:
    """Every key a fact's events may be sealed with: the fact's own, and in an org fact between two people, each
    party's (`fact_key` with an author)."""
    fact_id, scope, subject, obj = (getattr(fact, name) for name in ("fact_id", "scope", "subject", "object"))
    keys = [fact_key(tenant, fact_id, scope, subject, obj)]
    if scope == "org" and subject != obj and subject.startswith("person:") and obj.startswith("person:"):
        keys += [fact_key(tenant, fact_id, scope, subject, obj, author) for author in (subject, obj)]
    return keys


def own_owners(key: ContentKey) -> frozenset[str]:
    """Every owner of the key itself: for a group member, the group's owners and the member (`fact:<id>`)."""
    if key.group is None:
        return key.owners
    return key.owners | {"fact:" + key.key_id.split("/fact/", 1)[1].split("/", 1)[0]}


def fact_groups(state: object, fact_id: str) -> dict[str, dict[str, frozenset[str]]]:
    """For forgetting one fact: each group one of its keys is in, with every other fact's key in that group and
    its owners (their keys are stored on their own before the group's key is deleted)."""
    tenant = getattr(state, "tenant", "")
    facts = getattr(state, "facts", {})
    fact = facts.get(fact_id)
    if fact is None:
        return {}
    splits: dict[str, dict[str, frozenset[str]]] = {key.group: {} for key in fact_keys(tenant, fact)
                                                    if key.group is not None}
    for other in facts.values():
        if other.fact_id == fact_id:  # (a fact without a reason may have had one in a corroboration)
            continue
        for key in fact_keys(tenant, other):
            siblings = splits.get(key.group)  # type: ignore[arg-type]
            if siblings is not None:
                siblings[key.key_id] = own_owners(key)
    return splits


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


@cache
def _sealing_rule(cls: type[DomainEvent]) -> int:
    """Which rule below seals this class of event (worked out once per class: every event written asks)."""
    if not cls.content_fields:
        return _NO_KEY
    if issubclass(cls, EntityRegistered | EntityUpdated):
        return _ENTITY
    if issubclass(cls, FactAsserted):
        return _ASSERTED
    if issubclass(cls, FactCorroborated | FactInvalidated | FactCorrected):
        return _FACT
    if "session_id" in cls.model_fields:
        return _SESSION
    return _NO_KEY


def content_key(state: object, event: DomainEvent) -> ContentKey | None:
    """The key that seals this event's content, computed from the ontology as it stands before the event."""
    kind = _sealing_rule(type(event))
    if kind == _NO_KEY:
        return None
    tenant = event.tenant
    if kind == _ENTITY:
        ref = event.ref  # type: ignore[attr-defined]
        if ref.startswith(CLEAR_LABELS):
            return None
        session_id = event.session_id  # type: ignore[attr-defined]
        if session_id is None or ref.startswith(("person:", "memory:")):
            return ContentKey(f"{tenant}/entity/{ref}", frozenset((ref,)))
        # a thing named in a session (a ticket a consolidation found in the conversation): its label is that
        # session's words, and goes with the session and the person it serves
        return ContentKey(f"{tenant}/entity/{ref}", frozenset((ref,)) | _session_owners(state, session_id))
    if kind == _ASSERTED or kind == _FACT:
        if event.reason is None:  # type: ignore[attr-defined]
            return None
        fact_id = event.fact_id  # type: ignore[attr-defined]
        author = author_of(state, event.provenance)  # type: ignore[attr-defined]
        if kind == _ASSERTED:
            return fact_key(tenant, fact_id, event.scope, event.subject, event.object,  # type: ignore[attr-defined]
                            author)
        fact = getattr(state, "facts", {}).get(fact_id)
        if fact is None:
            return fact_key(tenant, fact_id, "org", "", "")
        return fact_key(tenant, fact_id, fact.scope, fact.subject, fact.object, author)
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


_NOT_TAKEN_ALONG = ("person:", *CLEAR_LABELS)


def has_own_label_key(ref: str) -> bool:
    """Whether an entity's label is sealed under a key of its own that a forgotten person may take along (see
    `linked_entities`): every entity but people (their own key, erased with them) and `CLEAR_LABELS`."""
    return not ref.startswith(_NOT_TAKEN_ALONG)


def linked_entities(state: object, person: str) -> list[str]:
    """The keys of the entities whose labels go with a person (found in the ontology's `entity_links`, kept as
    facts are asserted, so writing a fact records nothing for it): every `memory:` entity a fact links to the
    person, and every other entity linked to no person still remembered but them. A fact links the entities it
    names to the people it names (subject, object, scope) and to the person served by its `session:` scope or
    by the session it was drawn from."""
    if not person.startswith("person:"):
        return []
    tenant = getattr(state, "tenant", "")
    people = getattr(state, "linked_people", {})
    forgotten = getattr(state, "forgotten_people", {})
    found = []
    for ref in sorted(getattr(state, "entity_links", {}).get(person, ())):
        if ref.startswith("memory:") or not any(p != person and p not in forgotten for p in people.get(ref, ())):
            found.append(f"{tenant}/entity/{ref}")
    return found


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
    split (`fact_groups`), further keys (`linked_entities`) and further owners whose every key goes too
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
    return ForgetPlan(splits, tuple(linked_entities(state, subject)), tuple(sessions_erased_with(state, subject)))


def check_subject(subject: str) -> str:
    if not SUBJECT_PATTERN.match(subject):
        raise ValueError(f"{subject!r} is not a forgettable subject: person:<ref>, session:<id>, fact:<id> or "
                         "memory:<ref>")
    return subject
