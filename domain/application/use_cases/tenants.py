"""The tenants: one organization, one ontology."""

from __future__ import annotations

from domain import commands as c
from domain.application.use_cases.core import Core
from domain.application.use_cases.results import Written


class Tenants:
    def __init__(self, core: Core) -> None:
        self._core = core

    def create_tenant(self, tenant: str, display_name: str = "") -> Written:
        """Create a tenant: one organization, one ontology."""
        return self._core.run(c.CreateTenant(tenant=tenant, display_name=display_name))

    def tenant_exists(self, tenant: str) -> bool:
        return self._core.tenant_exists(tenant)
