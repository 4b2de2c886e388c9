"""Search: recall by content, nearest tier first, every result with its score components."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from api.schemas.common import MIN_POSITION_TEXT
from domain.values import Count, Identifier, RefOrName, Timestamp, text


class SearchRequest(BaseModel):
    """Who is looking (agent, person served, session) and what for (the request's text)."""

    model_config = ConfigDict(extra="forbid")

    agent: RefOrName = Field(examples=["agent:wang-assistant"], description="The agent searching: its ref, or a"
                             " name naming exactly one entity.")
    query: text(1, 10_000) = Field(examples=["how does Li want to pay?"])
    serving: RefOrName | None = Field(default=None, examples=["person:li"], description="The person served (ref or"
                                      " name).")
    session_id: Identifier | None = None
    about: list[RefOrName] = Field(default=[], max_length=20, description="The exact filter: only facts touching one "
                             "of these entities (a person, a contract).")
    k: Count = Field(default=10, ge=1, le=100)
    as_of: Timestamp | None = Field(default=None, description="Search what was believed then (records nothing).")
    record: bool = Field(default=True, description="false: an observer's search of what the agent may see now, "
                         "not recorded as the agent's use.")
    min_position: Count | None = Field(default=None, ge=0, description=MIN_POSITION_TEXT)


class SearchItemPublic(BaseModel):
    rank: int
    kind: str = Field(description="fact | turn: a fact of the ontology, or a message of a session.")
    fact_id: str | None = Field(default=None, description="The fact (null for a turn).")
    subject: str | None = None
    relation: str | None = None
    object: str | None = None
    text: str = Field(description="A fact in one line (subject -relation-> object: reason); a turn's words.")
    scope: str
    tier: str = Field(description="session | episodic | semantic: the memory tier the item is in.")
    valid_from: str | None = None
    score: float
    scores: dict[str, float] = Field(description="lexical, semantic, activation, recency, context (weighted; they "
                                     "add up).")
    session_id: str | None = None
    message_ids: list[str] = Field(description="A fact's provenance (the messages it came from); a turn's own id.")
    message_id: str | None = Field(default=None, description="A turn's message id (null for a fact).")
    role: str | None = Field(default=None, description="A turn's speaker role.")
    occurred_at: str | None = Field(default=None, description="When a turn was said.")


class SearchPublic(BaseModel):
    """A served search. `answered_by`: the nearest tier with a match above the threshold (`all`: none had one)."""

    search_id: str = Field(description="Pass to `noumena explain` or GET /v1/searches/{search_id}/explain.")
    answered_by: str | None
    semantic: str = Field(description="exact | candidates | off | failed: <why> (then lexical only).")
    query: str
    agent: str
    serving: str | None = None
    session_id: str | None = None
    about: list[str] = []
    as_of: str | None = None
    log_position: int
    items: list[SearchItemPublic]
