"""A small producer for Python services that publish session events to noumena's Kafka topic.

    with SessionEventProducer("broker:9092") as producer:
        producer.send({"event_id": "e-1", "tenant": "acme", "type": "message.appended", "payload": {...}})

Keying (the ordering contract): Kafka keeps order only within a partition, and the partition follows the
key. Every event is keyed `<tenant>/<main session id>`: a session's events, and its worker sessions' events,
stay in order. Events that belong to no session (entity.registered, a fact without source.session_id) are
keyed `<tenant>`. Producers in other languages do the same, and validate against `noumena schema`.
Across keys there is no order: an event that arrives before what it depends on (a fact about an entity that
another key registers) is dead-lettered, and `noumena dlq replay` stores it once the dependency exists.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from domain.application.wire import EnvelopeBase, parse_envelope

DEFAULT_TOPIC = "noumena.session-events"


def _session_of(envelope: Mapping[str, Any]) -> str | None:
    payload = envelope.get("payload") or {}
    if not isinstance(payload, Mapping):
        return None
    source = payload.get("source")
    session = payload.get("session_id") or (source.get("session_id") if isinstance(source, Mapping) else None)
    return str(session) if session else None


class SessionEventProducer:
    """Validates envelopes and publishes them keyed by tenant and main session (see the module docstring)."""

    def __init__(self, bootstrap: str | list[str], topic: str = DEFAULT_TOPIC, *, validate: bool = True,
                 **producer_options: Any) -> None:
        from kafka import KafkaProducer

        servers = bootstrap.split(",") if isinstance(bootstrap, str) else bootstrap
        self.topic = topic
        self._validate = validate
        self._main_session: dict[tuple[str, str], str] = {}
        self._producer = KafkaProducer(**({"bootstrap_servers": servers, "acks": "all", "linger_ms": 5,
                                           "enable_idempotence": True} | producer_options))

    def key_for(self, envelope: Mapping[str, Any]) -> bytes:
        """`<tenant>/<main session id>`, or `<tenant>` for events outside any session."""
        tenant = str(envelope.get("tenant"))
        payload = envelope.get("payload") or {}
        session = _session_of(envelope)
        if session is None:
            return tenant.encode()
        # A worker session sorts with its main session, so its start never overtakes the dispatch.
        if envelope.get("type") == "worker.dispatched" and isinstance(payload, Mapping):
            self._main_session[(tenant, str(payload["worker_session_id"]))] = self._main(tenant, session)
        elif envelope.get("type") == "session.started" and isinstance(payload, Mapping):
            parent = payload.get("parent_session_id")
            if parent:
                self._main_session[(tenant, session)] = self._main(tenant, str(parent))
        return f"{tenant}/{self._main(tenant, session)}".encode()

    def _main(self, tenant: str, session: str) -> str:
        return self._main_session.get((tenant, session), session)

    def send(self, envelope: Mapping[str, Any] | EnvelopeBase, key: bytes | str | None = None) -> Any:
        """Publish one envelope (validated first unless validate=False); returns kafka-python's future."""
        data = envelope.model_dump(mode="json", exclude_none=True) if isinstance(envelope, EnvelopeBase) \
            else dict(envelope)
        if self._validate:
            parse_envelope(data)  # raises WireError naming the bad field, before anything is sent
        chosen = key if key is not None else self.key_for(data)
        value = json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode()
        return self._producer.send(self.topic, key=chosen.encode() if isinstance(chosen, str) else chosen,
                                   value=value)

    def flush(self, timeout: float | None = None) -> None:
        self._producer.flush(timeout=timeout)

    def close(self) -> None:
        self._producer.close(timeout=30)

    def __enter__(self) -> SessionEventProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.flush()
        self.close()
