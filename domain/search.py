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
    query's embedding (exact, numpy: about 3 ms per 10,000 on this 2-core machine under load); beyond it, the lexical
    candidates, the viewer's own tiers and the facts its perspective reaches are."""
    bm25_k1: float = Field(default=1.2, gt=0)
    bm25_b: float = Field(default=0.3, ge=0, le=1)
    """BM25's length normalisation: weak, because a fact's document is its statement plus the messages it came
    from, and a longer source conversation is not less relevant."""


DEFAULT_SEARCH_PARAMETERS = SearchParameters()

SimilarFn = Callable[[int, int], float]
"""The cosine of two documents' embeddings (0 when there are none)."""


def squash_activation(activation: float, threshold: float) -> float:
    """Activation on the log-odds scale -> 0..1: 0.5 at the retrieval threshold tau."""
    if math.isinf(activation):
        return 0.0 if activation < 0 else 1.0
    return 1.0 / (1.0 + math.exp(-(activation - threshold)))


def recency(age_seconds: float, p: SearchParameters) -> float:
    return math.exp(-max(age_seconds, 0.0) / (p.recency_days * 86_400.0))


@dataclass
class Candidate:
    """One visible fact with its signals, before ranking."""

    doc: int
    tier: SearchTier
    lexical: float
    semantic: float
    activation: float
    recency: float
    provenance: frozenset[str] = frozenset()
    score: float = 0.0
    scores: dict[str, float] = field(default_factory=dict)


def score(candidate: Candidate, p: SearchParameters) -> Candidate:
    """Fill `score` and its components (each already multiplied by its weight)."""
    parts = {
        "lexical": p.lexical_weight * candidate.lexical,
        "semantic": p.semantic_weight * max(candidate.semantic, 0.0),
        "activation": p.activation_weight * candidate.activation,
        "recency": p.recency_weight * candidate.recency,
    }
    candidate.scores = {name: round(value, 6) for name, value in parts.items()}
    candidate.score = round(sum(parts.values()), 6)
    return candidate


def diversify(ranked: Sequence[Candidate], k: int, similar: SimilarFn, p: SearchParameters) -> list[Candidate]:
    """Maximal marginal relevance in its simplest form: walk the ranking, keep a result unless it repeats one kept
    (the same provenance, or near-identical content by `similar`), until k are kept."""
    kept: list[Candidate] = []
    seen_provenance: set[frozenset[str]] = set()
    for candidate in ranked:
        if len(kept) >= k:
            break
        if candidate.provenance and candidate.provenance in seen_provenance:
            continue
        if any(similar(candidate.doc, other.doc) >= p.duplicate_cosine for other in kept):
            continue
        kept.append(candidate)
        if candidate.provenance:
            seen_provenance.add(candidate.provenance)
    return kept


class SearchItem(BaseModel):
    """One result: the fact, why it ranked where it did, and where it came from."""

    rank: int
    fact_id: str
    subject: str
    relation: str
    object: str
    subject_label: str
    object_label: str
    text: str
    """The fact in one line: subject -relation-> object, and its reason."""
    reason: str | None = None
    scope: str
    tier: SearchTier
    valid_from: str | None = None
    score: float
    scores: dict[str, float]
    session_id: str | None = None
    message_ids: list[str] = Field(default_factory=list)


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
