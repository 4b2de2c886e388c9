"""Serving searches: `search_for` finds the facts a viewer may see that match a request's content.

Indexes: one `SearchIndex` per tenant beside its perspective index, fed the same records as the perspective
service follows the log (and folded with it for an as-of search, or again after a forget). The candidates are
exactly the facts the viewer's perspective may show (domain rules of scope, status and hubs, read from the
perspective index); the ranking is domain/search.py's.

Nothing here writes: the application records a current search's results as recalled (mode `looked_up`) and keeps
its evidence (infra/adapters/evidence.py: the request, the parameters, the log position, every item with its score
components); `noumena explain SEARCH_ID` prints it.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np

from domain.errors import EmbedderUnavailable, InvalidInput, UnknownEntity, UnknownSession
from domain.perspective import new_served_id
from domain.ports import Embedder
from domain.release import release_in_background
from domain.search import (
    DEFAULT_SEARCH_PARAMETERS,
    Candidate,
    ItemKind,
    SearchAnswer,
    SearchItem,
    SearchParameters,
    SearchTier,
    TurnShown,
    diversify,
    recency,
    score,
    squash_activation,
)
from domain.search_time import time_window
from projections.perspective_index import PerspectiveIndex, Viewpoint, fold
from projections.perspective_scopes import SCOPE_ORG, SCOPE_PERSON, SCOPE_SESSION
from projections.perspective_walk import fact_base_levels
from projections.perspectives import Perspectives
from projections.search_documents import Documents
from projections.search_index import SearchIndex, owned_containers
from projections.search_lexical import idf
from projections.search_text import Analyzer, is_han_or_kana
from projections.search_turns import TurnIndex

SEARCH_PREFIX = "srch-"
TIER_OF_KIND = {SCOPE_SESSION: SearchTier.SESSION, SCOPE_PERSON: SearchTier.EPISODIC, SCOPE_ORG: SearchTier.SEMANTIC}
TIER_ORDER = (SearchTier.SESSION, SearchTier.EPISODIC, SearchTier.SEMANTIC)
SEMANTIC_POOL = 200
"""How many of the best semantic matches join the lexical ones as candidates."""
WALKED_CANDIDATES = 200
"""Beyond the exact limit, the facts the viewer's perspective reaches with the highest activation that are compared
with the query's embedding."""
MASKS_KEPT = 32
"""Viewers whose visibility masks are kept (the oldest goes first)."""
TURN_ACTIVATION = 0.5
"""A turn has no uses of its own in the graph: its activation term sits at the retrieval threshold (the logistic's
midpoint), so only content, recency and context decide between turns, and a fact's activation moves it either way
against them."""
CONTEXT_HITS = 20
"""The best turns and facts by content whose turns' neighbours in their session gain the `context` signal."""
DIRECT_TURNS = 20_000
"""While the sessions a viewer may see hold up to this many turns, those are scored directly (BM25 by looking
their terms up), rather than reading the query words' postings across every session for the few it may see."""
CONTEXT_DECAY = 0.5
"""A neighbour two turns away gains half what the next one does (the perspective's factor per hop)."""
RANKED_PER_RESULT = 4
"""Four candidates per result asked for (at least 40) are ranked with activation and recency, the best by content
(activation and recency add at most their weights, 0.07 by default; the rest are spare for de-duplication)."""


def is_search_id(identifier: str) -> bool:
    return identifier.startswith(SEARCH_PREFIX)


class Searches:
    """The search service of one process, beside the perspective service whose indexes it follows."""

    def __init__(self, perspectives: Perspectives, clock: Callable[[], datetime], embedder: Embedder | None = None,
                 parameters: SearchParameters = DEFAULT_SEARCH_PARAMETERS) -> None:
        self.perspectives = perspectives
        self._clock = clock
        self.embedder = embedder
        self.parameters = parameters
        self.analyzer = Analyzer()
        self._indexes: dict[str, SearchIndex] = {}
        self._masks: dict[tuple[int, int, int], tuple[tuple[int, int, int], np.ndarray]] = {}
        self._parties: dict[tuple[int, int, int], tuple[tuple[int, int, int], np.ndarray]] = {}
        self._seeding: dict[str, _Seed] = {}
        """Tenants refolded after a forget whose search index is being read from the log in the background."""
        self._unseeded: set[str] = set()
        """Tenants refolded after a forget whose search index is read again only when next needed."""
        perspectives.followers.append(self)

    # ------------------------------------------------------------------------------------------ following

    def _new(self, tenant: str) -> SearchIndex:
        return SearchIndex(tenant, self.analyzer, self.embedder)

    def applied(self, pindex: PerspectiveIndex, position: int, topic: str, data: dict[str, Any]) -> None:
        """The perspective service applied a record to `pindex`: apply it here too."""
        index = self._indexes.get(pindex.tenant)
        if index is None:
            seed = self._seeding.get(pindex.tenant)
            if seed is not None and not seed.done.is_set():
                seed.later.append((position, topic, data))  # (applied when the seed is installed)
                return
            if seed is not None:
                seed.later.append((position, topic, data))
                if self._installed(pindex) is not None:
                    return  # (the record is among those it was built from)
            elif pindex.tenant in self._unseeded:
                return  # (read from the log with the rest when the tenant's index is next needed)
            index = self._indexes[pindex.tenant] = self._seeded(pindex)
        index.apply(pindex, position, topic, data)

    def refolded(self, tenant: str) -> None:
        """The perspective service folded `tenant` again (after a forget): drop what this index derived from
        content; it is built again from the log (which now reads `[forgotten]`) when next needed. The analyzer's
        word caches go too (they are shared by the tenants: the others' words come back as they are used).

        The pass over the log that seeds it again (every event opened) then runs in a thread of its own, holding no
        lock (`wait_seeded`, which a search or context of the tenant calls first): done inline under the perspective
        service's lock, as for a tenant's first seeding, it held every tenant's perspectives, searches and contexts
        back for as long as it read (seconds per 100,000 events). Records the service applies meanwhile are kept
        beside it. The dropped index is taken apart in a thread of its own (domain/release.py): every search
        reads an index under the service's lock, which this runs under, so no one reads it any more."""
        dropped = self._indexes.pop(tenant, None)
        if dropped is not None:
            release_in_background(owned_containers(dropped))
        self._seeding.pop(tenant, None)
        self._unseeded.add(tenant)
        self.analyzer.forget_cached()

    def _read_seed(self, tenant: str, seed: _Seed) -> None:
        try:
            for position, topic, data in self.perspectives.records_of(tenant, seed.position):
                if topic == "fact.asserted":
                    seed.asserted[data["fact_id"]] = data
                else:
                    seed.records.append((position, topic, data))
        except Exception as error:  # (the tenant is then seeded inline on next use, as a first seeding is)
            seed.failed = error
        finally:
            seed.done.set()

    def wait_seeded(self, tenant: str, timeout: float) -> bool:
        """Before taking the lock every tenant's reads share: when a forget dropped the tenant's search index, read
        it again from the log now in a thread of its own, and wait for it (holding no lock); False when `timeout`
        seconds pass first."""
        if tenant in self._unseeded:
            with self.perspectives.lock:  # (briefly: what it applies from now on is kept beside the seed)
                self._unseeded.discard(tenant)
                if tenant and tenant not in self._indexes:
                    seed = self._seeding[tenant] = _Seed(self.perspectives.position)
                    threading.Thread(target=self._read_seed, args=(tenant, seed), name="noumena-search-seed",
                                     daemon=True).start()
        seed = self._seeding.get(tenant)
        return seed is None or seed.done.wait(timeout)

    def _installed(self, pindex: PerspectiveIndex) -> SearchIndex | None:
        """The tenant's search index from its background seed, once read (holding the service's lock)."""
        seed = self._seeding.get(pindex.tenant)
        if seed is None or not seed.done.is_set():
            return None
        del self._seeding[pindex.tenant]
        if seed.failed is not None:
            return None
        index = self._new(pindex.tenant)
        asserted = dict(seed.asserted)
        for position, topic, data in (*seed.records, *seed.later):
            if topic == "fact.asserted":
                asserted[data["fact_id"]] = data
            else:
                index.apply(pindex, position, topic, data)  # aliases and messages
        index.sync(pindex, asserted)
        index.position = pindex.position
        self._indexes[pindex.tenant] = index
        return index

    def index(self, tenant: str) -> tuple[PerspectiveIndex, SearchIndex]:
        """The tenant's perspective and search indexes, caught up with the log."""
        pindex = self.perspectives.index(tenant)
        index = self._indexes.get(tenant)
        if index is None:
            index = self._installed(pindex)
        if index is None:
            self._seeding.pop(tenant, None)  # (still reading: seeded here, as it was before the background seed)
            self._unseeded.discard(tenant)
            index = self._indexes[tenant] = self._seeded(pindex)
        index.sync(pindex)
        index.flush()
        return pindex, index

    def _seeded(self, pindex: PerspectiveIndex) -> SearchIndex:
        """A search index for the facts `pindex` already holds (it may have been loaded in bulk from the read model,
        in another order than the log's), their documents built from one pass over the log: the read model keeps
        no message text, and a fact's document needs the messages of its provenance."""
        index = self._new(pindex.tenant)
        if pindex.position:  # (turns too: a tenant may hold messages and no fact)
            asserted: dict[str, dict[str, Any]] = {}
            for _position, topic, data in self.perspectives.records(pindex.position):
                if data.get("tenant") != pindex.tenant:
                    continue
                if topic == "fact.asserted":
                    asserted[data["fact_id"]] = data
                else:
                    index.apply(pindex, _position, topic, data)  # aliases and messages
            index.sync(pindex, asserted)
        index.position = pindex.position
        return index

    def warm(self, tenants: Sequence[str]) -> None:
        """Seed now the search indexes of `tenants` that have none yet, all from one pass over the log (a served
        replica does it before it says ready: a tenant's first search would otherwise pay for its seeding, the
        pass over the log and the embedding of every fact)."""
        with self.perspectives.lock:
            self.perspectives.catch_up()
            pindexes = {tenant: self.perspectives.index(tenant) for tenant in dict.fromkeys(tenants)
                        if tenant not in self._indexes}
            seeded = {tenant: self._new(tenant) for tenant in pindexes}
            asserted: dict[str, dict[str, dict[str, Any]]] = {tenant: {} for tenant in pindexes}
            with_facts = [pindex.position for pindex in pindexes.values() if pindex.fact_count]
            for position, topic, data in self.perspectives.records(max(with_facts)) if with_facts else ():
                pindex = pindexes.get(data.get("tenant"))  # type: ignore[arg-type]
                if pindex is None or not pindex.fact_count or position > pindex.position:
                    continue
                if topic == "fact.asserted":
                    asserted[pindex.tenant][data["fact_id"]] = data
                else:
                    seeded[pindex.tenant].apply(pindex, position, topic, data)  # aliases and messages
            for tenant, index in seeded.items():
                pindex = pindexes[tenant]
                if pindex.fact_count:
                    index.sync(pindex, asserted[tenant])
                index.position = pindex.position
                index.flush()
                self._indexes[tenant] = index

    def _fold(self, tenant: str, until: float | None) -> tuple[PerspectiveIndex, SearchIndex]:
        index = self._new(tenant)
        pindex = fold(tenant, self.perspectives.records(), until=until,
                      then=lambda p, position, topic, data: index.apply(p, position, topic, data))
        index.flush()
        return pindex, index

    # ------------------------------------------------------------------------------------------ serving

    def search_for(self, tenant: str, agent: str, query: str, serving: str | None = None,
                   session_id: str | None = None, k: int | None = None, as_of: datetime | None = None,
                   about: Sequence[str] = ()) -> SearchAnswer:
        """The facts `agent` may see (serving `serving`, in session `session_id`) that best match `query`, nearest
        tier first. `about`: the exact filter (seed 004): only facts touching one of these entities. Computed only:
        the application records a current search's results as recalled and keeps its evidence."""
        p = self.parameters if k is None else self.parameters.model_copy(update={"k": k})
        if not query.strip():
            raise InvalidInput("the query is empty", field="query")
        if not 1 <= p.k <= 100:
            raise InvalidInput("k must be between 1 and 100", field="k")
        if as_of is not None and as_of.tzinfo is None:
            raise InvalidInput("as_of needs a time zone", field="as_of")
        with self.perspectives.lock:
            if as_of is None:
                pindex, index = self.index(tenant)
                moment = self._clock()
            else:
                pindex, index = self._fold(tenant, as_of.timestamp())
                moment = as_of
            answer = self._answer(tenant, pindex, index, agent, query, serving, session_id, p, moment, as_of,
                                  tuple(dict.fromkeys(about)))
        return answer

    def _answer(self, tenant: str, pindex: PerspectiveIndex, index: SearchIndex, agent: str, query: str,
                serving: str | None, session_id: str | None, p: SearchParameters, moment: datetime,
                as_of: datetime | None, about: tuple[str, ...] = ()) -> SearchAnswer:
        for field_name, ref in (("agent", agent), ("serving", serving)):
            if ref is not None and pindex.lookup(ref) is None:
                raise UnknownEntity(ref, tenant, field=field_name)
        agent_id = pindex.lookup(agent)
        assert agent_id is not None
        serving_id = pindex.lookup(serving) if serving is not None else -1
        session_code = None
        if session_id is not None:
            owner = pindex.scopes.sessions.get(session_id)
            if owner is None:
                raise UnknownSession(session_id)
            if owner[0] != agent_id or (owner[1] >= 0 and owner[1] != serving_id):
                raise InvalidInput(f"session {session_id!r} is not a session of {agent}"
                                   + (f" serving {serving}" if serving else ""), field="session_id")
            session_code = pindex.scopes.codes.get(f"session:{session_id}")
        now = moment.timestamp()
        ends = []
        for ref in about:
            eid = pindex.lookup(ref)
            if eid is None:
                raise UnknownEntity(ref, tenant, field="about")
            ends.append(eid)
        n = min(len(index.doc_len), pindex.fact_count)
        exact = index.live_docs <= p.exact_semantic_limit
        if exact:  # few facts: one mask per viewer (kept), and every visible fact is compared with the query
            visible = self._visible(pindex, agent_id, serving_id, n)
            if ends:
                visible = visible & (np.isin(pindex.src.data[:n], ends) | np.isin(pindex.dst.data[:n], ends))
            mask = visible

            def allowed(docs: np.ndarray) -> np.ndarray:
                return mask[docs]
        else:  # many: what the viewer may see is asked of the candidates only
            blocked = self._blocked(pindex, agent_id, serving_id) if bool(pindex.hub.data[agent_id]) else None
            allowed = visible_among(pindex, agent_id, serving_id, n, ends, blocked)
        terms = self.analyzer.terms(query)
        linked, name_terms = index.linked(pindex, terms)
        dates = time_window(query, moment) if p.time_weight > 0 else None
        weights = {t: p.name_weight for t in name_terms} if set(terms) - name_terms else None
        # a question's own words (what, would, likely, ...) say how it asks, not what about: they count only
        # when the request has no other words
        asking = set(terms) & self.analyzer.function_terms if set(terms) - name_terms - \
            self.analyzer.function_terms else set()
        if asking and p.function_weight == 0:
            terms = [t for t in terms if t not in asking]
        elif asking:
            weights = (weights or {}) | {t: p.function_weight for t in asking}
        ranked_fully = max(40, RANKED_PER_RESULT * p.k)
        # the answer keeps the parameters asked for; `p` ranks, with the weights the query's coverage moves
        asked = p
        if self.embedder is not None:
            p = weighed_by_coverage(p, index.turns, [t for t in terms if t not in name_terms and not is_han_or_kana(t)
                                                     and t not in self.analyzer.function_terms])
        # beyond the exact limit, the best `ranked_fully` by words are exact, the rest of the lexical candidates
        # the best of what was read on the way (projections/search_lexical.py)
        lex_docs, lex_scores = index.bm25_top(terms, p.bm25_k1, p.bm25_b, p.lexical_candidates, allowed,
                                              exact=None if exact else ranked_fully, weights=weights)
        lexical = dict(zip(lex_docs.tolist(), (lex_scores / lex_scores.max()).tolist(), strict=True)) \
            if len(lex_docs) else {}
        walked = pindex.walk(Viewpoint(agent=agent, serving=serving), self.perspectives.parameters, now)
        if exact:
            pool = np.flatnonzero(visible)
        else:  # the best lexical matches, the viewer's own tiers, and what its perspective reaches most strongly
            own = pindex.adjacency.scope_facts(pindex, pindex.scopes.visible_codes(agent_id, serving_id))
            own = own[own < n]
            reached = walked.facts[walked.facts < n]
            nearest = reached[:WALKED_CANDIDATES].astype(np.int64)  # the walk ranks by activation
            pool = np.unique(np.concatenate([lex_docs, own, nearest]).astype(np.int64))
            pool = pool[allowed(pool)]
        meaning = self.analyzer.without(query, name_terms) if weights and p.name_weight < 1 else query
        vector, mode = self._query_vector(index, meaning, "exact" if exact else "candidates")
        semantic = semantic_matches(index, vector, pool, lex_docs, p)
        docs = np.array(sorted(set(lexical) | set(semantic)), dtype=np.int64)
        if len(docs) > ranked_fully:
            # only the best by content (and the entities and dates named) are ranked fully, activation and
            # recency adding at most their weights; and as many of the best of the viewer's own tiers (session and
            # person scopes), so a nearer tier is weighed with its best
            first = p.lexical_weight * _looked_up(lexical, docs) + p.semantic_weight * _looked_up(semantic, docs) \
                + p.entity_weight * _touching(pindex, docs, linked) + p.time_weight * _starting(index, docs, dates)
            best = np.zeros(len(docs), dtype=bool)
            best[np.argpartition(-first, ranked_fully - 1)[:ranked_fully]] = True
            own = np.flatnonzero(pindex.scope.data[docs] != 0)
            if len(own) > ranked_fully:
                own = own[np.argpartition(-first[own], ranked_fully - 1)[:ranked_fully]]
            best[own] = True
            docs = docs[best]
        # a session that matches as a whole (its turns as one document) makes its turns and facts likelier: what
        # a question asks about is often said over several turns, none of which holds all of its words
        mine = index.turns.visible_turns(pindex, agent_id, serving_id, ends, DIRECT_TURNS) \
            if p.turns and p.session_weight > 0 and len(index.turns.doc_len) else None
        matched_sessions = session_matches(index.turns, terms, p, mine, weights)
        ranked: list[Candidate] = []
        if len(docs):
            activation = self._activation(pindex, agent_id, docs, walked.facts, walked.activation, now)
            ages = now - self._last_use(pindex, agent_id, docs)
            scope_kind = pindex.scopes.kind.data[pindex.scope.data[docs]]
            scopes = pindex.scope.data[docs]
            named = _touching(pindex, docs, linked)
            starting = _starting(index, docs, dates)
            for k, doc in enumerate(docs.tolist()):
                tier = TIER_OF_KIND[int(scope_kind[k])]
                if tier is SearchTier.SESSION and session_code is not None and int(scopes[k]) != session_code:
                    tier = SearchTier.EPISODIC if serving_id >= 0 else SearchTier.SEMANTIC  # another session's
                ranked.append(score(Candidate(
                    doc=doc, tier=tier, lexical=lexical.get(doc, 0.0), semantic=semantic.get(doc, 0.0),
                    activation=squash_activation(float(activation[k]), self.perspectives.parameters.threshold),
                    recency=recency(float(ages[k]), p), entity=float(named[k]),
                    time=float(starting[k]), session=_session_match(index, matched_sessions, doc),
                    provenance=frozenset(index.message_ids[doc])), p))
        by_content = sorted(ranked, key=lambda c: -(c.scores["lexical"] + c.scores["semantic"]))[:CONTEXT_HITS]
        fact_seeds = [(c.scores["lexical"] + c.scores["semantic"],
                       [d for d in map(index.turn_of, index.message_ids[c.doc]) if d is not None]) for c in by_content]
        ranked += turn_candidates(pindex, index.turns, agent_id, serving_id, session_id, terms, vector, p,
                                        now, ranked_fully, ends, weights, fact_seeds, dates, matched_sessions, mine)
        if not ranked:
            return self._empty(tenant, agent, serving, session_id, query, asked, moment, as_of, pindex, mode)
        ranked.sort(key=lambda c: (-c.score, c.kind, c.doc))
        answered_by, chosen = self._by_tier(ranked, p, index)
        items = [self._item(pindex, index, rank, c) for rank, c in enumerate(chosen, start=1)]
        return SearchAnswer(
            search_id=SEARCH_PREFIX + new_served_id(moment), tenant=tenant, agent=agent, serving=serving,
            session_id=session_id, query=query, k=p.k, as_of=as_of.isoformat() if as_of else None,
            served_at=moment.astimezone(UTC).isoformat(), log_position=pindex.position, answered_by=answered_by,
            semantic=mode, embedder=self.embedder.name if self.embedder else None, parameters=asked, items=items,
            about=list(about))

    def _blocked(self, pindex: PerspectiveIndex, agent: int, serving: int) -> np.ndarray:
        """`blocked_parties` of a hub viewer, kept while the index has not moved (expanding a hub with a large fan
        costs milliseconds)."""
        key = (id(pindex), agent, serving)
        stamp = (pindex.position, pindex.fact_count, -1)
        cached = self._parties.get(key)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        blocked = blocked_parties(pindex, agent, serving)
        if len(self._parties) >= MASKS_KEPT:
            self._parties.pop(next(iter(self._parties)))
        self._parties[key] = (stamp, blocked)
        return blocked

    def _visible(self, pindex: PerspectiveIndex, agent: int, serving: int, n: int) -> np.ndarray:
        """`visible_facts` for this viewer, kept while the index has not moved (a viewer asks again and again; at
        a million facts the mask costs milliseconds). Read only: callers combine it into new arrays."""
        key = (id(pindex), agent, serving)
        stamp = (pindex.position, pindex.fact_count, n)
        cached = self._masks.get(key)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        visible = visible_facts(pindex, agent, serving, n)
        visible.flags.writeable = False
        if len(self._masks) >= MASKS_KEPT:
            self._masks.pop(next(iter(self._masks)))
        self._masks[key] = (stamp, visible)
        return visible

    def _empty(self, tenant: str, agent: str, serving: str | None, session_id: str | None, query: str,
               p: SearchParameters, moment: datetime, as_of: datetime | None, pindex: PerspectiveIndex,
               mode: str) -> SearchAnswer:
        return SearchAnswer(
            search_id=SEARCH_PREFIX + new_served_id(moment), tenant=tenant, agent=agent, serving=serving,
            session_id=session_id, query=query, k=p.k, as_of=as_of.isoformat() if as_of else None,
            served_at=moment.astimezone(UTC).isoformat(), log_position=pindex.position, answered_by=None,
            semantic=mode, embedder=self.embedder.name if self.embedder else None, parameters=p, items=[])

    def _query_vector(self, index: SearchIndex, query: str, mode: str) -> tuple[np.ndarray | None, str]:
        """The query's embedding, and how the semantic signal is computed (`mode`, `off`, or `failed: <why>`)."""
        if self.embedder is None:
            return None, "off"
        if index.embed_error is not None or index.turns.embed_error is not None:
            return None, f"failed: {index.embed_error or index.turns.embed_error}"
        try:
            return np.asarray(self.embedder.embed([query]), dtype=np.float32)[0], mode
        except EmbedderUnavailable as error:  # outside our control: answer lexically and say so
            return None, f"failed: {error}"

    def _activation(self, pindex: PerspectiveIndex, agent: int, docs: np.ndarray, reached: np.ndarray,
                    reached_activation: np.ndarray, now: float) -> np.ndarray:
        """The viewer's activation of each fact: the perspective's own where its walk reached the fact; else base
        level and confidence with the spread of a fact one hop beyond the walk's depth."""
        parameters = self.perspectives.parameters
        base = fact_base_levels(pindex, agent, -1, docs, now, parameters)
        far = np.log(parameters.hop_factor) * (parameters.depth + 1)
        out = base + np.log(np.maximum(pindex.conf.data[docs], 1e-6)) + parameters.associative_strength + far
        if len(reached):
            by_fact = np.argsort(reached, kind="stable")
            ordered = reached[by_fact]
            at = np.minimum(np.searchsorted(ordered, docs), len(ordered) - 1)
            hit = ordered[at] == docs
            out[hit] = reached_activation[by_fact[at[hit]]]
        return out

    @staticmethod
    def _last_use(pindex: PerspectiveIndex, agent: int, docs: np.ndarray) -> np.ndarray:
        """The last use of each fact by this agent: its first use (see `first_use`), or a later recall."""
        last = pindex.asserted.data[docs].astype(np.float64).copy()
        uses = pindex.uses.by_agent.get(agent)
        if uses is not None and uses[0].size:
            facts, times = uses[0].view, uses[1].view  # docs are sorted: each use is looked up among them
            at = np.minimum(np.searchsorted(docs, facts), len(docs) - 1)
            hit = docs[at] == facts
            if hit.any():
                np.maximum.at(last, at[hit], times[hit])
        return last

    def _by_tier(self, ranked: list[Candidate], p: SearchParameters, index: SearchIndex
                 ) -> tuple[SearchTier | None, list[Candidate]]:
        """Nearest tier first: the first tier whose best score (fact or turn) reaches the threshold answers. Facts
        and turns are each put in tier order (the answering tier's first, then the farther tiers', then the
        nearer ones'; none answering: best first, `all`), and the two orders are merged by score, so a person's
        many turns (episodic) do not push every organization fact (semantic) out, nor the other way round."""
        answered: SearchTier | None = None
        for tier in TIER_ORDER:
            best = next((c for c in ranked if c.tier is tier), None)
            if best is not None and best.score >= p.tier_threshold:
                answered = tier
                break
        if answered is None:
            return (SearchTier.ALL if ranked else None), diversify(ranked, p.k, _similarities(index), p)
        start = TIER_ORDER.index(answered)
        tiers = TIER_ORDER[start:] + TIER_ORDER[:start]
        facts = [c for tier in tiers for c in ranked if c.tier is tier and c.kind is ItemKind.FACT]
        turns = [c for tier in tiers for c in ranked if c.tier is tier and c.kind is ItemKind.TURN]
        return answered, diversify(_merged(facts, turns), p.k, _similarities(index), p)

    @staticmethod
    def _item(pindex: PerspectiveIndex, index: SearchIndex, rank: int, c: Candidate) -> SearchItem:
        doc = c.doc
        if c.kind is ItemKind.TURN:
            turns = index.turns
            message_id = turns.message_ids[doc]
            session = turns.session_ids[turns.session[doc]]
            around = sorted((d for d in map(index.turn_of, c.shown) if d is not None), key=lambda d: turns.seq[d])
            return SearchItem(
                rank=rank, kind=ItemKind.TURN, text=index.said(message_id), scope=f"session:{session}",
                tier=c.tier, score=c.score, scores=c.scores, session_id=session,
                message_ids=[message_id, *(turns.message_ids[d] for d in around)], message_id=message_id,
                role=turns.roles[turns.role[doc]], occurred_at=_iso(turns.occurred[doc]),
                around=[TurnShown(message_id=turns.message_ids[d], role=turns.roles[turns.role[d]],
                                  text=index.said(turns.message_ids[d])) for d in around])
        subject, obj = int(pindex.src.data[doc]), int(pindex.dst.data[doc])
        relation = pindex.rel_names[int(pindex.rel.data[doc])]
        reason = pindex.reasons.get(doc) or None
        text = f"{pindex.labels[subject]} —{relation}→ {pindex.labels[obj]}" + (f": {reason}" if reason else "")
        return SearchItem(
            rank=rank, fact_id=pindex.fact_ids.at(doc), subject=pindex.refs[subject], relation=relation,
            object=pindex.refs[obj], subject_label=pindex.labels[subject], object_label=pindex.labels[obj],
            text=text, reason=reason, scope=pindex.scopes.names[int(pindex.scope.data[doc])], tier=c.tier,
            valid_from=_iso(index.valid_from[doc]), score=c.score, scores=c.scores, session_id=index.sessions[doc],
            message_ids=list(index.message_ids[doc]))

    def provenance(self, tenant: str, fact_ids: list[str]) -> list[list[str]]:
        """The message ids in the provenance of each fact (empty for a fact unknown here)."""
        pindex, index = self.index(tenant)
        out: list[list[str]] = []
        for fact_id in fact_ids:
            doc = pindex.fact_ids.find(fact_id)
            out.append(list(index.message_ids[doc]) if doc is not None and doc < len(index.message_ids) else [])
        return out


def weighed_by_coverage(p: SearchParameters, turns: TurnIndex, words: Sequence[str]) -> SearchParameters:
    """`p` with its lexical weight following `word_coverage` of `words` (raised to `coverage_power`), what it loses
    going to the semantic signal; `p` itself when nothing moves (every word held, coverage off, no semantic
    weight to move it to)."""
    if p.coverage_power == 0 or p.semantic_weight <= 0:
        return p
    covered = word_coverage(turns, words) ** p.coverage_power
    if covered >= 1:
        return p
    return p.model_copy(update={"lexical_weight": p.lexical_weight * covered,
                                "semantic_weight": p.semantic_weight + p.lexical_weight * (1 - covered)})


def word_coverage(turns: TurnIndex, words: Sequence[str]) -> float:
    """The share of `words` (a query's terms other than names, function words and Han/kana characters and bigrams,
    which are no words of their own) that the turns can match: the idf of those some turn holds over the idf of all
    (a word no turn holds counts as the rarest). 1 when none is held: the lexical match is then the names' alone,
    which say whom (the embedded query leaves them out), and nothing of it is taken away. Read from the turns' own
    statistics, those their BM25 weighs words by (a lookup per word: no cost that grows with the documents)."""
    n = max(turns.live_docs, 1)
    found = whole = 0.0
    for word in dict.fromkeys(words):
        tid = turns.vocabulary.get(word)
        weight = idf(n, len(turns.postings[tid].docs) if tid is not None else 0)
        whole += weight
        if tid is not None:
            found += weight
    return found / whole if found > 0 else 1.0


def semantic_matches(documents: Documents, vector: np.ndarray | None, pool: np.ndarray, lex_docs: np.ndarray,
                     p: SearchParameters) -> dict[int, float]:
    """Cosines of the query with the pool's documents: the best of them and every lexical match become
    semantic candidates."""
    if vector is None or not len(pool):
        return {}
    cosines = documents.cosines(vector, pool)
    top = np.argsort(-cosines)[:SEMANTIC_POOL]
    chosen = set(pool[top].tolist()) | set(lex_docs.tolist())
    in_pool = dict(zip(pool.tolist(), cosines.tolist(), strict=True))
    lexical = set(lex_docs.tolist())
    return {d: max(in_pool[d], 0.0) for d in chosen
            if d in in_pool and (d in lexical or in_pool[d] >= p.minimum_semantic)}

def session_matches(turns: TurnIndex, terms: list[str], p: SearchParameters, mine: np.ndarray | None,
                    weights: dict[str, float] | None = None) -> np.ndarray | None:
    """Per session code, how well the session as a whole matches the query: the BM25 of the viewer's turns of it
    (`mine`) as one document, among the viewer's sessions, relative to the best session's. None when the signal is
    off, nothing matches, or the viewer sees too many turns to score them directly (`mine` None)."""
    if p.session_weight <= 0 or mine is None or not len(mine):
        return None
    codes = np.frombuffer(turns.session, dtype=np.int32)[mine]
    grouped = turns.bm25_grouped(terms, p.bm25_k1, p.turn_bm25_b, mine, codes, len(turns.session_ids),
                                 weights=weights)
    best = grouped.max()
    return grouped / best if best > 0 else None


def turn_candidates(pindex: PerspectiveIndex, turns: TurnIndex, agent: int, serving: int, session_id: str | None,
                    terms: list[str], vector: np.ndarray | None, p: SearchParameters, now: float,
                    ranked_fully: int, about: Sequence[int] = (), weights: dict[str, float] | None = None,
                    fact_seeds: Sequence[tuple[float, list[int]]] = (),
                    dates: tuple[float, float] | None = None, session_match: np.ndarray | None = None,
                    mine: np.ndarray | None = None) -> list[Candidate]:
    """The turns the viewer may see (their session's privacy) that match, with the same signals as facts (a
    turn's activation is `TURN_ACTIVATION`; its recency counts from when it was said), `context`: a turn
    next to one of the best matching turns of its session gains a share of that turn's content score, and
    `session`: its session's match as a whole (`session_match`, from `session_matches`). `mine`: the viewer's
    turns when the caller has them already (`TurnIndex.visible_turns`)."""
    n = len(turns.doc_len)
    if not n or not p.turns:
        return []
    allowed = turns.allowed(pindex, agent, serving, about=about)
    if mine is None:
        mine = turns.visible_turns(pindex, agent, serving, about, DIRECT_TURNS)
    if mine is not None:  # the exact filter first (seed 004): the viewer's own sessions hold few turns
        lex_docs, lex_scores = turns.bm25_among(terms, p.bm25_k1, p.turn_bm25_b, mine, p.lexical_candidates,
                                                weights=weights)
    else:
        lex_docs, lex_scores = turns.bm25_top(terms, p.bm25_k1, p.turn_bm25_b, p.lexical_candidates, allowed,
                                              exact=ranked_fully, weights=weights)
    lexical = dict(zip(lex_docs.tolist(), (lex_scores / lex_scores.max()).tolist(), strict=True)) \
        if len(lex_docs) else {}
    if mine is not None and len(mine) <= p.exact_semantic_limit:
        pool = mine
    else:
        pool = lex_docs.astype(np.int64)
    semantic = semantic_matches(turns, vector, pool, lex_docs, p)
    content = {d: p.lexical_weight * lexical.get(d, 0.0) + p.semantic_weight * semantic.get(d, 0.0)
               for d in set(lexical) | set(semantic)}
    if dates is not None:  # turns said within the named dates are candidates whatever their words
        said = np.frombuffer(turns.occurred, dtype=np.float64)
        within = np.flatnonzero((said >= dates[0]) & (said < dates[1]))
        within = within[allowed(within)] if len(within) else within
        for d in within[:ranked_fully].tolist():
            content.setdefault(d, 0.0)
    said = np.frombuffer(turns.occurred, dtype=np.float64)
    on_date = (lambda d: bool(dates[0] <= said[d] < dates[1])) if dates is not None else (lambda d: False)
    first = {d: c + (p.time_weight if on_date(d) else 0.0) for d, c in content.items()}
    best = sorted(first, key=lambda d: (-first[d], d))[:ranked_fully]
    context: dict[int, float] = {}
    if p.context_weight > 0:
        seeds = [(content[d], d, 0) for d in best[:CONTEXT_HITS]]
        for strength, source_turns in fact_seeds:  # the turns a matching fact came from, and theirs
            seeds += [(strength, doc, 1) for doc in source_turns]
        top = max((strength for strength, _, _ in seeds), default=0.0) or 1.0
        for strength, hit, itself in seeds:
            if itself:
                context[hit] = max(context.get(hit, 0.0), strength / top)
            for near, distance in turns.neighbours(hit, p.context_before, p.context_after):
                share = strength / top * CONTEXT_DECAY ** (abs(distance) - 1)
                context[near] = max(context.get(near, 0.0), share)
        if context:
            near = np.array(sorted(context), dtype=np.int64)
            seen = set(near[allowed(near)].tolist())
            context = {d: v for d, v in context.items() if d in seen}
    # the best by what is known before the cosines of context-only turns and the per-turn signals (those add at
    # most activation's and recency's weights)
    def session_of(d: int) -> float:
        return float(session_match[turns.session[d]]) if session_match is not None else 0.0

    reach = {d: first.get(d, p.time_weight if on_date(d) else 0.0) + p.context_weight * context.get(d, 0.0)
             + p.session_weight * session_of(d) for d in set(best) | set(context)}
    chosen = sorted(sorted(reach, key=lambda d: (-reach[d], d))[:ranked_fully])
    if not chosen:
        return []
    if vector is not None:  # a neighbour found by context only: its own cosine too
        missing = np.array([d for d in chosen if d not in semantic], dtype=np.int64)
        if len(missing):
            semantic.update(zip(missing.tolist(), np.maximum(turns.cosines(vector, missing), 0).tolist(),
                                strict=True))
    owner_serving = turns.session_owners(pindex)[1]

    def window(doc: int) -> list[int]:
        """The turns around `doc` (its session's: visible as it is)."""
        if not (p.window_before or p.window_after):
            return []
        return [d for d, _ in turns.neighbours(doc, p.window_before, p.window_after)]

    out = []
    for doc in chosen:
        code = turns.session[doc]
        if session_id is not None and turns.session_ids[code] == session_id:
            tier = SearchTier.SESSION
        else:
            tier = SearchTier.EPISODIC if int(owner_serving[code]) >= 0 else SearchTier.SEMANTIC
        when = float(said[doc])
        out.append(score(Candidate(
            doc=doc, tier=tier, kind=ItemKind.TURN, lexical=lexical.get(doc, 0.0),
            semantic=semantic.get(doc, 0.0), activation=TURN_ACTIVATION,
            recency=recency(0.0 if math.isnan(when) else now - when, p), context=context.get(doc, 0.0),
            time=float(on_date(doc)), session=session_of(doc),
            provenance=frozenset((turns.message_ids[doc],)),
            shown=frozenset(turns.message_ids[d] for d in window(doc))), p))
    return out



def _session_match(index: SearchIndex, matched: np.ndarray | None, doc: int) -> float:
    """The match of the session a fact came from (0 when it names none the turns know)."""
    if matched is None or index.sessions[doc] is None:
        return 0.0
    code = index.turns.session_codes.get(index.sessions[doc])  # type: ignore[arg-type]
    return float(matched[code]) if code is not None else 0.0


def _touching(pindex: PerspectiveIndex, docs: np.ndarray, entities: list[int]) -> np.ndarray:
    """1.0 for each of the facts `docs` whose subject or object is one of `entities`, else 0.0."""
    if not entities:
        return np.zeros(len(docs))
    return (np.isin(pindex.src.data[docs], entities) | np.isin(pindex.dst.data[docs], entities)).astype(np.float64)


def _starting(index: SearchIndex, docs: np.ndarray, dates: tuple[float, float] | None) -> np.ndarray:
    """1.0 for each of the facts `docs` that holds from within `dates`, else 0.0."""
    if dates is None:
        return np.zeros(len(docs))
    starts = np.frombuffer(index.valid_from, dtype=np.float64)[docs]
    return ((starts >= dates[0]) & (starts < dates[1])).astype(np.float64)


def _merged(a: list[Candidate], b: list[Candidate]) -> list[Candidate]:
    """Two orders merged: the head with the higher score goes first (each keeps its own order)."""
    out: list[Candidate] = []
    i = j = 0
    while i < len(a) and j < len(b):
        if a[i].score >= b[j].score:
            out.append(a[i])
            i += 1
        else:
            out.append(b[j])
            j += 1
    return out + a[i:] + b[j:]


def _similarities(index: SearchIndex) -> Callable[[Candidate, Candidate], float]:
    """The cosine of two candidates, facts or turns (0 without vectors); each vector read once, when first
    compared."""
    vectors: dict[tuple[ItemKind, int], np.ndarray | None] = {}

    def vector(c: Candidate) -> np.ndarray | None:
        if c.key not in vectors:
            vectors[c.key] = (index.turns if c.kind is ItemKind.TURN else index).vector(c.doc)
        return vectors[c.key]

    def similar(a: Candidate, b: Candidate) -> float:
        va, vb = vector(a), vector(b)
        return 0.0 if va is None or vb is None else float(va @ vb)

    return similar


def _looked_up(values: dict[int, float], docs: np.ndarray) -> np.ndarray:
    """Each of `docs`' value in `values`, 0 where it has none."""
    if not values:
        return np.zeros(len(docs))
    keys = np.fromiter(values.keys(), dtype=np.int64, count=len(values))
    found = np.fromiter(values.values(), dtype=np.float64, count=len(values))
    order = np.argsort(keys)
    keys, found = keys[order], found[order]
    at = np.minimum(np.searchsorted(keys, docs), len(keys) - 1)
    return np.where(keys[at] == docs, found[at], 0.0)


def _iso(epoch: float) -> str | None:
    return None if math.isnan(epoch) else datetime.fromtimestamp(epoch, UTC).isoformat()


def visible_among(pindex: PerspectiveIndex, agent: int, serving: int, n: int, about: Sequence[int] = (),
                  blocked: np.ndarray | None = None) -> Callable[[np.ndarray], np.ndarray]:
    """`visible_facts`, asked of given documents only (no array over every fact): current, in a scope the
    viewer sees, not touching a party a hub viewer must not reach, and touching one of `about` if given.
    `blocked`: the hub viewer's `blocked_parties` when the caller has them already."""
    scopes = pindex.scopes.visible(agent, serving)
    if blocked is None and agent >= 0 and bool(pindex.hub.data[agent]):
        blocked = blocked_parties(pindex, agent, serving)
    barred = _entity_mask(pindex, blocked) if blocked is not None and len(blocked) else None
    wanted = _entity_mask(pindex, np.asarray(about, dtype=np.int64)) if about else None
    live, scope, src, dst = pindex.live.data, pindex.scope.data, pindex.src.data, pindex.dst.data

    def allowed(docs: np.ndarray) -> np.ndarray:
        ok = (docs < n) & (docs >= 0)
        docs = np.where(ok, docs, 0)
        ok &= (live[docs] != 0) & scopes[scope[docs]]
        if barred is not None:
            ok &= ~(barred[src[docs]] | barred[dst[docs]])
        if wanted is not None:
            ok &= wanted[src[docs]] | wanted[dst[docs]]
        return ok

    return allowed


def _entity_mask(pindex: PerspectiveIndex, entities: np.ndarray) -> np.ndarray:
    """A bool per entity of the index: is it one of `entities` (a lookup per fact end instead of a set test)."""
    mask = np.zeros(len(pindex.refs), dtype=bool)
    mask[entities] = True
    return mask


def visible_facts(pindex: PerspectiveIndex, agent: int, serving: int, n: int) -> np.ndarray:
    """A bool per fact (the first n): may this viewer's perspective show it? Current, in a scope the viewer sees
    (`PerspectiveIndex.visible_scopes`), and, for a hub viewer, not touching another party it serves (a hub
    viewer's walk never reaches those: projections/perspective_walk.py)."""
    n = min(n, pindex.fact_count)
    scopes = pindex.scopes.visible(agent, serving)
    visible = (pindex.live.data[:n] != 0) & scopes[pindex.scope.data[:n]]
    if agent >= 0 and bool(pindex.hub.data[agent]):
        blocked = blocked_parties(pindex, agent, serving)
        if len(blocked):
            barred = _entity_mask(pindex, blocked)
            visible &= ~(barred[pindex.src.data[:n]] | barred[pindex.dst.data[:n]])
    return visible


def blocked_parties(pindex: PerspectiveIndex, hub_agent: int, serving: int) -> np.ndarray:
    """The persons (other than the one served) a hub agent has facts with, in any status."""
    person_kind = pindex.kind_codes.get("person")
    if person_kind is None:
        return np.zeros(0, dtype=np.int64)
    pindex.prepare_for_walk()  # the adjacency must hold every fact where it is now
    ends = pindex.adjacency.expand(pindex, np.array([hub_agent], dtype=np.int64), np.zeros(1))[0].neighbour
    parties = ends[(pindex.kind.data[ends] == person_kind) & (ends != serving)]
    return np.unique(parties).astype(np.int64)


def search_json(answer: SearchAnswer) -> dict[str, Any]:
    """The public JSON of a search (CLI, HTTP, MCP)."""
    return {
        "search_id": answer.search_id, "answered_by": answer.answered_by.value if answer.answered_by else None,
        "semantic": answer.semantic, "query": answer.query, "agent": answer.agent, "serving": answer.serving,
        "session_id": answer.session_id, "about": answer.about, "as_of": answer.as_of,
        "log_position": answer.log_position,
        "items": [item.model_dump(mode="json", exclude={"subject_label", "object_label", "reason", "tier"})
                  | {"tier": item.tier.value} for item in answer.items],
    }


class _Seed:
    """A tenant's records read from the log in the background after a forget, to seed its search index again."""

    def __init__(self, position: int) -> None:
        self.position = position
        """Read up to this log position (the perspective service's when the tenant was refolded)."""
        self.records: list[tuple[int, str, dict[str, Any]]] = []
        """Its records other than assertions (aliases, messages), in log order."""
        self.asserted: dict[str, dict[str, Any]] = {}
        """Its facts' assertions by fact id."""
        self.later: list[tuple[int, str, dict[str, Any]]] = []
        """Records the perspective service applied after `position`, before the seed was installed."""
        self.done = threading.Event()
        self.failed: BaseException | None = None
