"""Recall by content: the rules of a search, as pure functions and one parameters object.

A search answers "what do I know that matches this request" (the perspective answers "what is around me"). For a
viewer (agent, person served, session) and a query, every fact the viewer may see is a candidate; each gets

    score = w_lex * lexical + w_sem * semantic + w_act * activation + w_rec * recency

- `lexical`: the fact's BM25 score for the query divided by the best BM25 score among the candidates (0..1).
- `semantic`: the cosine between the query's embedding and the fact's (clamped at 0).
- `activation`: the viewer's activation of the fact (the perspective's own A = B + ln c + S + ln x: base level
  from this agent's uses with decay, confidence, spread from the viewer's standpoint), squashed into 0..1 by a
  logistic around the retrieval threshold tau.
- `recency`: exp(-age / recency_days), age counted from the fact's last use by this agent (its first use is when
  the source says it happened: `occurred_at`, clamped to when it was recorded).

The two content signals carry the ranking (a documented weighting rather than reciprocal-rank fusion: on the
LoCoMo development split it found as much at k = 5 and 10, and its components stay readable); activation and
recency only reorder close calls, as the seeds ask ("similarity minus a little per day since last use").

Then maximal marginal relevance removes near-duplicates: a result that repeats an earlier one (same provenance,
or a cosine above `duplicate_cosine`) is skipped, so five results do not say one thing.

Tiers (seed 001, named as `recall` names them): the session's facts first, then the person served (episodic),
then the organization (semantic); a tier answers when
its best score reaches `tier_threshold`, else the search falls back to the next (and finally answers from all
visible facts together, best first, saying `all`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field


class SearchTier(StrEnum):
    SESSION = "session"
    EPISODIC = "episodic"
    """The person served: `person:<ref>` scope."""
    SEMANTIC = "semantic"
    """The organization: `org` scope."""
    ALL = "all"
    """No single tier had a match above the threshold: the best of every visible fact."""


class SearchParameters(BaseModel):
    """Every default of a search. Tuned on the LoCoMo development split (docs/search.md)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    k: int = Field(default=10, ge=1, le=100)
    turns: bool = True
    """Whether the messages of the viewer's sessions are searched beside the facts (turns as episodic records)."""
    lexical_weight: float = Field(default=0.5, ge=0)
    semantic_weight: float = Field(default=0.5, ge=0)
    activation_weight: float = Field(default=0.05, ge=0)
    recency_weight: float = Field(default=0.02, ge=0)
    recency_days: float = Field(default=30.0, gt=0)
    """The age (days since last use) at which the recency term has fallen to 1/e."""
    duplicate_cosine: float = Field(default=0.97, gt=0, le=1)
    """A result this close (cosine of embeddings) to one already returned says the same thing: skipped."""
    minimum_semantic: float = Field(default=0.08, ge=0, le=1)
    """A fact that shares no term with the query is a result only if its cosine reaches this (below it, static
    embeddings of unrelated texts)."""
    tier_threshold: float = Field(default=0.35, ge=0)
    """A nearer tier answers only if its best score reaches this; else the search falls back."""
    lexical_candidates: int = Field(default=400, ge=1)
    """How many of the best lexical matches are candidates (and are scored semantically when the visible facts
    are too many to scan them all: see `exact_semantic_limit`)."""
    exact_semantic_limit: int = Field(default=10_000, ge=0)
    """While the tenant holds up to this many current facts, every one the viewer may see is compared with the
    query's embedding (an exact scan, with numpy); beyond it, the lexical candidates, the viewer's own tiers and the
    facts its perspective reaches are."""
    entity_weight: float = Field(default=0.2, ge=0)
    """What touching an entity the query names adds (a fact with it as subject or object)."""
    time_weight: float = Field(default=0.25, ge=0)
    """What being said (a turn) or starting to hold (a fact) within the dates a request names adds
    (domain/search_time.py)."""
    name_weight: float = Field(default=0.3, ge=0)
    """How much a query word that names an entity counts in BM25 (the name links; the other words say what about
    it), when the query has other words too."""
    coverage_power: float = Field(default=1.0, ge=0)
    """How the lexical weight follows the share of the query's words that any turn holds at all (by idf:
    `projections.searches.word_coverage`, raised to this power; 0: off). A word no turn holds cannot be matched,
    yet BM25 relative to the best match makes a match of the query's other words look whole ("what console does he
    own": `console` is in no turn, `own` in many). The weight lexical loses goes to the semantic signal, whose
    embedding still knows the missing word (a turn about a Nintendo game); with no embedder, or the semantic weight
    0, nothing changes."""
    function_weight: float = Field(default=0.0, ge=0)
    """How much a question's function words (`projections.search_text.FUNCTION_WORDS`: what, would, likely, ...)
    count in BM25 when the query has other words too: they say how it asks, not what about (0: left out)."""
    context_before: int = Field(default=2, ge=0, le=5)
    """How many turns before a matching turn (or a matching fact's source turn) gain the context signal."""
    context_after: int = Field(default=2, ge=0, le=5)
    """How many turns after it do (a reply often holds what a question turn only asks about)."""
    window_before: int = Field(default=1, ge=0, le=5)
    """A turn found is shown with this many turns before it in its session..."""
    window_after: int = Field(default=1, ge=0, le=5)
    """... and this many after it (a question turn's reply)."""
    context_weight: float = Field(default=0.25, ge=0)
    """What a candidate's neighbourhood adds (a turn beside a matching turn, a fact one hop from a match)."""
    session_weight: float = Field(default=0.2, ge=0)
    """What a turn, or a fact said in a session, gains from its session's match as a whole: the BM25 of the
    session's turns (those the viewer may see) as one document, among the viewer's sessions, relative to the best
    session's (what is asked about is often said over several turns, none holding all its words)."""
    shown_facts_last: bool = True
    """A fact whose messages the results above it already show (a turn kept, its window, other facts kept) comes
    after every result that shows a message not yet shown (de-duplication by what is shown, not only by what is
    said)."""
    bm25_k1: float = Field(default=1.2, gt=0)
    turn_bm25_b: float = Field(default=0.3, ge=0, le=1)
    """BM25's length normalisation for turns (their own statistics): weak, as for facts."""
    bm25_b: float = Field(default=0.3, ge=0, le=1)
    """BM25's length normalisation: weak, because a fact's document is its statement plus the messages it came
    from, and a longer source conversation is not less relevant."""


DEFAULT_SEARCH_PARAMETERS = SearchParameters()

SimilarFn = Callable[["Candidate", "Candidate"], float]
"""The cosine of two candidates' embeddings (0 when there are none)."""


class ItemKind(StrEnum):
    FACT = "fact"
    """A fact (an edge of the ontology), found by its statement and the messages it came from."""
    TURN = "turn"
    """A message of a session (an episodic record: what was said, by whom, when)."""


def squash_activation(activation: float, threshold: float) -> float:
    """Activation on the log-odds scale -> 0..1: 0.5 at the retrieval threshold tau."""
    if math.isinf(activation):
        return 0.0 if activation < 0 else 1.0
    return 1.0 / (1.0 + math.exp(-(activation - threshold)))


def recency(age_seconds: float, p: SearchParameters) -> float:
    return math.exp(-max(age_seconds, 0.0) / (p.recency_days * 86_400.0))


@dataclass
class Candidate:
    """One visible fact or turn with its signals, before ranking."""

    doc: int
    """The document's number in its kind's space (a fact's in the perspective index, a turn's in the turn index)."""
    tier: SearchTier
    lexical: float
    semantic: float
    activation: float
    recency: float
    provenance: frozenset[str] = frozenset()
    kind: ItemKind = ItemKind.FACT
    shown: frozenset[str] = frozenset()
    time: float = 0.0
    """1 when the candidate was said (a turn) or holds from (a fact) within the dates the request names."""
    """Messages shown with it: a turn's adjacent turns (its window)."""
    entity: float = 0.0
    """1 when the candidate touches an entity the query names (a fact with it as subject or object)."""
    context: float = 0.0
    """What the candidate's neighbourhood adds: a turn next to a turn that matches, a fact one hop from a fact
    that matches (projections/searches.py)."""
    session: float = 0.0
    """The match of the candidate's session as a whole (its turns as one document), relative to the best session's."""
    score: float = 0.0
    scores: dict[str, float] = field(default_factory=dict)

    @property
    def key(self) -> tuple[ItemKind, int]:
        return self.kind, self.doc


def score(candidate: Candidate, p: SearchParameters) -> Candidate:
    """Fill `score` and its components (each already multiplied by its weight)."""
    parts = {
        "lexical": p.lexical_weight * candidate.lexical,
        "semantic": p.semantic_weight * max(candidate.semantic, 0.0),
        "activation": p.activation_weight * candidate.activation,
        "recency": p.recency_weight * candidate.recency,
        "entity": p.entity_weight * candidate.entity,
        "time": p.time_weight * candidate.time,
        "context": p.context_weight * candidate.context,
        "session": p.session_weight * candidate.session,
    }
    candidate.scores = {name: round(value, 6) for name, value in parts.items()}
    candidate.score = round(sum(parts.values()), 6)
    return candidate


def diversify(ranked: Sequence[Candidate], k: int, similar: SimilarFn, p: SearchParameters) -> list[Candidate]:
    """Maximal marginal relevance in its simplest form: walk the ranking, keep a result unless it repeats one kept
    (the same provenance, near-identical content by `similar`, or a turn already shown: one a kept fact came from,
    or in a kept turn's window), until k are kept. A fact is kept beside the turn it came from (it says what the
    ontology made of it), but with `shown_facts_last` a fact whose messages the results kept already show all
    waits until the results that show something new run out: in k results, every one then adds a message."""
    kept: list[Candidate] = []
    seen_provenance: set[tuple[ItemKind, frozenset[str]]] = set()
    cited: set[str] = set()
    """Message ids kept: the turns kept, and those a kept fact came from."""
    waiting: list[Candidate] = []
    """Facts that showed nothing new when their turn came, in ranking order."""

    def keep(candidate: Candidate) -> None:
        if candidate.provenance and (candidate.kind, candidate.provenance) in seen_provenance:
            return
        if candidate.kind is ItemKind.TURN and candidate.provenance <= cited:
            return
        if any(similar(candidate, other) >= p.duplicate_cosine for other in kept):
            return
        kept.append(candidate)
        if candidate.provenance:
            seen_provenance.add((candidate.kind, candidate.provenance))
            cited.update(candidate.provenance | candidate.shown)

    for candidate in ranked:
        if len(kept) >= k:
            break
        if p.shown_facts_last and candidate.kind is ItemKind.FACT and candidate.provenance \
                and candidate.provenance <= cited:
            waiting.append(candidate)
            continue
        keep(candidate)
    for candidate in waiting:
        if len(kept) >= k:
            break
        keep(candidate)
    return kept


class TurnShown(BaseModel):
    """A turn shown beside a turn found (its window)."""

    message_id: str
    role: str | None = None
    text: str


class SearchItem(BaseModel):
    """One result, a fact or a turn: what it says, why it ranked where it did, and where it came from."""

    rank: int
    kind: ItemKind = ItemKind.FACT
    fact_id: str | None = None
    """The fact (None for a turn)."""
    subject: str | None = None
    relation: str | None = None
    object: str | None = None
    subject_label: str | None = None
    object_label: str | None = None
    text: str
    """A fact in one line (subject -relation-> object, and its reason); a turn's words."""
    reason: str | None = None
    scope: str
    tier: SearchTier
    valid_from: str | None = None
    score: float
    scores: dict[str, float]
    session_id: str | None = None
    message_ids: list[str] = Field(default_factory=list)
    """A fact's provenance (the messages it came from); a turn's own message id, then those of the adjacent turns
    shown with it (`around`)."""
    message_id: str | None = None
    """A turn's message id (None for a fact)."""
    role: str | None = None
    """A turn's speaker role (user, assistant, ...)."""
    occurred_at: str | None = None
    """When a turn was said (the source's clock, else when it was recorded)."""
    around: list[TurnShown] = Field(default_factory=list)
    """The turns adjacent to a turn found, shown with it (its window), in the session's order."""


class SearchAnswer(BaseModel):
    """A served search and everything needed to explain it (`noumena explain SEARCH_ID`)."""

    search_id: str
    tenant: str
    agent: str
    serving: str | None = None
    session_id: str | None = None
    query: str
    k: int
    as_of: str | None = None
    served_at: str
    log_position: int
    answered_by: SearchTier | None
    """The tier that answered (session, episodic, semantic), `all` after falling back through them, None: nothing."""
    about: list[str] = Field(default_factory=list)
    """The exact filter: only facts touching one of these entities were candidates."""
    semantic: str
    """How the semantic signal was computed: `exact` (every visible fact), `candidates` (too many visible facts:
    the lexical candidates, the viewer's tiers and its perspective), `off` (no embedder), or `failed: <why>`
    (the embedder failed: lexical only)."""
    embedder: str | None = None
    parameters: SearchParameters
    items: list[SearchItem]
    recall_position: int | None = None
    """Log position of the recall recorded (mode looked_up), if any (None while held for a coalesced flush)."""
    recall_held: bool = False
    """The results' uses wait in the recall buffer for its next flush (domain/application/recall_buffer.py)."""
