"""The application: one object per process that composes the feature services of domain/application/use_cases/,
which every entry point calls (the HTTP routes, the CLI, the MCP tools; Kafka and file import through `ingestor`),
so each gets the same checks.

Every use case takes the caller first (domain/access.py: the tenant, and the agents a key is scoped to) and
decides there whether the caller may do it, so no entry point checks on its own: HTTP and MCP pass the caller of
the key, the CLI and the consumers a tenant name (a tenant-wide caller). The tenant comes from authentication
(HTTP, MCP) or an option (CLI), never from a request body. No HTTP and no I/O here: storage, the read model and
the perspective and context engines are ports (domain/ports.py) that infra/bootstrap.py fills; errors are domain
errors (or those of use_cases/errors.py), mapped to problem documents by api/problems.py.

Adding a use case: a method of the feature service of its concept (use_cases/*.py) that validates its input
against the tenant's state, runs commands through the shared `Core` (or asks a port), and returns plain data;
logic longer than a few lines goes in a module of domain/application/ named after it (like recall.py), with unit
tests over an `Ontology`. Then each entry point calls it.
"""

from __future__ import annotations

from domain.application.consolidation import ConsolidationWorker
from domain.application.entity_finder import EntityFinder
from domain.application.ingestion import Ingestor
from domain.application.ontology_service import OntologyService
from domain.application.recall_buffer import RecallBuffer
from domain.application.use_cases.consolidation import Consolidation
from domain.application.use_cases.core import ApplicationSettings, Core
from domain.application.use_cases.entities import Entities
from domain.application.use_cases.facts import Facts
from domain.application.use_cases.forgetting import Forgetting
from domain.application.use_cases.reading import Reading
from domain.application.use_cases.tenants import Tenants
from domain.application.use_cases.views import Views
from domain.ports import (
    ContextEngine,
    CopiesOutsideTheLog,
    EventLog,
    EvidenceStore,
    KeyStore,
    PerspectiveEngine,
    ReadModel,
    SearchEngine,
)


class Application:
    """One per process, built by infra/bootstrap.py; shared by every entry point of that process. It holds the
    feature services and what consumers and the composition root need of it (the ingestor, the name finder)."""

    def __init__(self, service: OntologyService, log: EventLog, *, consolidation: ConsolidationWorker,
                 perspectives: PerspectiveEngine, contexts: ContextEngine, searches: SearchEngine,
                 copies: CopiesOutsideTheLog, evidence: EvidenceStore, recalls: RecallBuffer | None = None,
                 keys: KeyStore | None = None, read_model: ReadModel | None = None,
                 settings: ApplicationSettings | None = None) -> None:
        core = Core(service, log, read_model, settings or ApplicationSettings())
        self.ingestor = Ingestor(service, on_stored=lambda command: consolidation.signal(command))
        """Wire envelopes into the log (HTTP batches, Kafka, file import): stored compactions start consolidation."""
        self.entity_names = EntityFinder(service, lambda: read_model)
        """Entities by name (domain/application/entity_finder.py), for every entry point."""
        self.tenants = Tenants(core)
        self.facts = Facts(core, self.ingestor)
        self.entities = Entities(core, self.entity_names)
        self.views = Views(core)
        self.reading = Reading(core, perspectives=perspectives, contexts=contexts, searches=searches,
                               evidence=evidence, recalls=recalls if recalls is not None else RecallBuffer(service))
        """Served reads record their uses through the recall buffer (coalesced, domain/application/recall_buffer.py):
        one per process, shared by every Application of the process."""
        self.forgetting = Forgetting(core, keys=keys, copies=copies, perspectives=perspectives,
                                     names=self.entity_names)
        self.consolidation = Consolidation(core, consolidation)

