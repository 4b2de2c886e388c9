"""The in-memory perspective index of one tenant: the ontology as numpy arrays, kept current by applying the log's
records, and queried by the spreading walk (`projections/perspective_walk.py`).

Its parts, each in its own module:

- entities (here): `hub` (bool), `kind` (int16 code), `fan` (int32: current facts touching it), `fan_org` (the
  current org facts among them: the part of the fan every viewer sees), `canonical` (the entity it stands for
  after merges); refs and labels are two Python lists (one entry per entity, never touched by the walk) and a
  ref -> id dict used only to resolve the few refs a query names.
- facts (here): `src`, `dst` (int32 entity ids), `rel` (int16 code), `scope` (int32 code), `conf` (float32),
  `status` (int8: 0 current, 1 invalidated, 2 archived), `live` (scope code + 1 while current, else 0),
  `asserted` (float64 epoch seconds), and two UTF-8 text blobs (reason, provenance). Storage:
  `perspective_columns`.
- `fact_ids` (`perspective_fact_ids`): each fact's id, and the lookup of a fact id's row.
- `scopes` (`perspective_scopes`): who may see which scope, and the sessions.
- `adjacency` (`perspective_adjacency`): the CSR the walk reads, rebuilt in bulk, with a delta tail.
- `uses` (`perspective_uses`): per agent, its recalls; under `LOG_KEYS`, the corroborations and corrections.
- `episodes` (`perspective_uses`): per person, the moments of their sessions and compactions (the clock of
  their episodic facts); `mentioned` (per entity, float64): the latest moment a fact naming it was asserted or a
  worker was about it. Both dated where they happened (`dated`).
- `walk_scratch` (`perspective_walk.WalkScratch`): the walk's per-entity buffers, one walk at a time.

What the walk reads of the parts it asks of them itself (`index.scopes.visible_codes(...)`,
`index.adjacency.expand(index, ...)`): the index's own methods are the codes, applying records, and keeping its
arrays ready for a walk.

It is built (a) by applying the log's records in order (`apply`), which is how a follower keeps it current and
how an as-of index is folded, or (b) in bulk from the DuckDB read model or from frames
(`projections/perspective_load.py`) at start. Nothing on the query path touches SQL or a dict per fact.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

import numpy as np

from domain.activation import ActivationParameters
from domain.relations import BUILTIN_RELATIONS
from projections.perspective_adjacency import Adjacency
from projections.perspective_columns import Column, Texts
from projections.perspective_fact_ids import FactIds
from projections.perspective_scopes import Scopes
from projections.perspective_uses import CORRECTIONS, CORROBORATIONS, Episodes, Uses
from projections.perspective_walk import (  # noqa: F401  (re-exported: the index's query types)
    TIER_CODES,
    TIERS_BY_CODE,
    Viewpoint,
    Walked,
    WalkScratch,
    tier_codes,
    walk,
)

CURRENT, INVALIDATED, ARCHIVED = 0, 1, 2
STATUS_CODES = {"current": CURRENT, "invalidated": INVALIDATED, "archived": ARCHIVED}
COMPACT_AT = 4_096
"""Delta facts beyond this many (and beyond 2% of all facts) trigger a CSR rebuild before the next query; while
records are applied, beyond this many and a quarter of all facts."""


def timestamp(value: Any) -> float:
    """Epoch seconds of an ISO string or an aware datetime."""
    if isinstance(value, datetime):
        return value.timestamp()
    return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()


class PerspectiveIndex:
    """One tenant's ontology as arrays, kept current by `apply`, queried by `walk`."""

    def __init__(self, tenant: str) -> None:
        self.tenant = tenant
        self.position = 0
        """The last log position applied."""
        self.clock = -math.inf
        """Transaction time of the last record applied (running maximum), epoch seconds."""
        # entities
        self.refs: list[str] = []
        self.labels: list[str] = []
        self.replaced_labels: set[int] = set()
        """Entities whose label was set from the read model after a forget (`perspective_load.texts_now`)."""
        self.entity_ids: dict[str, int] = {}
        self.hub = Column(np.bool_)
        self.kind = Column(np.int16)
        self.fan = Column(np.int32)
        self.fan_org = Column(np.int32)
        """Current org-scoped facts per entity: the part of the fan every viewer sees (`viewer_fan_extra` adds
        the viewer's own scopes)."""
        self.canonical = Column(np.int32)
        """The entity each entity stands for: itself, or the one it was merged into (`entity.merged`)."""
        self.mentioned = Column(np.float64)
        """The latest moment a fact naming the entity was asserted, or a worker was about it (-inf: never): a
        later mention is a use of the entity's older facts (`domain.activation`, tiers)."""
        self.kind_names: list[str] = []
        self.kind_codes: dict[str, int] = {}
        # relations
        self.rel_names: list[str] = []
        self.rel_codes: dict[str, int] = {}
        self.rel_weight = Column(np.float32)
        self.max_weight = 1.0
        """The largest relation weight (what the walk's cut-off assumes a fact beyond a node may carry)."""
        # facts
        self.src = Column(np.int32)
        self.dst = Column(np.int32)
        self.rel = Column(np.int16)
        self.scope = Column(np.int32)
        self.conf = Column(np.float32)
        self.status = Column(np.int8)
        self.live = Column(np.int32)
        """scope code + 1 while the fact is current, else 0: one gather answers "current and visible"."""
        self.asserted = Column(np.float64)
        self.reasons = Texts()
        self.provenance = Texts()
        # the parts
        self.fact_ids = FactIds()
        self.scopes = Scopes()
        self.adjacency = Adjacency()
        self.uses = Uses()
        self.episodes = Episodes()
        self.walk_scratch = WalkScratch()
        self._hubs: np.ndarray | None = None
        self._share_cache: tuple[float, np.ndarray] | None = None
        self.scope_code("org")
        for relation in BUILTIN_RELATIONS.values():
            self.relation(relation.name, relation.weight)

    # ------------------------------------------------------------------------------------------ codes

    def relation(self, name: str, weight: float | None = None) -> int:
        """The code of relation `name`, registering it if new; `weight` (re)defines its weight."""
        code = self.rel_codes.get(name)
        if code is None:
            code = self.rel_codes[name] = len(self.rel_names)
            self.rel_names.append(name)
            self.rel_weight.append(1.0 if weight is None else weight)
        elif weight is not None:
            self.rel_weight.data[code] = weight
            self.adjacency.weights_stale = True
        self.max_weight = float(self.rel_weight.view.max())
        return code

    def _kind(self, ref: str) -> int:
        name = ref.split(":", 1)[0]
        code = self.kind_codes.get(name)
        if code is None:
            code = self.kind_codes[name] = len(self.kind_names)
            self.kind_names.append(name)
        return code

    def entity(self, ref: str, label: str | None = None, hub: bool | None = None) -> int:
        """The id of `ref`, registering it if new (with `label`/`hub` when given)."""
        eid = self.entity_ids.get(ref)
        if eid is None:
            eid = self.entity_ids[ref] = len(self.refs)
            self.refs.append(ref)
            self.labels.append(label or ref)
            self.hub.append(bool(hub))
            self._hubs = None
            self.kind.append(self._kind(ref))
            self.fan.append(0)
            self.fan_org.append(0)
            self.canonical.append(eid)
            self.mentioned.append(-math.inf)
        else:
            if label is not None:
                self.labels[eid] = label
            if hub is not None:
                self.hub.data[eid] = hub
                self._hubs = None
        return eid

    def scope_code(self, name: str) -> int:
        """The code of scope `name`, registering it if new."""
        code = self.scopes.code(name)
        if code is not None:
            return code
        person = self.resolve(self.entity(name)) if name.startswith("person:") else -1
        return self.scopes.add(name, person)

    def session(self, session_id: str, agent: int, serving: int) -> None:
        """A session's agent and the person it serves (entity ids; -1: no one)."""
        self.scopes.session(session_id, agent, serving)

    def resolve(self, eid: int) -> int:
        """The entity `eid` stands for now (itself unless it was merged into another)."""
        return int(self.canonical.data[eid])

    def lookup(self, ref: str) -> int | None:
        """The id of the entity `ref` stands for now (a merged ref resolves to the entity it was merged into)."""
        eid = self.entity_ids.get(ref)
        return None if eid is None else int(self.canonical.data[eid])

    @property
    def fact_count(self) -> int:
        return self.src.size

    # ------------------------------------------------------------------------------------------ applying records

    def apply(self, position: int, topic: str, data: dict[str, Any]) -> None:
        """Apply one logged record (topic without version, payload as a dict) of this tenant."""
        at = timestamp(data["recorded_at"]) if "recorded_at" in data else self.clock
        self.clock = max(self.clock, at)
        self.position = max(self.position, position)
        handler = _HANDLERS.get(topic)
        if handler is not None:
            handler(self, data, self.clock)

    def _entity_registered(self, d: dict[str, Any], at: float) -> None:
        self.entity(d["ref"], d.get("label"), bool(d.get("hub", False)))

    def _relation_defined(self, d: dict[str, Any], at: float) -> None:
        self.relation(d["name"], float(d["weight"]))

    def _session_started(self, d: dict[str, Any], at: float) -> None:
        serving = d.get("serving")
        person = self.resolve(self.entity(serving)) if serving else -1
        self.session(d["session_id"], self.resolve(self.entity(d["agent"])), person)
        if person >= 0:
            self.episodes.record(person, dated(d.get("occurred_at"), at))

    def _session_compacted(self, d: dict[str, Any], at: float) -> None:
        person = self.scopes.sessions.get(d["session_id"], (-1, -1))[1]
        if person >= 0:
            self.episodes.record(self.resolve(person), dated(d.get("occurred_at"), at))

    def _worker_dispatched(self, d: dict[str, Any], at: float) -> None:
        if d["worker_session_id"] not in self.scopes.sessions:
            self.session(d["worker_session_id"], *self.scopes.sessions.get(d["session_id"], (-1, -1)))
        self._worker_about(d, at)

    def _worker_about(self, d: dict[str, Any], at: float) -> None:
        moment = dated(d.get("occurred_at"), at)
        for ref in d.get("about") or ():
            self._mention(self.resolve(self.entity(ref)), moment)

    def _mention(self, eid: int, moment: float) -> None:
        """Entity `eid` was named at `moment` (a running maximum: only the latest mention is kept)."""
        if moment > self.mentioned.data[eid]:
            self.mentioned.data[eid] = moment

    def _fact_asserted(self, d: dict[str, Any], at: float) -> None:
        subject, obj = self.resolve(self.entity(d["subject"])), self.resolve(self.entity(d["object"]))
        index = self.src.append(subject)
        self.dst.append(obj)
        self.rel.append(self.relation(d["relation"]))
        self.scope.append(self.scope_code(d["scope"]))
        self.conf.append(float(d["confidence"]))
        self.status.append(CURRENT)
        self.live.append(int(self.scope.data[index]) + 1)
        first = first_use(d, at)
        self.asserted.append(first)
        self.fact_ids.add(d["fact_id"])
        self.reasons.append(d.get("reason") or "")
        self.provenance.append(provenance_text(d.get("provenance") or {}))
        self._mention(subject, first)
        self._mention(obj, first)
        self._fan(index, +1)
        if self.fact_ids.recent > COMPACT_AT and self.fact_ids.recent > self.fact_count // 4:
            self.compact()  # while folding, rebuild rarely (a quarter more facts); a query compacts sooner

    def _fan(self, index: int, delta: int) -> None:
        subject, obj = int(self.src.data[index]), int(self.dst.data[index])
        self.fan.data[subject] += delta
        if obj != subject:
            self.fan.data[obj] += delta
        if int(self.scope.data[index]) != 0:
            return  # only org facts are in every viewer's fan (the rest is added per viewer: `viewer_fan_extra`)
        self.fan_org.data[subject] += delta
        if obj != subject:
            self.fan_org.data[obj] += delta
        cached = self._share_cache
        if cached is not None:
            exp_s, shares = cached
            for node in (subject, obj):
                if node < len(shares):
                    shares[node] = min(1.0, exp_s / max(int(self.fan_org.data[node]), 1))

    def _set_status(self, fact_id: str, status: int) -> None:
        index = self.fact_ids.find(fact_id)
        if index is None:
            return
        was = int(self.status.data[index])
        if was == status:
            return
        self.status.data[index] = status
        live = int(self.scope.data[index]) + 1 if status == CURRENT else 0
        self.live.data[index] = live
        self.adjacency.update_live(self, index, live)
        if was == CURRENT:
            self._fan(index, -1)
        elif status == CURRENT:
            self._fan(index, +1)

    def _fact_corroborated(self, d: dict[str, Any], at: float) -> None:
        index = self.fact_ids.find(d["fact_id"])
        if index is not None:
            self.conf.data[index] = float(d["confidence"])
            self.uses.record(CORROBORATIONS, [index], first_use(d, at))

    def _fact_corrected(self, d: dict[str, Any], at: float) -> None:
        index = self.fact_ids.find(d["fact_id"])
        if index is not None:
            self.uses.record(CORRECTIONS, [index], first_use(d, at))

    def _facts_recalled(self, d: dict[str, Any], at: float) -> None:
        agent = self.resolve(self.entity(d["agent"]))
        found = [self.fact_ids.find(fact_id) for fact_id in d["fact_ids"]]
        self.uses.record(agent, [index for index in found if index is not None], at)

    def _recalls_coalesced(self, d: dict[str, Any], at: float) -> None:
        """Each use at its own moment (`since + seconds`), never later than the clock."""
        since = timestamp(d["since"])
        for group in d["uses"]:
            agent = self.resolve(self.entity(group["agent"]))
            for fact_id, offset in zip(group["fact_ids"], group["seconds"], strict=True):
                index = self.fact_ids.find(fact_id)
                if index is not None:
                    self.uses.record(agent, [index], min(since + offset, at))

    def _entities_merged(self, d: dict[str, Any], at: float) -> None:
        """`merged_ref` is the same thing as `into_ref`: from now on every ref, scope, session, use and fact
        naming it stands for the survivor. The merge workflow has already moved its current facts (ended and
        asserted again on the survivor); any fact still on it, or named by it later, is joined to the survivor."""
        self.merge(self.entity(d["merged_ref"]), self.entity(d["into_ref"]))

    def merge(self, merged: int, into: int) -> None:
        into = self.resolve(into)
        merged = self.resolve(merged)
        if merged == into:
            return
        canonical = self.canonical.view
        canonical[canonical == merged] = into
        self.scopes.merge(merged, into)
        self.uses.merge(merged, into)
        self.episodes.merge(merged, into)
        self._mention(into, float(self.mentioned.data[merged]))
        src, dst = self.src.view, self.dst.view
        moving = np.flatnonzero((src == merged) | (dst == merged))
        if len(moving):
            current = [int(f) for f in moving if self.status.data[f] == CURRENT]
            for fact in current:
                self._fan(fact, -1)
            src[src == merged] = into
            dst[dst == merged] = into
            for fact in current:
                self._fan(fact, +1)
            self.adjacency.rows_stale = True  # rows moved between entities: rebuilt before the next walk

    # ------------------------------------------------------------------------------------------ bulk building

    def compact(self) -> None:
        """Rebuild the CSR adjacency and the sorted id hashes over every fact (bulk, vectorized)."""
        self.adjacency.build(self)
        self.fact_ids.sort()

    def prepare_for_walk(self) -> None:
        """Rebuild the CSR if facts moved between entities or the delta tail has grown long."""
        delta = self.fact_count - self.adjacency.facts
        if self.adjacency.rows_stale and self.adjacency.facts:
            self.compact()
        elif delta > COMPACT_AT and delta > self.fact_count // 50 or self.adjacency.rows < len(self.refs) // 2:
            self.compact()

    def nbytes(self) -> dict[str, int]:
        """Bytes held by the index, by part (capacity of the arrays, plus estimates of the Python lists)."""
        fact_columns = (self.src, self.dst, self.rel, self.scope, self.conf, self.status, self.live, self.asserted)
        entity_lists = sum(len(r) + len(lb) + 120 for r, lb in zip(self.refs, self.labels, strict=True))
        return {
            "facts": sum(c.nbytes for c in fact_columns) + self.fact_ids.nbytes,
            "texts": self.reasons.nbytes + self.provenance.nbytes,
            "adjacency": self.adjacency.nbytes,
            "scratch": self.walk_scratch.nbytes,
            "entities": (self.hub.nbytes + self.kind.nbytes + self.fan.nbytes + self.fan_org.nbytes
                         + self.mentioned.nbytes + entity_lists),
            "uses": self.uses.nbytes + self.episodes.nbytes,
        }

    # ------------------------------------------------------------------------------------------ what the walk reads

    def hub_nodes(self) -> np.ndarray:
        """The ids of the hub entities (reached by a walk, never expanded)."""
        if self._hubs is None:
            self._hubs = np.nonzero(self.hub.view)[0].astype(np.int64)
        return self._hubs

    def fan_shares(self, exp_s: float) -> np.ndarray:
        """min(1, e^S / fan_org) per entity, cached for one S and kept current as facts come and go: the fan
        share of a node for a viewer who sees none of its non-org facts (`viewer_fan_extra` adds the viewer's
        own)."""
        cached = self._share_cache
        n = len(self.refs)
        if cached is None or cached[0] != exp_s:
            cached = self._share_cache = (exp_s, np.minimum(1.0, exp_s / np.maximum(self.fan_org.view, 1)))
        elif len(cached[1]) < n:
            tail = np.minimum(1.0, exp_s / np.maximum(self.fan_org.view[len(cached[1]):], 1))
            cached = self._share_cache = (exp_s, np.concatenate([cached[1], tail]))
        return cached[1]

    # ------------------------------------------------------------------------------------------ the query

    def walk(self, viewpoint: Viewpoint, parameters: ActivationParameters, now: float) -> Walked:
        """Spread activation from the viewpoint, rank every reached fact and cut the ranking into tiers
        (`projections.perspective_walk.walk`)."""
        return walk(self, viewpoint, parameters, now)


def first_use(fact: dict[str, Any], recorded: float) -> float:
    """When an asserted (corroborated, corrected) fact counts as used, for activation and recency: when its source
    says it happened (`provenance.occurred_at`), clamped to when it was recorded (`dated`)."""
    return dated((fact.get("provenance") or {}).get("occurred_at"), recorded)


def dated(occurred: Any, recorded: float) -> float:
    """The moment something counts as having happened: the source's own clock (`occurred_at`), clamped to when it
    was recorded. A fact backfilled from an old conversation is not "used just now"; a source clock ahead of ours
    never puts a use in the future."""
    if not occurred:
        return recorded
    try:
        return min(timestamp(occurred), recorded)
    except ValueError:
        return recorded


def provenance_text(provenance: dict[str, Any]) -> str:
    """One line saying where a fact came from: session, messages, who extracted it."""
    parts = []
    if provenance.get("session_id"):
        parts.append(f"session {provenance['session_id']}")
    if provenance.get("message_ids"):
        parts.append("messages " + ", ".join(provenance["message_ids"]))
    if provenance.get("actor"):
        parts.append(f"by {provenance['actor']}")
    return "; ".join(parts)


_HANDLERS = {
    "entity.registered": PerspectiveIndex._entity_registered,
    "entity.updated": PerspectiveIndex._entity_registered,
    "relation.defined": PerspectiveIndex._relation_defined,
    "session.started": PerspectiveIndex._session_started,
    "worker.dispatched": PerspectiveIndex._worker_dispatched,
    "worker.reported": PerspectiveIndex._worker_about,
    "session.compacted": PerspectiveIndex._session_compacted,
    "entity.merged": PerspectiveIndex._entities_merged,
    "fact.asserted": PerspectiveIndex._fact_asserted,
    "fact.corroborated": PerspectiveIndex._fact_corroborated,
    "fact.corrected": PerspectiveIndex._fact_corrected,
    "fact.invalidated": lambda self, d, at: self._set_status(d["fact_id"], INVALIDATED),
    "fact.archived": lambda self, d, at: self._set_status(d["fact_id"], ARCHIVED),
    "fact.restored": lambda self, d, at: self._set_status(d["fact_id"], CURRENT),
    "facts.recalled": PerspectiveIndex._facts_recalled,
    "recalls.coalesced": PerspectiveIndex._recalls_coalesced,
}


def fold(tenant: str, records: Iterable[tuple[int, str, dict[str, Any]]], until: float | None = None,
         then: Callable[[PerspectiveIndex, int, str, dict[str, Any]], None] | None = None) -> PerspectiveIndex:
    """An index folded from (position, topic, payload) records of any tenants, keeping `tenant`'s, up to the
    transaction time `until` (epoch seconds; the clock is the running maximum of the stamps). `then` is called
    after each record of the tenant is applied (an index that follows this one: search)."""
    index = PerspectiveIndex(tenant)
    clock = -math.inf
    for position, topic, data in records:
        if "recorded_at" in data:
            clock = max(clock, timestamp(data["recorded_at"]))
        if until is not None and clock > until:
            break
        if data.get("tenant") == tenant:
            index.apply(position, topic, data)
            if then is not None:
                then(index, position, topic, data)
    index.compact()
    return index
