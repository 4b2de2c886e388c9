"""What the Kafka consumer and the dead-letter tools get from the rest of noumena, and nothing more: they store
through the application's ingestor (the same rules as every other source), ask for the positions they tracked,
seal dead letters with the key store, and read their own settings. The composition root builds it
(`infra.bootstrap.Noumena.consumer_ports`); consumers never hold the process's container, its service or its log."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from domain.application.ingestion import Ingestor
from domain.commands import Command
from domain.ports import KeyStore

if TYPE_CHECKING:  # (types only: consumers never import infra at run time)
    from infra.settings import Settings


@dataclass(frozen=True)
class ConsumerPorts:
    settings: Settings
    ingestor: Ingestor
    """Decodes and stores inputs, each batch in one atomic write with its source position."""
    tracked_position: Callable[[str], int | None]
    """The stored position of a tracking name (a partition, a replayed dead letter), or None."""
    keys: KeyStore | None
    """Seals dead letters and parked inputs with their subject's key (None: content is not encrypted)."""
    on_stored: Callable[[Command], None] | None = None
    """Called for each stored command after its write (stored compactions start consolidation)."""
