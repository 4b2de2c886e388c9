"""Forgetting a subject for real (crypto-shredding, then every copy outside the log), and archiving facts nobody
uses any more (hidden, never deleted)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

from domain.access import Caller
from domain.application.disuse import archive_disused
from domain.application.entity_finder import EntityFinder
from domain.application.forgetting import ForgetReport, forget
from domain.application.use_cases.core import Core
from domain.application.use_cases.results import Written
from domain.errors import ForgetRunning, InvalidInput, UnknownTenant
from domain.ports import CopiesOutsideTheLog, KeyStore, PerspectiveEngine


class Forgetting:
    def __init__(self, core: Core, *, keys: KeyStore | None, copies: CopiesOutsideTheLog,
                 perspectives: PerspectiveEngine, names: EntityFinder) -> None:
        self._core = core
        self._keys = keys
        self._copies = copies
        self._perspectives = perspectives
        self._names = names
        self._running: dict[str, tuple[str, datetime]] = {}
        """Tenant -> the subject it is forgetting now and since when: one forget per tenant at a time."""
        self._running_lock = threading.Lock()

    def forget(self, who: Caller | str, subject: str) -> Written:
        """Forget a subject for real (crypto-shredding: its data keys are deleted, every copy in the log becomes
        unreadable), blank the kept evidence, then purge the read model and the perspective indexes of its
        content (or, with this process's projector, answer once the live read model and indexes are cleaned of
        it, waiting for that, bounded: the projector rebuilds the read model from the log behind them).

        Other tenants are never held up by it beyond the key deletion itself: the projector rebuilds the read
        model in the background while they read on (infra/runtime/serving.py). One forget per tenant runs at a
        time in a process: another one asked meanwhile is refused (ForgetRunning, naming the running one)."""
        tenant = self._core.tenant_wide(who, "forgetting")
        with self._running_lock:
            running = self._running.get(tenant)
            if running is not None:
                raise ForgetRunning(tenant, running[0], running[1].isoformat(), subject)
            self._running[tenant] = (subject, datetime.now(UTC))
        try:
            return self._forget(tenant, subject)
        finally:
            with self._running_lock:
                self._running.pop(tenant, None)

    def forgets_running(self) -> dict[str, str]:
        """Tenant -> the subject this process is forgetting for it now."""
        with self._running_lock:
            return {tenant: subject for tenant, (subject, _) in self._running.items()}

    def _forget(self, tenant: str, subject: str) -> Written:
        if self._keys is None:
            raise InvalidInput("content is not encrypted here (NOUMENA_ENCRYPT_CONTENT=false): nothing can be "
                               "forgotten for real", field="subject")
        core = self._core
        read_model = core.read_model
        if read_model is not None:
            read_model.expect_forget(tenant)
        sealed: list[int] = []
        report: ForgetReport | None = None
        told: int | None = None  # (the forget's position once the events it erased are known: else searched for)
        try:
            report = forget(core.service, self._keys, tenant, subject)
            report.events_affected, sealed = self._copies.events_affected(tenant)
            told = report.position
        finally:
            if read_model is not None:
                read_model.forgotten(tenant, told, sealed)
        assert report is not None
        report.files_rewritten = self._copies.erase(tenant, (subject, *report.erased_with))
        purged_at = None
        if read_model is not None:
            cleaned = True
            if report.position is not None:
                # The keys are gone and the event is recorded: the forget has happened. It answers once no read can
                # show what it erased (the live read model's texts blanked, its indexes reloaded); the rebuild of
                # the read model from the log, which leaves no copy in the file's blocks, goes on behind it.
                cleaned = read_model.wait_cleaned(tenant, report.position, core.settings.purge_wait_seconds)
            report.files_rewritten.append(
                "projections: cleaned in the live read model; being rebuilt from the log by the running projector"
                " (GET /readyz lists the tenant under `purging` until the rebuilt file is in)" if cleaned else
                "projections: still being cleaned by the running projector after "
                f"{core.settings.purge_wait_seconds:g} s (the tenant's reads wait for it)")
        else:
            purged_at = self._copies.purge()  # None when a server's projector holds the file: it purges itself
            self._perspectives.forgotten([tenant])
            self._names.forgotten([tenant])
            report.files_rewritten.append("projections: " + ("rebuilt, snapshot and exports rewritten"
                                                             if purged_at is not None else "none here"))
        return Written(position=report.position, events=1 if report.position is not None else 0,
                       keys_deleted=report.keys_deleted, purged_at=purged_at, receipt=report)

    def archive_disused(self, who: Caller | str, now: datetime, period_days: float | None = None) -> list[str]:
        """Archive disused facts (hidden from perspectives, never deleted); returns their ids."""
        core = self._core
        tenant = core.tenant_wide(who, "archiving disused facts")
        if not core.tenant_exists(tenant):
            raise UnknownTenant(tenant)
        days = core.settings.disuse_period_days if period_days is None else period_days
        if days <= 0:
            raise InvalidInput("the disuse period must be positive", field="period_days")
        archived = archive_disused(core.service, tenant, now, timedelta(days=days))
        if archived:
            core.written([core.service.last_position or 0])
        return archived
