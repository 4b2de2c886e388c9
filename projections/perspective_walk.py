"""The spreading walk over a perspective index: activation from the viewpoint, ranking, and the tiers.

Layered like a breadth-first search over the CSR adjacency (see `perspective_index`), vectorized per hop:
gather the frontier's facts, keep the current and visible ones not seen yet, spread
x = activation x fan share x hop factor x relation weight, and pass the sums on to the nodes reached (hubs and,
for a hub viewer, the other parties it serves are reached but never expanded). Then B per fact for this agent,
A = B + ln(confidence) + S + ln(x), a ranking, and the tiers (`tier_codes`, the vectorized
`domain.activation.assign_tiers`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from domain.activation import ActivationParameters, Tier

if TYPE_CHECKING:
    from projections.perspective_index import PerspectiveIndex

CURRENT = 0
"""`perspective_index.CURRENT`: the status code of a current fact."""
TIER_CODES = {Tier.FULL: 0, Tier.GIST: 1, Tier.MARKER: 2, Tier.COUNT: 3, Tier.FORGOTTEN: 4}
TIERS_BY_CODE = {code: tier for tier, code in TIER_CODES.items()}


@dataclass(frozen=True)
class Viewpoint:
    """Where an agent stands: itself, the person it serves, the things in focus."""

    agent: str
    serving: str | None = None
    focus: tuple[str, ...] = ()


@dataclass
class Walked:
    """The raw result of one query: every reached fact, ranked, with its tier (arrays, indexes into the index)."""

    facts: np.ndarray
    """fact ids (int), highest activation first."""
    activation: np.ndarray
    spread: np.ndarray
    base: np.ndarray
    hops: np.ndarray
    via: np.ndarray
    """the node each fact was reached through (its neighbour nearer the sources)."""
    tiers: np.ndarray
    """TIER_CODES per fact."""
    sources: list[int]
    unknown_refs: list[str]
    node_layers: list[np.ndarray]
    """the nodes expanded, per hop (layer 0: the sources)."""
    now: float
    parameters: ActivationParameters
    _parents: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    def parents(self, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(expanded nodes sorted, their parent node, the fact crossed from it; -1 for the sources): for each
        node at layer h, the strongest fact of hop h that reached it. Computed once, only when paths are asked."""
        if self._parents is None:
            if not self.node_layers:
                empty = np.zeros(0, dtype=np.int64)
                self._parents = (empty, empty, empty)
                return self._parents
            nodes = np.concatenate(self.node_layers)
            layer = np.repeat(np.arange(len(self.node_layers)), [len(a) for a in self.node_layers])
            order = np.argsort(nodes, kind="stable")
            nodes, layer = nodes[order], layer[order]
            f, via = self.facts, self.via
            other = np.where(src[f] == via, dst[f], src[f]).astype(np.int64)
            at = np.searchsorted(nodes, other)
            at[at >= len(nodes)] = 0
            reaches = (nodes[at] == other) & (layer[at] == self.hops) & (self.hops > 0)
            c_at, c_via, c_fact, c_spread = at[reaches], via[reaches], f[reaches], self.spread[reaches]
            best = np.lexsort((-c_spread, c_at))
            first = np.ones(len(best), dtype=bool)
            first[1:] = c_at[best][1:] != c_at[best][:-1]
            parent = np.full(len(nodes), -1, dtype=np.int64)
            parent_fact = np.full(len(nodes), -1, dtype=np.int64)
            parent[c_at[best][first]] = c_via[best][first]
            parent_fact[c_at[best][first]] = c_fact[best][first]
            self._parents = (nodes, parent, parent_fact)
        return self._parents

    def count(self, tier: Tier) -> int:
        return int(np.count_nonzero(self.tiers == TIER_CODES[tier]))


def walk(index: PerspectiveIndex, viewpoint: Viewpoint, parameters: ActivationParameters, now: float) -> Walked:
    """Spread activation from the viewpoint, rank every reached fact and cut the ranking into tiers.

    Layered like a breadth-first search: a node passes activation on once, at its first (shortest) hop, with
    all it received at that hop. A node whose facts could not rise above tau even with this agent's freshest
    possible base level passes nothing on (`spread_floor`): what lies beyond it would be forgotten anyway.
    """
    index._maybe_compact()
    p = parameters
    n_entities, n_facts = len(index.refs), index.fact_count
    unknown: list[str] = []
    source_refs = [viewpoint.agent, *([viewpoint.serving] if viewpoint.serving else []), *viewpoint.focus]
    source_ids: list[int] = []
    for ref in source_refs:
        eid = index.entity_ids.get(ref)
        if eid is None:
            unknown.append(ref)
        else:
            source_ids.append(eid)
    agent = index.entity_ids.get(viewpoint.agent, -1)
    serving = index.entity_ids.get(viewpoint.serving, -1) if viewpoint.serving else -1
    empty = np.zeros(0, dtype=np.int64)
    if not source_ids:
        return Walked(empty, np.zeros(0), np.zeros(0), np.zeros(0), empty, empty, empty, [], unknown,
                      [], now, p)
    hub, kind = index.hub.view, index.kind.view
    party_codes = [index.kind_codes[k] for k in p.party_kinds if k in index.kind_codes]
    # A hub viewer: the other parties it serves are neither reached from it nor traversed.
    hub_sources = np.array(sorted({s for s in source_ids if hub[s]}), dtype=np.int64)
    blocked_nodes = np.zeros(0, dtype=np.int64)
    if len(hub_sources) and party_codes:
        _owner, nbr, _fact = index._edges(hub_sources)
        blocked_nodes = np.unique(nbr[np.isin(kind[nbr], party_codes) & (nbr != serving)]).astype(np.int64)
    any_blocked = len(blocked_nodes) > 0
    with index._lock:
        visited, seen = index._scratch(n_entities, n_facts)
        try:
            return _spread(index, p, now, source_ids, unknown, agent, serving, hub_sources, blocked_nodes,
                           any_blocked, visited, seen)
        finally:
            index._release(visited, seen)


def _spread(index: PerspectiveIndex, p: ActivationParameters, now: float, source_ids: list[int],
            unknown: list[str], agent: int, serving: int, hub_sources: np.ndarray, blocked_nodes: np.ndarray,
            any_blocked: bool, visited: np.ndarray, seen: np.ndarray) -> Walked:
    empty = np.zeros(0, dtype=np.int64)
    status, scope, rel = index.status.view, index.scope.view, index.rel.view
    src_all, dst_all = index.src.view, index.dst.view
    weights = index.rel_weight.view.astype(np.float64)
    max_weight = float(weights.max()) if len(weights) else 1.0
    floor = spread_floor(index, agent, p)
    extra_scopes = index.visible_codes(agent, serving)
    stop_nodes = visited  # hubs and blocked parties are marked visited up front: reached, never expanded

    frontier, counts = np.unique(np.array(source_ids, dtype=np.int64), return_counts=True)
    frontier_act = counts * (p.source_weight / len(source_ids))
    visited[frontier] = True
    index._touched_nodes.append(frontier)
    hub_nodes = index._hub_nodes()
    visited[hub_nodes] = True
    visited[blocked_nodes] = True
    index._touched_nodes += [hub_nodes, blocked_nodes]
    exp_s = math.exp(p.associative_strength)
    rec_fact: list[np.ndarray] = []
    rec_x: list[np.ndarray] = []
    rec_hop: list[int] = []
    rec_via: list[np.ndarray] = []
    node_ids = [frontier]
    first_hop = True
    shares = index._shares(exp_s)
    for hop in range(1, p.depth + 1):
        node_share = shares[frontier]
        out = frontier_act * node_share * p.hop_factor
        # sources always pass (their own facts are the viewpoint); others only when it can still matter
        strong = out * max_weight >= floor
        if not first_hop:
            frontier, out = frontier[strong], out[strong]
        if len(frontier) == 0:
            break
        owner, nbr, fact = index._edges(frontier)
        if len(fact) == 0:
            break
        keep = (status[fact] == CURRENT) & ~seen[fact]
        keep &= index._visible(scope[fact], extra_scopes)
        if any_blocked:
            keep &= ~(np.isin(frontier[owner], hub_sources) & np.isin(nbr, blocked_nodes))
        if first_hop and agent >= 0 and serving >= 0:
            # the fact that the agent serves this person is the viewpoint itself: the header says it
            a, b = src_all[fact], dst_all[fact]
            keep &= ~(((a == agent) & (b == serving)) | ((a == serving) & (b == agent)))
        owner, nbr, fact = owner[keep], nbr[keep], fact[keep]
        if len(fact) == 0:
            break
        x = out[owner] * weights[rel[fact]]
        seen[fact] = True
        index._touched_facts.append(fact)
        rec_fact.append(fact.astype(np.int64))
        rec_x.append(x)
        rec_hop.append(len(fact))
        rec_via.append(frontier[owner])
        first_hop = False
        if hop == p.depth:
            break
        onward = ~stop_nodes[nbr]
        if not onward.any():
            break
        on_nbr, on_x = nbr[onward], x[onward]
        order = np.argsort(on_nbr, kind="stable")
        on_nbr, on_x = on_nbr[order], on_x[order]
        starts = np.ones(len(on_nbr), dtype=bool)
        starts[1:] = on_nbr[1:] != on_nbr[:-1]
        start_at = np.flatnonzero(starts)
        next_nodes = on_nbr[start_at].astype(np.int64)
        next_act = np.add.reduceat(on_x, start_at)
        node_ids.append(next_nodes)
        visited[next_nodes] = True
        index._touched_nodes.append(next_nodes)
        frontier, frontier_act = next_nodes, next_act

    nodes = node_ids  # the parents are found lazily, for paths only (`Walked.parents`)
    if not rec_fact:
        return Walked(empty, np.zeros(0), np.zeros(0), np.zeros(0), empty, empty, empty, source_ids, unknown,
                      nodes, now, p)

    all_fact = np.concatenate(rec_fact)
    all_x = np.concatenate(rec_x)
    all_hop = np.repeat(np.arange(1, len(rec_hop) + 1), rec_hop)
    all_via = np.concatenate(rec_via)
    order = np.lexsort((-all_x, all_fact))
    all_fact, all_x, all_hop, all_via = all_fact[order], all_x[order], all_hop[order], all_via[order]
    starts = np.ones(len(all_fact), dtype=bool)
    starts[1:] = all_fact[1:] != all_fact[:-1]
    start_at = np.nonzero(starts)[0]
    facts = all_fact[start_at]
    spread = np.add.reduceat(all_x, start_at)
    hops, via = all_hop[start_at], all_via[start_at]

    base = base_levels(index, agent, facts, now, p)
    with np.errstate(divide="ignore"):
        act = base + np.log(index.conf.view[facts]) + p.associative_strength + np.log(spread)
    order = np.lexsort((index.hashes.view[facts], -act))
    facts, act, spread, base, hops, via = (a[order] for a in (facts, act, spread, base, hops, via))
    tiers = tier_codes(p, act, via)
    return Walked(facts, act, spread, base, hops, via, tiers, source_ids, unknown, nodes, now, p)


def spread_floor(index: PerspectiveIndex, agent: int, p: ActivationParameters) -> float:
    """The least spread a fact needs to have any chance of A > tau for this agent: exp(tau - S - B_max), where
    B_max is the base level of a fact asserted and used (as often as this agent ever used one fact) within
    the last `minimum_age_seconds`. Never below `minimum_spread`."""
    fresh = (p.minimum_age_seconds / p.time_unit_seconds) ** -p.decay
    most = index._most_uses.get(agent)
    if most is None:
        uses = index._sorted_uses(agent)
        most = 0
        if uses is not None and len(uses[0]):
            most = int(np.unique(uses[0], return_counts=True)[1].max())
        index._most_uses[agent] = most
    best_base = math.log(fresh * (1 + most))
    if not p.cut_off:
        return p.minimum_spread
    return max(p.minimum_spread, math.exp(p.threshold - p.associative_strength - best_base))


def base_levels(index: PerspectiveIndex, agent: int, facts: np.ndarray, now: float,
                p: ActivationParameters) -> np.ndarray:
    """B per fact for one agent at `now`: the assertion plus the agent's recalls made at or before `now`."""
    floor, unit, d = p.minimum_age_seconds, p.time_unit_seconds, p.decay
    asserted = index.asserted.view[facts]
    age = now - asserted
    total = np.where(age >= 0, (np.maximum(age, floor) / unit) ** -d, 0.0)
    uses = index._sorted_uses(agent)
    if uses is not None and len(uses[0]):
        used_facts, used_at = uses
        lo = np.searchsorted(used_facts, facts, "left")
        hi = np.searchsorted(used_facts, facts, "right")
        lengths = hi - lo
        n = int(lengths.sum())  # usually 0: the agent used none of these facts
        if n:
            owner = np.repeat(np.arange(len(facts)), lengths)
            offsets = np.repeat(lo - (np.cumsum(lengths) - lengths), lengths) + np.arange(n)
            ages = now - used_at[offsets]
            contributions = np.where(ages >= 0, (np.maximum(ages, floor) / unit) ** -d, 0.0)
            total = total + np.bincount(owner, weights=contributions, minlength=len(facts))
    with np.errstate(divide="ignore"):
        return np.log(total)


def path(index: PerspectiveIndex, walked: Walked, fact: int, via: int) -> tuple[list[str], list[str]]:
    """The refs from a source to the fact's far end, and the fact ids crossed on the way."""
    refs: list[int] = []
    crossed: list[int] = [fact]
    node = via
    for _ in range(16):
        refs.append(node)
        nodes, parents, parent_facts = walked.parents(index.src.view, index.dst.view)
        k = int(np.searchsorted(nodes, node))
        if k >= len(nodes) or nodes[k] != node or parents[k] < 0:
            break
        crossed.append(int(parent_facts[k]))
        node = int(parents[k])
    refs.reverse()
    crossed.reverse()
    other = int(index.dst.data[fact]) if int(index.src.data[fact]) == via else int(index.src.data[fact])
    refs.append(other)
    return [index.refs[r] for r in refs], [index.fact_id(f) for f in crossed]


def tier_codes(p: ActivationParameters, activation: np.ndarray, via: np.ndarray) -> np.ndarray:
    """Vectorized `domain.activation.assign_tiers` over facts already ranked (highest first)."""
    n = len(activation)
    tiers = np.full(n, TIER_CODES[Tier.FORGOTTEN], dtype=np.int8)
    # ranked highest first, so the facts above tau are a prefix
    above = int(np.count_nonzero(activation > p.threshold))
    full_end = min(p.full_capacity, above)
    gist_end = min(p.full_capacity + p.gist_capacity, above)
    tiers[:full_end] = TIER_CODES[Tier.FULL]
    tiers[full_end:gist_end] = TIER_CODES[Tier.GIST]
    if above > gist_end:
        groups = via[gist_end:above]
        order = np.argsort(groups, kind="stable")
        grouped = groups[order]
        starts = np.ones(len(order), dtype=bool)
        starts[1:] = grouped[1:] != grouped[:-1]
        positions = np.arange(len(order))
        within = np.empty(len(order), dtype=np.int64)
        within[order] = positions - np.maximum.accumulate(np.where(starts, positions, 0))
        marker = within < p.markers_per_neighbour
        marker &= np.cumsum(marker) <= p.marker_capacity
        tiers[gist_end:above] = np.where(marker, TIER_CODES[Tier.MARKER], TIER_CODES[Tier.COUNT])
    return tiers
