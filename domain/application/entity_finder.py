"""Finding entities by name, for every entry point (HTTP `GET /v1/entities?q=`, the CLI's `entities find`, the MCP
tool `find_entities`), and turning a name given where a ref is expected into that ref.

The index (domain/entity_names.py) is kept per tenant in this process and follows the read model: each lookup
first applies the entities that changed since the position it was built at (a query of those rows only). When the
read model is rebuilt without forgotten content, the purged tenants' indexes are dropped at once (`forgotten`, called
by the projector's follower and by an in-process forget) and built again at their next lookup, so a forgotten label
is neither found nor kept in this process. A process without a read model (the CLI) builds it from the tenant's
state for each lookup.

What a caller may see: a tenant-wide key finds every entity. A key scoped to agents finds its own agents, the
persons they serve (domain/access.py), and the entities that are neither persons nor memories nor sessions (the
organization's agents, files, tickets, ...): the name of a person its agents do not serve, a remembered statement
or a session is never shown to it, and not counted.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from domain.access import persons_served
from domain.application.ontology_service import OntologyService
from domain.entity_names import EntityNames, Found, NamedEntity
from domain.errors import DomainError, InvalidInput
from domain.ports import ReadModel
from domain.values import REF_PATTERN

_CONTROL = re.compile(r"[\x00-\x1f\x7f\x85]")
HIDDEN_FROM_AGENT_KEYS = ("memory", "session")
"""Kinds of entity whose names an agent-scoped key never finds (their label is content or a conversation)."""
RESOLVING_MATCHES = ("ref", "exact")
"""A name given in place of a ref resolves only through one of these: a typo or a word is never taken for a ref."""


class AmbiguousName(DomainError):
    """A name given where a ref is expected names no entity, or several: the candidates say which to use."""

    def __init__(self, name: str, field: str, candidates: list[Found]) -> None:
        if candidates:
            listed = ", ".join(f"{c.ref} ({c.label})" for c in candidates[:5])
            message = (f"{name!r} may name {len(candidates)} entities: {listed}; pass the ref you mean")
        else:
            message = (f"no entity you may see is named {name!r}; pass a ref (kind:id, e.g. person:li) or register"
                       " the entity first")
        super().__init__(message, field=field)
        self.name = name
        self.candidates = candidates


@dataclass
class _Followed:
    names: EntityNames
    position: int
    generation: int


class EntityFinder:
    """One per process: the per-tenant name indexes and the rules of who may see what."""

    def __init__(self, service: OntologyService, read_model: Callable[[], ReadModel | None]) -> None:
        self._service = service
        self._read_model = read_model
        self._indexes: dict[str, _Followed] = {}
        self._lock = threading.Lock()
        """Taken by a lookup bringing an index up to date, across its read of the read model."""
        self._drop_lock = threading.Lock()
        """Taken to change an index or drop it. Not `_lock`: a lookup holds that while its read waits for a
        forgetting tenant to be cleared, which ends only after the indexes were dropped (`forgotten`)."""
        self._drops = 0
        """How many times indexes were dropped: a lookup whose read overlapped a drop starts again."""

    def _rows_to_index(self, names: EntityNames, rows: list[dict[str, Any]]) -> None:
        for row in rows:
            if row.get("merged_into"):
                names.remove(row["ref"])
            else:
                names.add(NamedEntity(row["ref"], row["label"] or "", tuple(row["aliases"] or ()), bool(row["hub"])))

    def _from_state(self, tenant: str) -> EntityNames:
        with self._service.reading(tenant) as state:
            return EntityNames(NamedEntity(e.ref, e.label, tuple(e.aliases), e.hub) for e in state.entities.values()
                               if e.merged_into is None)

    def names(self, tenant: str) -> EntityNames:
        """The tenant's index, brought up to the read model's position (or built from the state without one)."""
        read_model = self._read_model()
        if read_model is None:
            return self._from_state(tenant)
        with self._lock:
            while True:
                drops = self._drops
                followed = self._indexes.get(tenant)
                generation = read_model.generation
                if (followed is not None and followed.generation == generation
                        and followed.position == read_model.position):
                    return followed.names
                after = followed.position if followed is not None and followed.generation == generation else -1
                rows, position = read_model.entities_since(tenant, after)
                with self._drop_lock:
                    if self._drops != drops:  # dropped meanwhile: the old index may hold forgotten labels
                        continue
                    if after < 0:
                        followed = _Followed(EntityNames(), position, generation)
                        self._indexes[tenant] = followed
                    assert followed is not None
                    self._rows_to_index(followed.names, rows)
                    followed.position = position
                    return followed.names

    def forgotten(self, tenants: list[str] | None = None) -> None:
        """Content of `tenants` (None: any) was forgotten: drop their indexes (they hold labels), to be built again
        from the purged read model at their next lookup."""
        with self._drop_lock:
            self._drops += 1
            if tenants is None:
                self._indexes.clear()
            for tenant in tenants or ():
                self._indexes.pop(tenant, None)

    def _may_see(self, tenant: str, agents: Collection[str]) -> Callable[[str], bool] | None:
        if not agents:
            return None
        with self._service.reading(tenant) as state:
            served = persons_served(state, agents)
        mine = set(agents)

        def may_see(ref: str) -> bool:
            kind = ref.partition(":")[0]
            if ref in mine or ref in served:
                return True
            return kind != "person" and kind not in HIDDEN_FROM_AGENT_KEYS
        return may_see

    def find(self, tenant: str, text: str, limit: int = 10, agents: Collection[str] = (), kind: str | None = None
             ) -> tuple[list[Found], int]:
        """The `limit` entities `text` most likely names that the caller may see (of `kind` only, if given), best
        first, and how many it may name in all."""
        names = self.names(tenant)
        may_see = self._may_see(tenant, agents)
        if kind is not None:
            seen_by_caller, prefix = may_see, f"{kind}:"

            def may_see(ref: str) -> bool:
                return ref.startswith(prefix) and (seen_by_caller is None or seen_by_caller(ref))
        with self._lock:
            return names.find(text, limit, may_see=may_see)

    def of_kind(self, tenant: str, kind: str) -> list[NamedEntity]:
        """Every entity of `kind` in the tenant, by ref (for tenant-wide callers: nothing is hidden here)."""
        names = self.names(tenant)
        with self._lock:
            return names.of_kind(kind)

    def resolve(self, tenant: str, value: str, field: str, agents: Collection[str] = ()) -> str:
        """`value` itself when it is a ref; else the one entity it names exactly (label, alias or identifier).
        AmbiguousName, listing the candidates, when it names none or several."""
        if REF_PATTERN.fullmatch(value):
            return value
        if _CONTROL.search(value):
            raise InvalidInput(f"{value!r} holds a control character (a newline, a tab): pass a ref or a name without"
                               " one", field=field)
        found, _ = self.find(tenant, value, 10, agents)
        exact = [f for f in found if f.match in RESOLVING_MATCHES]
        if len(exact) == 1:
            return exact[0].ref
        raise AmbiguousName(value, field, exact or found)
