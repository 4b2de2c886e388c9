"""Finding entities (by name, kind or ref, among those the caller may see), the relations in use, and curating
entities: the ones under review, merged or kept apart."""

from __future__ import annotations

from typing import Any

from domain import commands as c
from domain.access import Caller, as_caller, scopes_seen
from domain.application.entities import merge_entities
from domain.application.entity_finder import EntityFinder
from domain.application.use_cases.core import Core
from domain.application.use_cases.results import RelationInUse, ReviewItem, Written
from domain.entity_names import Found, NamedEntity
from domain.resolution import NameIndex


class Entities:
    def __init__(self, core: Core, names: EntityFinder) -> None:
        self._core = core
        self._names = names

    def entity(self, who: Caller | str, ref: str, min_position: int | None = None) -> dict[str, Any] | None:
        """One entity as it is now (tenant-wide keys)."""
        tenant = self._core.tenant_wide(who, "reading entities")
        self._core.fresh(tenant, min_position)
        return self._core.require_read_model().entity(tenant, ref)

    def search_entities(self, who: Caller | str, text: str, skip: int, limit: int, min_position: int | None = None
                        ) -> tuple[list[dict[str, Any]], int]:
        """Entities by ref, label or alias (tenant-wide keys)."""
        tenant = self._core.tenant_wide(who, "reading entities")
        self._core.fresh(tenant, min_position)
        return self._core.require_read_model().search_entities(tenant, text, skip, limit)

    def find_entities(self, who: Caller | str, text: str, limit: int = 10, min_position: int | None = None,
                      kind: str | None = None) -> tuple[list[Found], int]:
        """The entities `text` may name (ref, label, alias; Chinese or Latin; exact, prefix, word or one typo
        away), best first, of those the caller may see (domain/application/entity_finder.py) and of `kind` if
        given; and how many there were in all."""
        caller = as_caller(who)
        self._core.fresh(caller.tenant, min_position)
        return self._names.find(caller.tenant, text, limit, caller.agents, kind)

    def entities_of_kind(self, who: Caller | str, kind: str, skip: int, limit: int, min_position: int | None = None
                         ) -> tuple[list[NamedEntity], int]:
        """A page of the tenant's entities of `kind`, by ref, and how many there are (tenant-wide keys)."""
        tenant = self._core.tenant_wide(who, "listing entities")
        self._core.fresh(tenant, min_position)
        every = self._names.of_kind(tenant, kind)
        return every[skip:skip + limit], len(every)

    def resolve_ref(self, who: Caller | str, value: str, field: str) -> str:
        """A ref given as itself or by an unambiguous name the caller may see (AmbiguousName, listing the
        candidates, otherwise)."""
        caller = as_caller(who)
        return self._names.resolve(caller.tenant, value, field, caller.agents)

    def relations(self, who: Caller | str) -> list[RelationInUse]:
        """Every relation type the tenant knows (built in or defined) and every relation name its current facts
        use, with its rules (functional: a new object supersedes the old) and how many current facts use it."""
        caller = as_caller(who)
        with self._core.service.reading(caller.tenant) as state:
            seen = scopes_seen(state, caller.agents)  # a scoped key counts only facts its agents see
            counts: dict[str, int] = {}
            for _subject, relation, _object, scope in state.current_by_key:
                if seen(scope):
                    counts[relation] = counts.get(relation, 0) + 1
            known = dict(state.relation_types)
            rules = {name: state.relation(name) for name in set(known) | set(counts)}
        return sorted((RelationInUse(name=name, functional=rule.functional, symmetric=rule.symmetric,
                                     weight=rule.weight, defined=name in known, current_facts=counts.get(name, 0))
                       for name, rule in rules.items()), key=lambda r: (-r.current_facts, r.name))

    # ------------------------------------------------------------------ entities under review

    def entities_to_review(self, who: Caller | str) -> list[ReviewItem]:
        """Entities marked needs_review (an ambiguous mention never merges silently), with their look-alikes."""
        tenant = self._core.tenant_wide(who, "reviewing entities")
        with self._core.service.reading(tenant) as state:
            names = NameIndex(state)
            return [ReviewItem(entity, sorted((names.exact(entity.label) | names.fuzzy(entity.label)) - {entity.ref}))
                    for entity in state.entities.values() if entity.needs_review and entity.merged_into is None]

    def merge_entities(self, who: Caller | str, merged_ref: str, into_ref: str, reason: str = "reviewed: same entity"
                       ) -> int:
        """Merge `merged_ref` into `into_ref` (recorded as an event); its current facts move. Returns how many."""
        tenant = self._core.tenant_wide(who, "merging entities")
        moved = merge_entities(self._core.service, tenant, merged_ref, into_ref, reason)
        self._core.written([self._core.service.last_position or 0])
        return moved

    def keep_entity(self, who: Caller | str, ref: str) -> Written:
        """Mark a reviewed entity as distinct (clears needs_review)."""
        tenant = self._core.tenant_wide(who, "reviewing entities")
        return self._core.run(c.KeepEntity(tenant=tenant, ref=ref))
