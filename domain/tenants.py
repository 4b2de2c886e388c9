"""Tenants: one organization, one ontology, the outermost security boundary."""

from __future__ import annotations

from domain.events import DomainEvent


class TenantCreated(DomainEvent):
    topic = "tenant.created"
    content_fields = ("display_name",)

    display_name: str = ""
