"""Kafka client options from our settings, so every client (consumer, DLQ producer, admin) connects alike."""

from __future__ import annotations

from typing import Any

from domain.errors import InfrastructureError
from infra.settings import Settings


def tracking_name(topic: str, partition: int) -> str:
    """The event log's tracking name for one source partition: its position is the last stored offset."""
    return f"kafka:{topic}:{partition}"


def connection_options(settings: Settings) -> dict[str, Any]:
    """bootstrap_servers plus security options; raises if Kafka is not configured."""
    if not settings.kafka_bootstrap:
        raise InfrastructureError("Kafka is not configured: set NOUMENA_KAFKA_BOOTSTRAP=host:port")
    options: dict[str, Any] = {
        "bootstrap_servers": [s.strip() for s in settings.kafka_bootstrap.split(",") if s.strip()],
        "security_protocol": settings.kafka_security_protocol,
        # kafka-python backs off up to 30 s between reconnects; the Java client's 1 s brings a consumer back
        # within a second of a broker restart.
        "reconnect_backoff_max_ms": 1_000,
    }
    if settings.kafka_sasl_mechanism:
        options |= {
            "sasl_mechanism": settings.kafka_sasl_mechanism,
            "sasl_plain_username": settings.kafka_sasl_username,
            "sasl_plain_password": settings.kafka_sasl_password.get_secret_value(),
        }
    if settings.kafka_ssl_cafile:
        options["ssl_cafile"] = settings.kafka_ssl_cafile
    return options


def dlq_producer_options(settings: Settings) -> dict[str, Any]:
    """Dead letters must not be lost: all in-sync replicas acknowledge, idempotent retries."""
    return connection_options(settings) | {
        "acks": "all",
        "enable_idempotence": True,
        "linger_ms": 5,
        "client_id": "noumena-dlq",
    }
