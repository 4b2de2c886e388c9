"""Consolidation of compactions into facts: their status, and running the pending or failed ones now (the
background worker, domain/application/consolidation.py, runs them on arrival)."""

from __future__ import annotations

from domain.access import Caller
from domain.application.consolidation import ConsolidationReport, ConsolidationWorker
from domain.application.use_cases.core import Core
from domain.consolidation import CompactionState
from domain.errors import UnknownTenant


class Consolidation:
    def __init__(self, core: Core, worker: ConsolidationWorker) -> None:
        self._core = core
        self._worker = worker

    def compactions(self, who: Caller | str) -> list[CompactionState]:
        """Every compaction with its consolidation status, attempts, counts or failure reason."""
        tenant = self._core.tenant_wide(who, "reading compactions")
        if not self._core.tenant_exists(tenant):
            raise UnknownTenant(tenant)
        with self._core.service.reading(tenant) as state:
            return list(state.compactions.values())

    def consolidate_pending(self, who: Caller | str) -> list[ConsolidationReport]:
        """Consolidate every pending compaction now (the background worker does this on arrival)."""
        tenant = self._core.tenant_wide(who, "consolidating")
        if not self._core.tenant_exists(tenant):
            raise UnknownTenant(tenant)
        return self._worker.run_pending(tenant)

    def retry_consolidation(self, who: Caller | str, compaction_id: str) -> ConsolidationReport:
        """Run a failed (or stuck) consolidation again, e.g. after fixing the extractor's settings."""
        tenant = self._core.tenant_wide(who, "consolidating")
        return self._worker.retry(tenant, compaction_id)
