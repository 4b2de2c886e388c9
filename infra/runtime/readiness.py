"""When a served replica is ready (`GET /readyz`): caught up with the log as it was when the process started, and
every index a read uses loaded, so the first request after ready is served like the hundredth.

A thread of its own (`Warmup`) waits until the projector has applied the log position the process started at
(the positions applied and to apply are the progress `/readyz` shows meanwhile), then loads, for every tenant:
the perspective indexes (from the live DuckDB file), the folded state the rules decide on, the search indexes
(seeded from one pass over the log, every fact embedded) and the context's name and constraint indexes. Each of
those would otherwise be loaded by the first request that needs it: seconds at tens of thousands of events, with
the request waiting. A failure (an embedding service down, say) is reported by `/readyz` and the loading tried
again a few seconds later; requests are served meanwhile, as before (readiness tells a load balancer where to send
traffic, it refuses nothing).
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from domain.application.ontology_service import OntologyService
from domain.errors import NoumenaError
from domain.ports import EvidenceStore as EvidencePort
from infra.adapters.evidence import EvidenceStore
from infra.runtime.engines import ReadSide
from infra.runtime.perspective_engine import EnginePerspectives

if TYPE_CHECKING:
    from infra.runtime.serving import ProjectionFollower

log = logging.getLogger(__name__)

RETRY_SECONDS = 5.0
"""How long after a failed loading it is tried again."""


class Warmup:
    """Brings a replica to ready in the background (started by `infra.bootstrap.serve`)."""

    def __init__(self, service: OntologyService, evidence: EvidencePort, engines: ReadSide,
                 follower: ProjectionFollower | None, tenants: Callable[[], Iterable[str]], *, to_apply: int) -> None:
        self._service = service
        self._evidence = evidence
        self._engines = engines
        self._follower = follower
        self._tenants = tenants
        """() -> every tenant (the event log's `tenants`)."""
        self.to_apply = to_apply
        """The end of the log when the process started: ready once the projector has applied it."""
        self.phase = "catching up" if follower is not None else "loading indexes"
        self.error: str | None = None
        self.seconds: float | None = None
        """How long it took to get ready."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="noumena-warmup", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)

    @property
    def ready(self) -> bool:
        return self.phase == "ready"

    def progress(self) -> dict[str, Any]:
        """What `/readyz` shows of the start: the phase, the positions applied and to apply, the last failure."""
        applied = self._follower.position if self._follower is not None else self.to_apply
        return {"phase": self.phase, "applied": min(applied, self.to_apply), "to_apply": self.to_apply,
                "error": self.error}

    def _run(self) -> None:
        started = time.monotonic()
        follower = self._follower
        while follower is not None and not self._stop.is_set():
            if follower.wait_for(self.to_apply, 0.5):
                break
        self.phase = "loading indexes"
        while not self._stop.is_set():
            try:
                warm(self._service, self._evidence, self._engines, list(self._tenants()))
            except Exception as error:  # (reported by /readyz; the replica serves meanwhile)
                self.error = repr(error)
                log.exception("loading the indexes failed; trying again in %g s", RETRY_SECONDS)
                self._stop.wait(RETRY_SECONDS)
                continue
            self.error = None
            # What was loaded lives as long as the process: collect the garbage the loading left once, and keep
            # the rest out of later collections, so the first requests do not pay for a pass over the new heap.
            gc.collect()
            gc.freeze()
            self.seconds = time.monotonic() - started
            self.phase = "ready"
            log.info("ready in %.1f s (log position %d at start)", self.seconds, self.to_apply)
            return


def warm(service: OntologyService, evidence: EvidencePort, engines: ReadSide, tenants: list[str]) -> None:
    """Load what the first read of each tenant would: its folded state, its perspective, search and context
    indexes (each engine only if it is this process's own, not one a benchmark put in)."""
    for tenant in tenants:
        with service.reading(tenant):
            pass  # (caught up: loaded from its snapshot, the log's tail folded)
    if isinstance(evidence, EvidenceStore):
        evidence.live_bytes()  # (opens its file: the first answer kept does not pay for it)
    perspectives = engines.perspectives
    if not isinstance(perspectives, EnginePerspectives):
        return
    engine = perspectives.engine  # (loads every tenant's index)
    searches = None
    if engines.searches is not None:
        searches = engines.searches.searches  # (loads the embedder)
        with perspectives.lock:
            searches.warm(tenants)
    with perspectives.lock:  # one walk and one search per tenant, computed only (nothing recorded): the first
        for tenant in tenants:  # query pays for what runs once per process (an embedding of a query, first walks)
            viewer = next(iter(engine.index(tenant).entity_ids), None)
            try:
                if viewer is not None:
                    engine.perspective_for(tenant, viewer)
                    if searches is not None:
                        searches.search_for(tenant, viewer, "warming up")
            except NoumenaError as error:  # (a warm-up query only: what it would have warmed waits for a request)
                log.info("warming tenant %s up with a query as %s: %r", tenant, viewer, error)
    if engines.contexts is not None:
        contexts = engines.contexts.contexts
        for tenant in tenants:
            # The context's indexes read every entity and fact of the state, which a state loaded from a snapshot
            # reads from it on demand: read them here first, outside the service's lock (the read-through maps
            # are safe beside writers, infra/adapters/lazy_state.py), so the build under the lock does not hold writes
            # off while a whole map is read from the file.
            state = service.ontology(tenant)
            len(state.entities), len(state.facts)
            with perspectives.lock:
                contexts.warm(tenant)
