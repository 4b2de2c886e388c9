"""The spreading walk over a perspective index: activation from the viewpoint, ranking, and the tiers.

Layered like a breadth-first search over the CSR adjacency (see `perspective_index`), vectorized per hop (one
set of numpy calls for the whole frontier): gather the frontier's rows, keep the current and visible facts not
reached from a node expanded at an earlier hop, spread x = activation x fan share x hop factor x relation weight
(the fan as this viewer sees it), and pass the sums on to the nodes reached (hubs and, for a hub viewer, the
other parties it serves are reached but never expanded). Nodes are marked with per-walk stamps in a scratch
array, so nothing is cleared after a walk. Then B per fact for this agent,
A = B + ln(confidence) + S + ln(x), a ranking, and the tiers (`tier_codes`, the vectorized
`domain.activation.assign_tiers`). tests/unit/test_perspective_reference.py holds it to a plain-Python reference.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from domain.activation import ActivationParameters, Tier
from projections.perspective_salience import tier_base_levels, tier_best_base

if TYPE_CHECKING:
    from projections.perspective_adjacency import Entries
    from projections.perspective_index import PerspectiveIndex

_EMPTY = np.zeros(0, dtype=np.int64)
_NO_TIERS = np.zeros(0, dtype=np.int8)

STAMP_STRIDE = 1 << 10
"""Walk stamps advance by this much: a node's stamp is the walk's plus its hop (< STOP), stop points' plus STOP."""
STOP = STAMP_STRIDE - 1
STAMP_LIMIT = (1 << 31) - 1 - 2 * STAMP_STRIDE
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


class WalkScratch:
    """The walk's per-entity buffers, held by the index and used by one walk at a time (`start`).

    `visited` holds stamps instead of flags, so nothing is cleared after a walk: an entry counts for this walk
    only if it is >= the walk's stamp. A node reached at hop h holds stamp + h (the sources stamp + 0), a node
    that is reached but passes nothing on (hub, blocked party, below the floor) stamp + STOP. `received` (the
    activation a node receives at a hop) and `extra_fan` (what the viewer's own scopes add to a node's fan) are
    zero outside a walk: the walk resets what it wrote."""

    def __init__(self) -> None:
        self.visited = np.zeros(0, dtype=np.int32)
        self.received = np.zeros(0, dtype=np.float64)
        self.extra_fan = np.zeros(0, dtype=np.int32)
        self._stamp = 0
        self._lock = threading.Lock()

    @contextmanager
    def start(self, n_entities: int) -> Iterator[int]:
        """Hold the buffers for one walk over `n_entities` entities; yields the walk's stamp."""
        with self._lock:
            if len(self.visited) < n_entities:
                size = max(n_entities, 64) * 2
                self.visited = np.zeros(size, dtype=np.int32)
                self.received = np.zeros(size, dtype=np.float64)
                self.extra_fan = np.zeros(size, dtype=np.int32)
                self._stamp = 0
            self._stamp += STAMP_STRIDE
            if self._stamp > STAMP_LIMIT:
                self.visited[:] = 0
                self._stamp = STAMP_STRIDE
            yield self._stamp

    def zeroed(self) -> tuple[np.ndarray, np.ndarray]:
        """The buffers that are zero outside a walk."""
        return self.received, self.extra_fan

    @property
    def nbytes(self) -> int:
        return self.visited.nbytes + self.received.nbytes + self.extra_fan.nbytes


def walk(index: PerspectiveIndex, viewpoint: Viewpoint, parameters: ActivationParameters, now: float) -> Walked:
    """Spread activation from the viewpoint, rank every reached fact and cut the ranking into tiers.

    Layered like a breadth-first search: a node passes activation on once, at its first (shortest) hop, with
    all it received at that hop. A node whose facts could not rise above tau even with this agent's freshest
    possible base level passes nothing on (`spread_floor`): what lies beyond it would be forgotten anyway.
    """
    index.prepare_for_walk()
    p = parameters
    n_entities = len(index.refs)
    unknown: list[str] = []
    source_refs = [viewpoint.agent, *([viewpoint.serving] if viewpoint.serving else []), *viewpoint.focus]
    source_ids: list[int] = []
    for ref in source_refs:
        eid = index.lookup(ref)  # a merged ref stands for the entity it was merged into
        if eid is None:
            unknown.append(ref)
        else:
            source_ids.append(eid)
    agent = index.lookup(viewpoint.agent)
    agent = -1 if agent is None else agent
    serving = index.lookup(viewpoint.serving) if viewpoint.serving else None
    serving = -1 if serving is None else serving
    if not source_ids:
        return Walked(_EMPTY, np.zeros(0), np.zeros(0), np.zeros(0), _EMPTY, _EMPTY, _NO_TIERS, [], unknown,
                      [], now, p)
    hub = index.hub.data
    # A hub viewer: the other parties it serves are neither reached from it nor traversed.
    hub_sources = sorted({s for s in source_ids if hub[s]})
    blocked_nodes = _blocked(index, p, hub_sources, serving) if hub_sources else None
    with index.walk_scratch.start(n_entities) as stamp:
        return _spread(index, p, now, source_ids, unknown, agent, serving, hub_sources, blocked_nodes, stamp)


def _blocked(index: PerspectiveIndex, p: ActivationParameters, hub_sources: list[int], serving: int
             ) -> np.ndarray | None:
    """The parties (other than the one served) that a hub viewer has facts with: reached from it never."""
    party_codes = [index.kind_codes[k] for k in p.party_kinds if k in index.kind_codes]
    if not party_codes:
        return None
    sources = np.array(hub_sources, dtype=np.int64)
    nbr = index.adjacency.expand(index, sources, np.zeros(len(sources)))[0].neighbour
    blocked = np.unique(nbr[np.isin(index.kind.view[nbr], party_codes) & (nbr != serving)]).astype(np.int64)
    return blocked if len(blocked) else None


def _spread(index: PerspectiveIndex, p: ActivationParameters, now: float, source_ids: list[int],
            unknown: list[str], agent: int, serving: int, hub_sources: list[int], blocked_nodes: np.ndarray | None,
            stamp: int) -> Walked:
    scratch = index.walk_scratch
    visited, received, extra_fan = scratch.visited, scratch.received, scratch.extra_fan
    max_weight = index.max_weight
    floor = spread_floor(index, agent, p)
    extra_scopes = index.scopes.visible_codes(agent, serving)
    visible = np.zeros(len(index.scopes.names) + 1, dtype=bool)  # by scope code + 1; 0: not current
    visible[1] = True  # org
    visible[extra_scopes + 1] = True
    # the viewer's fan of a node: its current org facts plus its current facts in the viewer's own scopes
    extra_ends = index.adjacency.viewer_fan_extra(index, extra_scopes)
    if len(extra_ends):
        np.add.at(extra_fan, extra_ends, 1)
    fan_org = index.fan_org.view
    exp_s = math.exp(p.associative_strength)
    shares = index.fan_shares(exp_s)
    stop = stamp + STOP
    visited[index.hub_nodes()] = stop  # hubs and blocked parties: reached, never expanded
    if blocked_nodes is not None:
        visited[blocked_nodes] = stop
    counts: dict[int, int] = {}
    for s in source_ids:
        counts[s] = counts.get(s, 0) + 1
    ordered_sources = sorted(counts)
    frontier = np.array(ordered_sources, dtype=np.int64)
    share_each = p.source_weight / len(source_ids)
    frontier_act = np.array([counts[s] for s in ordered_sources], dtype=np.float64) * share_each
    visited[frontier] = stamp
    viewpoint_facts = index.adjacency.between(index, agent, serving) if agent >= 0 and serving >= 0 else []
    rec_facts: list[np.ndarray] = []
    rec_x: list[np.ndarray] = []
    rec_hop: list[int] = []
    rec_via: list[np.ndarray] = []
    node_ids = [frontier]
    pending: np.ndarray | None = None  # entries of `received` written and not yet cleared
    try:
        for hop in range(1, p.depth + 1):
            share = shares[frontier]
            if len(extra_ends):
                more = extra_fan[frontier]
                if more.any():
                    share = np.minimum(1.0, exp_s / np.maximum(fan_org[frontier] + more, 1))
            out = frontier_act * share * p.hop_factor
            if hop > 1:
                # sources always pass (their own facts are the viewpoint); others only when it can still matter
                strong = (out if max_weight == 1.0 else out * max_weight) >= floor
                if not strong.all():
                    visited[frontier[~strong]] = stop  # reached, not expanded: not a twin end below
                    frontier, out = frontier[strong], out[strong]
                    if len(frontier) == 0:
                        break
            entries, x, via = index.adjacency.expand(index, frontier, out)
            if len(entries) == 0:
                break
            # a neighbour expanded at an earlier hop: the fact was reached from there already
            layer = stamp + hop - 1
            nbr = entries.neighbour
            at = visited[nbr]
            keep = visible[entries.live] & ((at < stamp) | (at >= layer))
            if hop == 1:
                if viewpoint_facts:
                    # the fact that the agent serves this person is the viewpoint itself: the header says it
                    fact_ids = entries.fact
                    for excluded in viewpoint_facts:
                        keep &= fact_ids != excluded
                if blocked_nodes is not None:
                    keep &= ~(np.isin(via, hub_sources) & np.isin(nbr, blocked_nodes))
            kept = np.flatnonzero(keep)
            if len(kept) == 0:
                break
            entries, nbr, x, via, at = entries.take(kept), nbr[kept], x[kept], via[kept], at[kept]
            x = x * entries.weight
            twin = at == layer
            if twin.any():
                # both ends of a fact in this frontier: it was gathered twice; one entry, the spreads summed
                entries, nbr, x, via, at = _merge_twins(twin, entries, nbr, x, via, at)
            rec_facts.append(entries.fact)
            rec_x.append(x)
            rec_hop.append(len(entries))
            rec_via.append(via)
            if hop == p.depth:
                break
            onward = at < stamp
            if not onward.any():
                break
            on_nbr, on_x = nbr[onward], x[onward]
            pending = on_nbr
            np.add.at(received, on_nbr, on_x)
            ordered = np.sort(on_nbr)
            first = np.empty(len(ordered), dtype=bool)
            first[0] = True
            np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
            next_nodes = ordered[first].astype(np.int64)
            frontier_act = received[next_nodes]
            received[next_nodes] = 0.0
            pending = None
            node_ids.append(next_nodes)
            visited[next_nodes] = stamp + hop
            frontier = next_nodes
    finally:  # the scratch is shared by the index's walks: leave it zero even if this one fails
        if len(extra_ends):
            extra_fan[extra_ends] = 0
        if pending is not None:
            received[pending] = 0.0

    nodes = node_ids  # the parents are found lazily, for paths only (`Walked.parents`)
    if not rec_facts:
        return Walked(_EMPTY, np.zeros(0), np.zeros(0), np.zeros(0), _EMPTY, _EMPTY, _NO_TIERS, source_ids,
                      unknown, nodes, now, p)
    if len(rec_facts) == 1:
        facts, spread, via = rec_facts[0], rec_x[0], rec_via[0]
        hops = np.ones(len(facts), dtype=np.int64)
    else:
        facts = np.concatenate(rec_facts)
        spread = np.concatenate(rec_x)
        via = np.concatenate(rec_via)
        hops = np.repeat(np.arange(1, len(rec_hop) + 1), rec_hop)
    facts = facts.astype(np.int64)
    conf = index.conf.view[facts]
    asserted, hashes = index.asserted.view[facts], index.fact_ids.hashes.view[facts]
    base = fact_base_levels(index, agent, serving, facts, now, p, asserted)
    if p.own_share == "rank":
        spread = own_spreads(index, p, facts, base, conf, asserted, hashes, spread, hops,
                             np.array(ordered_sources, dtype=np.int64), counts, share_each)
    return _ranked(p, now, facts, conf, asserted, hashes, base, spread, hops, via, source_ids, unknown, nodes)


def own_spreads(index: PerspectiveIndex, p: ActivationParameters, facts: np.ndarray, base: np.ndarray,
                conf: np.ndarray, asserted: np.ndarray, hashes: np.ndarray, spread: np.ndarray, hops: np.ndarray,
                sources: np.ndarray, counts: dict[int, int], share_each: float) -> np.ndarray:
    """The spread of the viewer's own facts (hop 1) with the rank share (`own_share = "rank"`): per source, its
    facts reached here ranked by standing B + ln(confidence) + ln(weight) (ties: the more recently asserted, then
    the id hash, as the final ranking), the r-th receiving source activation x hop factor x weight x
    min(1, e^S / r); a fact between two sources sums both. The walk itself passed the fan share on: only these
    facts' own x changes."""
    one = np.flatnonzero(hops == 1)
    if not len(one):
        return spread
    f = facts[one]
    weight = index.rel_weight.view[index.rel.view[f]].astype(np.float64)
    with np.errstate(divide="ignore"):
        # rounded: near-equal standings (sums of the same uses in another order) rank as equal, then by the ties
        standing = np.round(base[one] + np.log(conf[one].astype(np.float64)) + np.log(weight), 9)
    src, dst = index.src.view[f].astype(np.int64), index.dst.view[f].astype(np.int64)
    at_src, at_dst = np.isin(src, sources), np.isin(dst, sources) & (dst != src)
    owner = np.concatenate([np.flatnonzero(at_src), np.flatnonzero(at_dst)])
    group = np.concatenate([src[at_src], dst[at_dst]])
    order = np.lexsort((hashes[one][owner], -asserted[one][owner], -standing[owner], group))
    owner, group = owner[order], group[order]
    starts = np.ones(len(group), dtype=bool)
    starts[1:] = group[1:] != group[:-1]
    positions = np.arange(len(group))
    rank = positions - np.maximum.accumulate(np.where(starts, positions, 0)) + 1
    act = np.array([counts[int(s)] for s in sources], dtype=np.float64)[np.searchsorted(sources, group)] * share_each
    share = np.minimum(1.0, math.exp(p.associative_strength) / rank)
    parts = act * p.hop_factor * weight[owner] * share
    spread = spread.copy()
    spread[one] = np.bincount(owner, weights=parts, minlength=len(one))
    return spread


def _ranked(p: ActivationParameters, now: float, facts: np.ndarray, conf: np.ndarray, asserted: np.ndarray,
            hashes: np.ndarray, base: np.ndarray, spread: np.ndarray, hops: np.ndarray, via: np.ndarray,
            source_ids: list[int], unknown: list[str], nodes: list[np.ndarray]) -> Walked:
    """Every reached fact's A = B + ln(confidence) + S + ln(x), highest first, and the tiers."""
    with np.errstate(divide="ignore"):
        act = base + np.log(conf, dtype=np.float64) + p.associative_strength + np.log(spread)
    order = _rank(act, asserted, hashes)
    facts, act, spread, base, hops, via = (a[order] for a in (facts, act, spread, base, hops, via))
    tiers = tier_codes(p, act, via)
    return Walked(facts, act, spread, base, hops, via, tiers, source_ids, unknown, nodes, now, p)


def _rank(act: np.ndarray, asserted: np.ndarray, hashes: np.ndarray) -> np.ndarray:
    """The order of highest activation first; on a tie the more recently asserted first, then by id hash: one
    stable argsort, and the three-key sort only when some activations are equal (often, with tiers: org facts
    nobody used all have B = 0, and newer knowledge at equal standing goes first)."""
    order = np.argsort(-act, kind="stable")
    ranked = act[order]
    if len(ranked) > 1 and (ranked[1:] == ranked[:-1]).any():
        return np.lexsort((hashes, -asserted, -act))
    return order


def _merge_twins(twin: np.ndarray, entries: Entries, nbr: np.ndarray, x: np.ndarray, via: np.ndarray,
                 at: np.ndarray) -> tuple[np.ndarray, ...]:
    """A fact whose two ends are both in the frontier was gathered from each: keep its first entry with the
    two spreads summed, reached through the end that gave more (on a tie the lower entity id, whether the fact
    is in the CSR or the delta tail)."""
    candidates = np.flatnonzero(twin)
    fact = entries.fact
    order = candidates[np.argsort(fact[candidates], kind="stable")]
    pair = np.flatnonzero(fact[order[1:]] == fact[order[:-1]])
    if not len(pair):
        return entries, nbr, x, via, at
    first, second = order[pair], order[pair + 1]
    x = x.copy()
    via = via.copy()
    larger = (x[second] > x[first]) | ((x[second] == x[first]) & (via[second] < via[first]))
    via[first[larger]] = via[second[larger]]
    x[first] = x[first] + x[second]
    keep = np.ones(len(fact), dtype=bool)
    keep[second] = False
    return entries.take(keep), nbr[keep], x[keep], via[keep], at[keep]


def spread_floor(index: PerspectiveIndex, agent: int, p: ActivationParameters) -> float:
    """The least spread a fact needs to have any chance of A > tau for this agent: exp(tau - S - B_max), where
    B_max is the highest base level a fact can have for this agent (tiers: `tier_best_base`; calendar: a fact
    asserted and used, as often as this agent ever used one fact, within the last `minimum_age_seconds`). Never
    below `minimum_spread`."""
    if not p.cut_off:
        return p.minimum_spread
    if p.salience == "calendar":
        fresh = (p.minimum_age_seconds / p.time_unit_seconds) ** -p.decay
        best_base = math.log(fresh * (1 + index.uses.most(agent)))
    else:
        best_base = tier_best_base(index, agent, p)
    return max(p.minimum_spread, math.exp(p.threshold - p.associative_strength - best_base))


def fact_base_levels(index: PerspectiveIndex, agent: int, serving: int, facts: np.ndarray, now: float,
                     p: ActivationParameters, asserted: np.ndarray | None = None) -> np.ndarray:
    """B per fact for `agent` (serving `serving`, -1: no one) at `now`, by the parameters' salience model."""
    if asserted is None:
        asserted = index.asserted.view[facts]
    if p.salience == "calendar":
        return base_levels(index, agent, facts, now, p, asserted)
    return tier_base_levels(index, agent, serving, facts, now, p, asserted)


def base_levels(index: PerspectiveIndex, agent: int, facts: np.ndarray, now: float,
                p: ActivationParameters, asserted: np.ndarray | None = None) -> np.ndarray:
    """The calendar model's B per fact for one agent at `now`: the assertion plus the agent's recalls made at or
    before `now` (`asserted`: the facts' assertion times, when the caller holds them)."""
    floor, unit, d = p.minimum_age_seconds, p.time_unit_seconds, p.decay
    if asserted is None:
        asserted = index.asserted.view[facts]
    age = now - asserted
    if len(age) and age.min() >= 0:  # the usual case: every fact was asserted by `now`
        total = (np.maximum(age, floor, out=age) / unit) ** -d
    else:
        total = np.where(age >= 0, (np.maximum(age, floor) / unit) ** -d, 0.0)
    uses = index.uses.sorted(agent)
    if uses is not None and len(uses[0]):
        used_facts, used_at = uses
        lo = np.searchsorted(used_facts, facts, "left")
        found = used_facts[np.minimum(lo, len(used_facts) - 1)] == facts
        if found.any():  # usually not: the agent used none of these facts
            which = np.flatnonzero(found)
            lo = lo[which]
            lengths = np.searchsorted(used_facts, facts[which], "right") - lo
            n = int(lengths.sum())
            owner = np.repeat(which, lengths)
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
    return [index.refs[r] for r in refs], [index.fact_ids.at(f) for f in crossed]


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
