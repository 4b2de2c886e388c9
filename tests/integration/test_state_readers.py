"""Readers of a tenant's live state beside a writer thread of the same process (OntologyService.reading).

A served process runs ingestion, Kafka consumption and consolidation on threads beside its HTTP requests, all
writing the tenants' live states in place. A reader that iterates a map of the state while another thread grows
it met "dictionary changed size during iteration" (a 500 for a request); every reader now reads under
`service.reading(tenant)`, which holds the writers off while it runs.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from domain import commands as c
from domain.access import Caller
from infra.bootstrap import Noumena
from tests.race_support import writer_beside

T = "acme"
AGENT = "agent:wang-assistant"
SEEDED = 3_000
"""Entities and facts in the tenant before the race: enough that one pass over a map spans many thread switches."""


def _seeded(n: Noumena) -> None:
    n.service.execute(c.CreateTenant(tenant=T))
    n.service.execute_batch([
        c.RegisterEntity(tenant=T, ref=AGENT, label="Wang's agent"),
        c.RegisterEntity(tenant=T, ref="person:wang", label="王总"),
        c.RegisterEntity(tenant=T, ref="person:li", label="李总", needs_review=True),
        c.StartSession(tenant=T, session_id="wang-main", agent=AGENT, serving="person:wang"),
        *(c.RegisterEntity(tenant=T, ref=f"person:p{i}", label=f"Person {i}") for i in range(SEEDED)),
        *(c.AssertFact(tenant=T, subject="person:li", relation="knows", object=f"person:p{i}")
          for i in range(SEEDED)),
    ], all_or_nothing=True)


READERS: dict[str, Callable[[Noumena], Any]] = {
    # the review list builds a name index over every entity, then walks the entities again
    "entities_to_review": lambda n: n.application.entities.entities_to_review(T),
    # the workers of the main session, their sessions looked up one by one
    "workers": lambda n: n.application.views.workers(T, "wang-main", live_only=False),
    # recall walks every fact for each tier, then records the recall (a write, under the same hold)
    "recall": lambda n: n.application.reading.recall(T, AGENT, "person:li", serving="person:wang"),
    # disuse walks the current facts and their uses (nothing is disused here: every fact is new)
    "disuse": lambda n: n.application.forgetting.archive_disused(T, datetime.now(UTC), period_days=30),
    # an agent-scoped API key: whom its agents serve comes from every session and every fact
    "acts_as": lambda n: n.application.reading.recall(Caller(T, (AGENT,)), AGENT, "person:li", serving="person:wang"),
}


@pytest.mark.parametrize("reader", list(READERS))
def test_a_reader_that_walks_the_state_never_meets_a_map_another_thread_grows(make_noumena, reader: str) -> None:
    """One thread registers entities, dispatches workers and asserts facts in the tenant as fast as the service
    takes them; the reader runs in a loop meanwhile on this thread. No reader fails, and the writer wrote."""
    n = make_noumena("sqlite")
    _seeded(n)
    read = READERS[reader]

    def write(i: int) -> None:
        n.service.execute_batch([
            c.RegisterEntity(tenant=T, ref=f"person:new{i}", label=f"Newcomer {i}", needs_review=i % 2 == 0),
            c.DispatchWorker(tenant=T, session_id="wang-main", worker_session_id=f"w{i}",
                             task=f"task {i}", about=("person:li",)),
            c.AssertFact(tenant=T, subject="person:li", relation="knows", object=f"person:new{i}"),
            c.AssertFact(tenant=T, subject=AGENT, relation="serves", object=f"person:new{i}"),
        ], all_or_nothing=True)

    reads, errors = 0, []
    with writer_beside(write) as writer:
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline or writer.written < 5:
            try:
                read(n)
            except RuntimeError as error:
                errors.append(error)
            reads += 1
            if writer.failures:
                break

    assert not writer.failures, writer.failures
    assert not errors, f"{len(errors)} of {reads} reads failed while the writer wrote; first: {errors[0]!r}"
    assert writer.written >= 5 and reads >= 5
    with n.service.reading(T) as state:  # (and what was written is all there)
        assert f"person:new{writer.written}" in state.entities and f"w{writer.written}" in state.sessions
