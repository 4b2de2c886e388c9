"""Every event class of the domain, registered under its stable topic by importing its module: import this
module before reading stored events by topic (the event log's mapper and the projector both do)."""

from __future__ import annotations

import domain.consolidation  # noqa: F401
import domain.entities  # noqa: F401
import domain.facts  # noqa: F401
import domain.forgetting  # noqa: F401
import domain.recalls  # noqa: F401
import domain.relations  # noqa: F401
import domain.sessions  # noqa: F401
import domain.tenants  # noqa: F401
