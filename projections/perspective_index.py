"""The in-memory perspective index of one tenant: the ontology as numpy arrays, and the spreading walk over it.

Layout (all columns are numpy arrays indexed by an int id; no Python object per fact):

- entities: `hub` (bool), `kind` (int16 code), `fan` (int32: current facts touching it), `fan_org` (the
  current org facts among them: the part of the fan every viewer sees), `canonical` (the entity it stands for
  after merges); refs and labels are two Python lists (one entry per entity, never touched by the walk) and a
  ref -> id dict used only to resolve the few refs a query names.
- facts: `src`, `dst` (int32 entity ids), `rel` (int16 code), `scope` (int32 code), `conf` (float32),
  `status` (int8: 0 current, 1 invalidated, 2 archived), `live` (scope code + 1 while current, else 0),
  `asserted` (float64 epoch seconds), the id as 32 ASCII bytes, a 64-bit hash of the id kept sorted for
  lookups, and two UTF-8 text blobs (reason, provenance) addressed by int64 offsets.
- adjacency: CSR over the undirected graph (`indptr`, `deg`), its entries packed with what the walk and the
  ranking read of each fact (`adj_reach`: neighbour and `live`; `adj_fact`: fact, relation weight, confidence;
  `adj_rank`: assertion time and id hash), so a query reads whole rows instead of scattered fact columns;
  rebuilt in bulk; facts appended since the last build are a short "delta" tail scanned with vectorized
  comparisons until the next compaction. Per scope, the (end, fact) pairs of its facts, for the viewer's fan.
- scopes: per scope code its kind (org / person / session), the person it names, the session's agent and the
  person that session serves.
- uses: per agent, growable arrays (fact id, time) of its recalls; the assertion is every agent's first use.

It is built (a) by applying the log's records in order (`apply`), which is how a follower keeps it current and
how an as-of index is folded, or (b) in bulk from the DuckDB read model (`from_duckdb`) or from frames
(`from_frames`) at start. Nothing on the query path touches SQL or a dict per fact.
"""

from __future__ import annotations

import hashlib
import math
import threading
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any

import numpy as np

from domain.activation import ActivationParameters
from domain.relations import BUILTIN_RELATIONS
from projections.perspective_walk import (  # noqa: F401  (re-exported: the index's query types)
    TIER_CODES,
    TIERS_BY_CODE,
    Viewpoint,
    Walked,
    base_levels,
    path,
    spread_floor,
    tier_codes,
    walk,
)

CURRENT, INVALIDATED, ARCHIVED = 0, 1, 2
STATUS_CODES = {"current": CURRENT, "invalidated": INVALIDATED, "archived": ARCHIVED}
SCOPE_ORG, SCOPE_PERSON, SCOPE_SESSION = 0, 1, 2
STAMP_STRIDE = 1 << 10
"""Walk stamps advance by this much: a node's stamp is the walk's plus its hop (< STOP), stop points' plus STOP."""
STOP = STAMP_STRIDE - 1
STAMP_LIMIT = (1 << 31) - 1 - 2 * STAMP_STRIDE
COMPACT_AT = 4_096
"""Delta facts beyond this many (and beyond 2% of all facts) trigger a CSR rebuild before the next query; while
records are applied, beyond this many and a quarter of all facts."""


def timestamp(value: Any) -> float:
    """Epoch seconds of an ISO string or an aware datetime."""
    if isinstance(value, datetime):
        return value.timestamp()
    return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()


def id_hash(fact_id: str) -> int:
    """A signed 64-bit hash of a fact id: the first 16 hex digits of our uuid ids, blake2b for anything else."""
    try:
        value = int(fact_id[:16], 16) if len(fact_id) >= 16 else None
    except ValueError:
        value = None
    if value is None:
        value = int.from_bytes(hashlib.blake2b(fact_id.encode(), digest_size=8).digest(), "big")
    return value - (1 << 64) if value >= (1 << 63) else value


class _Column:
    """A growable numpy column (amortized doubling)."""

    __slots__ = ("data", "size")

    def __init__(self, dtype: Any, capacity: int = 64, data: np.ndarray | None = None) -> None:
        if data is not None:
            self.data = np.ascontiguousarray(data, dtype=dtype)
            self.size = len(self.data)
        else:
            self.data = np.zeros(capacity, dtype=dtype)
            self.size = 0

    def append(self, value: Any) -> int:
        if self.size == len(self.data):
            grown = np.zeros(max(64, 2 * len(self.data)), dtype=self.data.dtype)
            grown[: self.size] = self.data[: self.size]
            self.data = grown
        self.data[self.size] = value
        self.size += 1
        return self.size - 1

    @property
    def view(self) -> np.ndarray:
        return self.data[: self.size]

    @property
    def nbytes(self) -> int:
        return int(self.data.nbytes)


class _Texts:
    """Many short strings in one UTF-8 buffer: `get(i)` decodes the i-th."""

    __slots__ = ("blob", "offsets")

    def __init__(self, texts: Sequence[str] | None = None) -> None:
        if texts:
            encoded = [t.encode() for t in texts]
            self.blob = bytearray(b"".join(encoded))
            offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
            np.cumsum([len(e) for e in encoded], out=offsets[1:])
            self.offsets = _Column(np.int64, data=offsets)
        else:
            self.blob = bytearray()
            self.offsets = _Column(np.int64)
            self.offsets.append(0)

    def append(self, text: str) -> None:
        self.blob += text.encode()
        self.offsets.append(len(self.blob))

    def get(self, index: int) -> str:
        offsets = self.offsets.data
        return self.blob[int(offsets[index]): int(offsets[index + 1])].decode()

    @property
    def nbytes(self) -> int:
        return len(self.blob) + self.offsets.nbytes


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
        self.entity_ids: dict[str, int] = {}
        self.hub = _Column(np.bool_)
        self.kind = _Column(np.int16)
        self.fan = _Column(np.int32)
        self.fan_org = _Column(np.int32)
        """Current org-scoped facts per entity: the part of the fan every viewer sees (`visible_fan_extra` adds
        the viewer's own scopes)."""
        self.canonical = _Column(np.int32)
        """The entity each entity stands for: itself, or the one it was merged into (`entity.merged`)."""
        self.kind_names: list[str] = []
        self.kind_codes: dict[str, int] = {}
        # relations
        self.rel_names: list[str] = []
        self.rel_codes: dict[str, int] = {}
        self.rel_weight = _Column(np.float32)
        self.max_weight = 1.0
        """The largest relation weight (what the walk's cut-off assumes a fact beyond a node may carry)."""
        # scopes
        self.scope_names: list[str] = []
        self.scope_codes: dict[str, int] = {}
        self.scope_kind = _Column(np.int8)
        self.scope_person = _Column(np.int32)
        self.scope_agent = _Column(np.int32)
        self.scope_serving = _Column(np.int32)
        self._agent_scopes: dict[int, list[int]] = {}
        self._person_scopes: dict[int, list[int]] = {}
        """person entity id -> the scope codes naming it (more than one after a merge)."""
        """agent entity id -> the session scope codes of its sessions (checked again at query time)."""
        self.sessions: dict[str, tuple[int, int]] = {}
        """session id -> (agent entity id, served entity id or -1): one entry per session, not per fact."""
        # facts
        self.src = _Column(np.int32)
        self.dst = _Column(np.int32)
        self.rel = _Column(np.int16)
        self.scope = _Column(np.int32)
        self.conf = _Column(np.float32)
        self.status = _Column(np.int8)
        self.live = _Column(np.int32)
        """scope code + 1 while the fact is current, else 0: one gather answers "current and visible"."""
        self.asserted = _Column(np.float64)
        self.ids = _Column("S32")
        self.hashes = _Column(np.int64)
        self.reasons = _Texts()
        self.provenance = _Texts()
        self._sorted_hashes = np.zeros(0, dtype=np.int64)
        self._sorted_order = np.zeros(0, dtype=np.int32)
        self._recent_ids: dict[str, int] = {}
        """Fact ids added since the last compaction (the sorted hashes cover the rest)."""
        # adjacency
        self.indptr = np.zeros(1, dtype=np.int64)
        self.adj_reach = np.zeros(0, dtype=np.int64)
        """Per CSR entry, two int32 in one int64 (one gather reads both): the neighbour across the fact, and
        the fact's `live` code (kept current)."""
        self.adj_fact = np.zeros(0, dtype=np.complex128)
        """Per CSR entry, four 32-bit values in 16 bytes (a complex128, so that one native gather reads them):
        the fact, its relation weight (float32), its confidence (float32, kept current), unused."""
        self.adj_rank = np.zeros(0, dtype=np.complex128)
        """Per CSR entry, the fact's assertion time (float64) and id hash (int64): what the ranking reads, read
        with the row instead of from the scattered fact columns."""
        self.deg = np.zeros(0, dtype=np.int64)
        """Row lengths of the CSR (`indptr[k + 1] - indptr[k]`)."""
        self.scope_indptr = np.zeros(1, dtype=np.int64)
        self.scope_ends = np.zeros(0, dtype=np.int32)
        self.scope_end_facts = np.zeros(0, dtype=np.int32)
        """The CSR's facts outside org scope as (entity end, fact) pairs grouped by scope code (a self-loop
        once): what a viewer's own scopes add to the org fan of each node (`visible_fan_extra`)."""
        self.csr_facts = 0
        self._adj_w_stale = False
        self._csr_stale = False
        # uses
        self.uses: dict[int, tuple[_Column, _Column]] = {}
        self._uses_sorted: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._most_uses: dict[int, int] = {}
        # walk scratch (one walk at a time per index: `walk` holds the lock)
        self._lock = threading.Lock()
        self._visited_scratch = np.zeros(0, dtype=np.int32)
        self._spread_scratch = np.zeros(0, dtype=np.float64)
        self._extra_scratch = np.zeros(0, dtype=np.int32)
        self._kernel_scratch: dict[str, np.ndarray] = {}
        """The compiled walk's buffers (`perspective_walk._spread_kernel`): its outputs and the visible scopes."""
        self._stamp = 0
        self._uses_bulk = False
        self._hubs: np.ndarray | None = None
        self._share_cache: tuple[float, np.ndarray] | None = None
        self._scope("org")
        for relation in BUILTIN_RELATIONS.values():
            self._relation(relation.name, relation.weight)

    # ------------------------------------------------------------------------------------------ codes

    def _relation(self, name: str, weight: float | None = None) -> int:
        code = self.rel_codes.get(name)
        if code is None:
            code = self.rel_codes[name] = len(self.rel_names)
            self.rel_names.append(name)
            self.rel_weight.append(1.0 if weight is None else weight)
        elif weight is not None:
            self.rel_weight.data[code] = weight
            self._adj_w_stale = True
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
        else:
            if label is not None:
                self.labels[eid] = label
            if hub is not None:
                self.hub.data[eid] = hub
                self._hubs = None
        return eid

    def _scope(self, name: str) -> int:
        code = self.scope_codes.get(name)
        if code is not None:
            return code
        code = self.scope_codes[name] = len(self.scope_names)
        self.scope_names.append(name)
        kind, person, agent, serving = SCOPE_ORG, -1, -1, -1
        if name.startswith("person:"):
            kind, person = SCOPE_PERSON, self.resolve(self.entity(name))
            self._person_scopes.setdefault(person, []).append(code)
        elif name.startswith("session:"):
            kind = SCOPE_SESSION
            agent, serving = self.sessions.get(name.removeprefix("session:"), (-1, -1))
            self._agent_scopes.setdefault(agent, []).append(code)
        self.scope_kind.append(kind)
        self.scope_person.append(person)
        self.scope_agent.append(agent)
        self.scope_serving.append(serving)
        return code

    def resolve(self, eid: int) -> int:
        """The entity `eid` stands for now (itself unless it was merged into another)."""
        return int(self.canonical.data[eid])

    def lookup(self, ref: str) -> int | None:
        """The id of the entity `ref` stands for now (a merged ref resolves to the entity it was merged into)."""
        eid = self.entity_ids.get(ref)
        return None if eid is None else int(self.canonical.data[eid])

    def fact_index(self, fact_id: str) -> int | None:
        """The int id of a fact id, or None."""
        recent = self._recent_ids.get(fact_id)
        if recent is not None:
            return recent
        h = id_hash(fact_id)
        lo = int(np.searchsorted(self._sorted_hashes, h, "left"))
        hi = int(np.searchsorted(self._sorted_hashes, h, "right"))
        encoded = fact_id.encode()
        for k in range(lo, hi):
            candidate = int(self._sorted_order[k])
            if self.ids.data[candidate] == encoded:
                return candidate
        return None

    def fact_id(self, index: int) -> str:
        return bytes(self.ids.data[index]).decode()

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

    def apply_event(self, position: int, event: Any) -> None:
        """Apply a pydantic domain event (tests and folds that already hold events)."""
        self.apply(position, type(event).topic, event.model_dump(mode="json"))

    def _entity_registered(self, d: dict[str, Any], at: float) -> None:
        self.entity(d["ref"], d.get("label"), bool(d.get("hub", False)))

    def _relation_defined(self, d: dict[str, Any], at: float) -> None:
        self._relation(d["name"], float(d["weight"]))

    def _session_started(self, d: dict[str, Any], at: float) -> None:
        serving = d.get("serving")
        self._session(d["session_id"], self.resolve(self.entity(d["agent"])),
                      self.resolve(self.entity(serving)) if serving else -1)

    def _worker_dispatched(self, d: dict[str, Any], at: float) -> None:
        if d["worker_session_id"] not in self.sessions:
            self._session(d["worker_session_id"], *self.sessions.get(d["session_id"], (-1, -1)))

    def _session(self, session_id: str, agent: int, serving: int) -> None:
        self.sessions[session_id] = (agent, serving)
        code = self.scope_codes.get(f"session:{session_id}")
        if code is not None:
            self.scope_agent.data[code], self.scope_serving.data[code] = agent, serving
            self._agent_scopes.setdefault(agent, []).append(code)

    def _fact_asserted(self, d: dict[str, Any], at: float) -> None:
        subject, obj = self.resolve(self.entity(d["subject"])), self.resolve(self.entity(d["object"]))
        index = self.src.append(subject)
        self.dst.append(obj)
        self.rel.append(self._relation(d["relation"]))
        self.scope.append(self._scope(d["scope"]))
        self.conf.append(float(d["confidence"]))
        self.status.append(CURRENT)
        self.live.append(int(self.scope.data[index]) + 1)
        self.asserted.append(first_use(d, at))
        self.ids.append(d["fact_id"].encode())
        self.hashes.append(id_hash(d["fact_id"]))
        self.reasons.append(d.get("reason") or "")
        self.provenance.append(provenance_text(d.get("provenance") or {}))
        self._recent_ids[d["fact_id"]] = index
        self._fan(index, +1)
        if len(self._recent_ids) > COMPACT_AT and len(self._recent_ids) > self.fact_count // 4:
            self.compact()  # while folding, rebuild rarely (a quarter more facts); a query compacts sooner

    def _fan(self, index: int, delta: int) -> None:
        subject, obj = int(self.src.data[index]), int(self.dst.data[index])
        self.fan.data[subject] += delta
        if obj != subject:
            self.fan.data[obj] += delta
        if int(self.scope.data[index]) != 0:
            return  # only org facts are in every viewer's fan (the rest is added per viewer: `visible_fan_extra`)
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
        index = self.fact_index(fact_id)
        if index is None:
            return
        was = int(self.status.data[index])
        if was == status:
            return
        self.status.data[index] = status
        live = int(self.scope.data[index]) + 1 if status == CURRENT else 0
        self.live.data[index] = live
        self._adj_set(index, "live", live)
        if was == CURRENT:
            self._fan(index, -1)
        elif status == CURRENT:
            self._fan(index, +1)

    def _fact_corroborated(self, d: dict[str, Any], at: float) -> None:
        index = self.fact_index(d["fact_id"])
        if index is not None:
            self.conf.data[index] = float(d["confidence"])
            self._adj_set(index, "conf", self.conf.data[index])

    def _adj_set(self, index: int, field: str, value: Any) -> None:
        """Keep a fact's copy in its adjacency records current (both ends' rows, when it is in the CSR)."""
        if index >= self.csr_facts:
            return
        for end in {int(self.src.data[index]), int(self.dst.data[index])}:
            lo = int(self.indptr[end])
            row = self.adj_fact[lo:int(self.indptr[end + 1])].view(np.int32)[0::4]
            positions = lo + np.flatnonzero(row == index)
            if field == "live":
                self.adj_reach.view(np.int32)[2 * positions + 1] = value
            else:
                self.adj_fact.view(np.float32)[4 * positions + 2] = value

    def _facts_recalled(self, d: dict[str, Any], at: float) -> None:
        agent = self.resolve(self.entity(d["agent"]))
        columns = self.uses.get(agent)
        if columns is None:
            columns = self.uses[agent] = (_Column(np.int32), _Column(np.float64))
        for fact_id in d["fact_ids"]:
            index = self.fact_index(fact_id)
            if index is not None:
                columns[0].append(index)
                columns[1].append(at)
        self._uses_sorted.pop(agent, None)
        self._most_uses.pop(agent, None)

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
        for column in (self.scope_person, self.scope_agent, self.scope_serving):
            values = column.view
            values[values == merged] = into
        self.sessions = {sid: (into if a == merged else a, into if s == merged else s)
                         for sid, (a, s) in self.sessions.items()}
        for by in (self._agent_scopes, self._person_scopes):
            if merged in by:
                by.setdefault(into, []).extend(by.pop(merged))
        if merged in self.uses:
            facts, times = self.uses.pop(merged)
            columns = self.uses.get(into)
            if columns is None:
                columns = self.uses[into] = (_Column(np.int32), _Column(np.float64))
            for fact, moment in zip(facts.view.tolist(), times.view.tolist(), strict=True):
                columns[0].append(fact)
                columns[1].append(moment)
            for cache in (self._uses_sorted, self._most_uses):
                cache.pop(merged, None)
                cache.pop(into, None)
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
            self._csr_stale = True  # rows moved between entities: rebuilt before the next walk

    # ------------------------------------------------------------------------------------------ bulk building

    def compact(self) -> None:
        """Rebuild the CSR adjacency and the sorted id hashes over every fact (bulk, vectorized)."""
        n_facts, n_entities = self.fact_count, len(self.refs)
        src, dst = self.src.view, self.dst.view
        all_facts = np.arange(n_facts, dtype=np.int32)
        not_loop = src != dst  # a self-loop is one edge, listed once
        ends = np.concatenate([src, dst[not_loop]])
        others = np.concatenate([dst, src[not_loop]])
        facts = np.concatenate([all_facts, all_facts[not_loop]])
        order = np.argsort(ends, kind="stable")
        counts = np.bincount(ends, minlength=n_entities)
        self.indptr = np.zeros(n_entities + 1, dtype=np.int64)
        np.cumsum(counts, out=self.indptr[1:])
        self.adj_reach, self.adj_fact, self.adj_rank = self._records(others[order], facts[order])
        self._adj_w_stale = False
        self.deg = counts.astype(np.int64)
        scoped = self.scope.view[facts] != 0  # each (end, fact) pair of the CSR once
        entry_scope = self.scope.view[facts[scoped]]
        by_scope = np.argsort(entry_scope, kind="stable")
        self.scope_ends = ends[scoped][by_scope].astype(np.int32)
        self.scope_end_facts = facts[scoped][by_scope].astype(np.int32)
        self.scope_indptr = np.zeros(len(self.scope_names) + 1, dtype=np.int64)
        np.cumsum(np.bincount(entry_scope, minlength=len(self.scope_names)), out=self.scope_indptr[1:])
        self.csr_facts = n_facts
        self._csr_stale = False
        hashes = self.hashes.view
        sort = np.argsort(hashes, kind="stable").astype(np.int32)
        self._sorted_hashes, self._sorted_order = hashes[sort], sort
        self._recent_ids = {}

    def _records(self, nbr: np.ndarray, facts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The packed adjacency columns for (neighbour, fact) pairs (`adj_reach`, `adj_fact`, `adj_rank`)."""
        n = len(facts)
        reach = np.empty((n, 2), dtype=np.int32)
        reach[:, 0] = nbr
        reach[:, 1] = self.live.view[facts]
        fact = np.zeros((n, 4), dtype=np.int32)
        fact[:, 0] = facts
        fact[:, 1] = self.rel_weight.view[self.rel.view[facts]].view(np.int32)
        fact[:, 2] = self.conf.view[facts].view(np.int32)
        rank = np.empty((n, 2), dtype=np.int64)
        rank[:, 0] = self.asserted.view[facts].view(np.int64)
        rank[:, 1] = self.hashes.view[facts]
        return (reach.view(np.int64).reshape(-1), fact.view(np.complex128).reshape(-1),
                rank.view(np.complex128).reshape(-1))

    def _maybe_compact(self) -> None:
        delta = self.fact_count - self.csr_facts
        if self._csr_stale and self.csr_facts:
            self.compact()
        elif delta > COMPACT_AT and delta > self.fact_count // 50 or len(self.indptr) - 1 < len(self.refs) // 2:
            self.compact()

    def nbytes(self) -> dict[str, int]:
        """Bytes held by the index, by part (capacity of the arrays, plus estimates of the Python lists)."""
        fact_columns = (self.src, self.dst, self.rel, self.scope, self.conf, self.status, self.live, self.asserted,
                        self.ids, self.hashes)
        entity_lists = sum(len(r) + len(lb) + 120 for r, lb in zip(self.refs, self.labels, strict=True))
        return {
            "facts": sum(c.nbytes for c in fact_columns) + self._sorted_hashes.nbytes + self._sorted_order.nbytes,
            "texts": self.reasons.nbytes + self.provenance.nbytes,
            "adjacency": self.indptr.nbytes + self.adj_reach.nbytes + self.adj_fact.nbytes + self.adj_rank.nbytes
            + self.deg.nbytes
            + self.scope_indptr.nbytes + self.scope_ends.nbytes + self.scope_end_facts.nbytes,
            "scratch": self._visited_scratch.nbytes + self._spread_scratch.nbytes + self._extra_scratch.nbytes
            + sum(a.nbytes for a in self._kernel_scratch.values()),
            "entities": self.hub.nbytes + self.kind.nbytes + self.fan.nbytes + self.fan_org.nbytes + entity_lists,
            "uses": sum(a.nbytes + b.nbytes for a, b in self.uses.values()),
        }

    # ------------------------------------------------------------------------------------------ the query

    def visible_scopes(self, agent: int, serving: int) -> np.ndarray:
        """A bool per scope code: org always; a person's scope only while serving that person; a session's
        scope only to that session's agent, and only while it serves the same person (or the session served no
        one)."""
        kind = self.scope_kind.view
        person = self.scope_person.view
        session_agent = self.scope_agent.view
        session_serving = self.scope_serving.view
        visible = kind == SCOPE_ORG
        if serving >= 0:
            visible |= (kind == SCOPE_PERSON) & (person == serving)
        if agent >= 0:
            visible |= (kind == SCOPE_SESSION) & (session_agent == agent) & (
                (session_serving == -1) | (session_serving == serving))
        return visible

    def visible_codes(self, agent: int, serving: int) -> np.ndarray:
        """The scope codes other than org that the viewer may see (few): the served person's scope and the
        scopes of the agent's sessions that serve the same person or no one. Same rule as `visible_scopes`."""
        return np.array(self._visible_code_list(agent, serving), dtype=np.int32)

    def _visible_code_list(self, agent: int, serving: int) -> list[int]:
        codes: list[int] = []
        if serving >= 0:
            codes.extend(self._person_scopes.get(serving, ()))
        for code in self._agent_scopes.get(agent, ()):
            if int(self.scope_agent.data[code]) == agent and int(self.scope_serving.data[code]) in (-1, serving):
                codes.append(code)
        return codes

    def walk(self, viewpoint: Viewpoint, parameters: ActivationParameters, now: float) -> Walked:
        """Spread activation from the viewpoint, rank every reached fact and cut the ranking into tiers
        (`projections.perspective_walk.walk`)."""
        return walk(self, viewpoint, parameters, now)

    def _scratch(self, n_entities: int) -> int:
        """Start a walk: size the per-entity scratch arrays and return this walk's stamp.

        `visited` holds stamps instead of flags, so nothing is cleared after a walk: an entry counts for this
        walk only if it is >= the stamp. A node reached at hop h holds stamp + h (the sources stamp + 0), a node
        that is reached but passes nothing on (hub, blocked party, below the floor) stamp + STOP. `spread` and
        `extra` are zero outside a walk (the walk resets what it wrote)."""
        if len(self._visited_scratch) < n_entities:
            size = max(n_entities, 64) * 2
            self._visited_scratch = np.zeros(size, dtype=np.int32)
            self._spread_scratch = np.zeros(size, dtype=np.float64)
            self._extra_scratch = np.zeros(size, dtype=np.int32)
            self._stamp = 0
        self._stamp += STAMP_STRIDE
        if self._stamp > STAMP_LIMIT:
            self._visited_scratch[:] = 0
            self._stamp = STAMP_STRIDE
        return self._stamp

    def _hub_nodes(self) -> np.ndarray:
        if self._hubs is None:
            self._hubs = np.nonzero(self.hub.view)[0].astype(np.int64)
        return self._hubs

    def _shares(self, exp_s: float) -> np.ndarray:
        """min(1, e^S / fan_org) per entity, cached for one S and kept current by `_fan`: the fan share of a
        node for a viewer who sees none of its non-org facts (`visible_fan_extra` adds the viewer's own)."""
        cached = self._share_cache
        n = len(self.refs)
        if cached is None or cached[0] != exp_s:
            cached = self._share_cache = (exp_s, np.minimum(1.0, exp_s / np.maximum(self.fan_org.view, 1)))
        elif len(cached[1]) < n:
            tail = np.minimum(1.0, exp_s / np.maximum(self.fan_org.view[len(cached[1]):], 1))
            cached = self._share_cache = (exp_s, np.concatenate([cached[1], tail]))
        return cached[1]

    def visible_fan_extra(self, codes: np.ndarray) -> np.ndarray:
        """The entity ends (one entry per fact end, a self-loop once) of the current facts in the viewer's
        non-org scopes `codes`: what the viewer's fan adds to `fan_org`."""
        ends: list[np.ndarray] = []
        facts: list[np.ndarray] = []
        n_rows = len(self.scope_indptr) - 1
        for code in codes.tolist():
            if code < n_rows:
                lo, hi = int(self.scope_indptr[code]), int(self.scope_indptr[code + 1])
                if hi > lo:
                    ends.append(self.scope_ends[lo:hi])
                    facts.append(self.scope_end_facts[lo:hi])
        if len(codes) and self.fact_count > self.csr_facts:
            tail = self.scope.view[self.csr_facts:]
            hit = np.zeros(len(tail), dtype=bool)
            for code in codes.tolist():
                hit |= tail == code
            tail_facts = (np.flatnonzero(hit) + self.csr_facts).astype(np.int32)
            src, dst = self.src.view[tail_facts], self.dst.view[tail_facts]
            not_loop = src != dst
            ends += [src, dst[not_loop]]
            facts += [tail_facts, tail_facts[not_loop]]
        if not ends:
            return np.zeros(0, dtype=np.int64)
        all_ends = ends[0] if len(ends) == 1 else np.concatenate(ends)
        all_facts = facts[0] if len(facts) == 1 else np.concatenate(facts)
        return all_ends[self.live.view[all_facts] != 0].astype(np.int64)

    def between(self, a: int, b: int) -> list[int]:
        """The facts joining entities a and b, either way round (any status)."""
        found: list[int] = []
        if a < len(self.deg):
            lo, hi = int(self.indptr[a]), int(self.indptr[a + 1])
            hits = np.flatnonzero(self.adj_reach[lo:hi].view(np.int32)[0::2] == b)
            found = self.adj_fact[lo:hi].view(np.int32)[0::4][hits].tolist()
        if self.fact_count > self.csr_facts:
            src, dst = self.src.view[self.csr_facts:], self.dst.view[self.csr_facts:]
            hits = np.flatnonzero(((src == a) & (dst == b)) | ((src == b) & (dst == a)))
            found += (hits + self.csr_facts).tolist()
        return found

    def _fresh_weights(self) -> None:
        """Write the relation weights into `adj_fact` again after a relation's weight changed."""
        if self._adj_w_stale:
            self.adj_fact.view(np.int32)[1::4] = self.rel_weight.view[
                self.rel.view[self.adj_fact.view(np.int32)[0::4]]].view(np.int32)
            self._adj_w_stale = False

    def expand(self, frontier: np.ndarray, out: np.ndarray) -> tuple[np.ndarray, ...]:
        """The CSR entries of the sorted unique `frontier` as (`adj_reach`, `adj_fact`, `adj_rank` values, the
        `out` of each entry's owner, the owner), in order: the rows owner by owner, then the delta tail from the
        subject end, then from the object end (a self-loop once). One set of numpy calls for the whole frontier,
        reading contiguous rows."""
        self._fresh_weights()
        n_csr = len(self.deg)
        if n_csr == len(self.refs) or (len(frontier) and frontier[-1] < n_csr):
            nodes = frontier
            lengths = self.deg[frontier]
        else:
            inside = frontier < n_csr
            lengths = np.zeros(len(frontier), dtype=np.int64)
            lengths[inside] = self.deg[frontier[inside]]
            nodes = np.where(inside, frontier, 0)
        offsets: Any
        if len(frontier) == 1:
            start = int(self.indptr[nodes[0]])
            offsets = slice(start, start + int(lengths[0]))
        else:
            ends = np.cumsum(lengths)
            total = int(ends[-1]) if len(ends) else 0
            offsets = np.repeat(self.indptr[nodes] - ends + lengths, lengths) + np.arange(total)
        reach, fact, rank = self.adj_reach[offsets], self.adj_fact[offsets], self.adj_rank[offsets]
        x, via = np.repeat(out, lengths), np.repeat(frontier, lengths)
        if self.fact_count > self.csr_facts:
            tail = np.arange(self.csr_facts, self.fact_count, dtype=np.int32)
            parts = [(reach, fact, rank, x, via)]
            tail_src, tail_dst = self.src.view[tail], self.dst.view[tail]
            not_loop = tail_src != tail_dst  # a self-loop is one edge, found from its subject end
            for ends_, others, facts in ((tail_src, tail_dst, tail),
                                         (tail_dst[not_loop], tail_src[not_loop], tail[not_loop])):
                at = np.searchsorted(frontier, ends_)
                at[at >= len(frontier)] = 0
                hit = frontier[at] == ends_
                parts.append((*self._records(others[hit], facts[hit]), out[at[hit]], frontier[at[hit]]))
            reach, fact, rank, x, via = (np.concatenate([part[k] for part in parts]) for k in range(5))
        return reach, fact, rank, x, via

    def _prepare_uses(self) -> None:
        """Sort every agent's uses by (fact, time) and count its most used fact, all agents at once (the first
        query of each agent then finds them ready)."""
        self._uses_bulk = True
        agents = [a for a in self.uses if a not in self._uses_sorted]
        if not agents:
            return
        sizes = [self.uses[a][0].size for a in agents]
        owner = np.repeat(np.arange(len(agents)), sizes)
        facts = np.concatenate([self.uses[a][0].view for a in agents])
        times = np.concatenate([self.uses[a][1].view for a in agents])
        order = np.lexsort((times, facts, owner))
        owner, facts, times = owner[order], facts[order], times[order]
        bounds = np.zeros(len(agents) + 1, dtype=np.int64)
        np.cumsum(sizes, out=bounds[1:])
        run_start = np.ones(len(facts), dtype=bool)
        run_start[1:] = (facts[1:] != facts[:-1]) | (owner[1:] != owner[:-1])
        starts = np.flatnonzero(run_start)
        runs = np.diff(np.append(starts, len(facts)))
        most = np.zeros(len(agents), dtype=np.int64)
        np.maximum.at(most, owner[starts], runs)
        for k, agent in enumerate(agents):
            lo, hi = int(bounds[k]), int(bounds[k + 1])
            self._uses_sorted[agent] = (facts[lo:hi].astype(np.int64), times[lo:hi])
            self._most_uses[agent] = int(most[k])

    def spread_floor(self, agent: int, p: ActivationParameters) -> float:
        return spread_floor(self, agent, p)

    def base_levels(self, agent: int, facts: np.ndarray, now: float, p: ActivationParameters) -> np.ndarray:
        return base_levels(self, agent, facts, now, p)

    def _sorted_uses(self, agent: int) -> tuple[np.ndarray, np.ndarray] | None:
        cached = self._uses_sorted.get(agent)
        if cached is not None:
            return cached
        columns = self.uses.get(agent)
        if columns is None:
            return None
        if not self._uses_bulk:
            self._prepare_uses()
            return self._uses_sorted[agent]
        fact_col, time_col = columns
        order = np.lexsort((time_col.view, fact_col.view))
        cached = self._uses_sorted[agent] = (fact_col.view[order].astype(np.int64), time_col.view[order].copy())
        return cached

    def path(self, walked: Walked, fact: int, via: int) -> tuple[list[str], list[str]]:
        return path(self, walked, fact, via)


def first_use(fact: dict[str, Any], recorded: float) -> float:
    """When an asserted fact counts as first used (for activation and recency): when its source says it happened
    (`provenance.occurred_at`), clamped to when it was recorded. A fact backfilled from an old conversation is not
    "used just now"; a source clock ahead of ours never puts a use in the future."""
    occurred = (fact.get("provenance") or {}).get("occurred_at")
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
    "entity.merged": PerspectiveIndex._entities_merged,
    "fact.asserted": PerspectiveIndex._fact_asserted,
    "fact.corroborated": PerspectiveIndex._fact_corroborated,
    "fact.invalidated": lambda self, d, at: self._set_status(d["fact_id"], INVALIDATED),
    "fact.archived": lambda self, d, at: self._set_status(d["fact_id"], ARCHIVED),
    "fact.restored": lambda self, d, at: self._set_status(d["fact_id"], CURRENT),
    "facts.recalled": PerspectiveIndex._facts_recalled,
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
