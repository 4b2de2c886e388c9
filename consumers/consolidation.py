"""Runs consolidation in the background when `session.compacted` arrives, from Kafka, HTTP or a file.

The log is the source of truth: the worker consolidates every pending compaction of the signalled tenant, so
a signal lost in a crash is made up by the next one, or by `noumena consolidation run`.
"""

from __future__ import annotations

import logging
import threading

from domain.commands import CompactSession
from domain.consolidation import CompositeExtractor, Extractor, StructuredPayloadExtractor
from domain.service import OntologyService
from domain.workflows import ConsolidationReport, consolidate, pending_compactions
from infra.settings import Settings

log = logging.getLogger(__name__)


def extractor_from(settings: Settings) -> Extractor:
    """The configured extractor: the structured payload, plus an LLM when NOUMENA_EXTRACTOR=llm."""
    if settings.extractor == "llm":
        from consumers.llm_extractor import LLMExtractor

        if not settings.llm_url or not settings.llm_model:
            raise ValueError("NOUMENA_EXTRACTOR=llm needs NOUMENA_LLM_URL and NOUMENA_LLM_MODEL")
        return CompositeExtractor(LLMExtractor(
            settings.llm_url, settings.llm_model, settings.llm_api_key.get_secret_value(),
            timeout_seconds=settings.llm_timeout_seconds, retries=settings.llm_retries,
        ))
    return StructuredPayloadExtractor()


class ConsolidationWorker:
    def __init__(self, service: OntologyService, extractor: Extractor) -> None:
        self.service = service
        self.extractor = extractor
        self._lock = threading.Lock()

    def run_pending(self, tenant: str) -> list[ConsolidationReport]:
        """Consolidate every pending compaction of the tenant, oldest first."""
        with self._lock:
            reports = []
            for compaction in pending_compactions(self.service.ontology(tenant)):
                reports.append(consolidate(self.service, tenant, compaction.compaction_id, self.extractor))
            return reports

    def retry(self, tenant: str, compaction_id: str) -> ConsolidationReport:
        with self._lock:
            return consolidate(self.service, tenant, compaction_id, self.extractor)

    def handle(self, command: CompactSession) -> None:
        """The CompactionSignal handler (runs on its background thread)."""
        for report in self.run_pending(command.tenant):
            if report.reason:
                log.warning("consolidation %s failed: %s", report.compaction_id, report.reason)
