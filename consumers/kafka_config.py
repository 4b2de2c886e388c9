"""Kafka client options from our settings, so every client (consumer, DLQ producer, admin) connects alike."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from domain.errors import InfrastructureError

if TYPE_CHECKING:  # (types only: consumers never import infra at run time)
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
        "allow_auto_create_topics": False,
    }


def instance_identity(settings: Settings) -> tuple[str | None, Any]:
    """The consumer's `group.instance.id` and, when derived, the lock that holds its slot (close it on exit).

    NOUMENA_KAFKA_INSTANCE_ID wins. Otherwise, with static membership on (the default), the id is
    `noumena-<host name>-<slot>`, where the slot is the lowest number whose lock file no other live process on
    this host holds for the same cluster and group (an flock in the temporary directory, released by the kernel
    when the process dies). So a process restarted after a crash takes the same slot, so the same id, and the
    group hands its partitions straight back, without waiting for its session to time out; a second process on
    the same host gets the next slot. Static members do not leave the group on close: their partitions move only
    after `NOUMENA_KAFKA_SESSION_TIMEOUT_MS` unless a process with the same id comes back."""
    if settings.kafka_instance_id:
        return settings.kafka_instance_id, None
    if not settings.kafka_static_membership:
        return None, None
    import fcntl
    import hashlib
    import re
    import socket
    import tempfile
    from pathlib import Path

    host = re.sub(r"[^A-Za-z0-9._-]", "-", socket.gethostname())[:180] or "host"
    scope = hashlib.sha256(f"{settings.kafka_bootstrap}|{settings.kafka_group}".encode()).hexdigest()[:16]
    directory = Path(tempfile.gettempdir()) / "noumena-kafka-slots" / scope
    directory.mkdir(parents=True, exist_ok=True)
    for slot in range(4096):
        handle = open(directory / f"{slot}.lock", "a+")  # noqa: SIM115 (held while the consumer lives)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            continue
        return f"noumena-{host}-{slot}", handle
    raise InfrastructureError(f"no free consumer slot in {directory}: set NOUMENA_KAFKA_INSTANCE_ID")


def missing_topics(consumer: Any, topics: dict[str, str]) -> list[str]:
    """Of {topic: the setting that names it}, a sentence for each topic the cluster does not have."""
    return [f"topic {topic!r} does not exist ({setting})" for topic, setting in topics.items()
            if not consumer.partitions_for_topic(topic)]
