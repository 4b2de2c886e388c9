"""Maps domain events to eventsourcing's StoredEvent and back: stable topic + version, JSON state, and the
content fields sealed with their subject's data key (AES-256-GCM) when a key store is configured.

A sealed field is stored as the string `sealed:v1:<nonce>:<ciphertext>:<key id>` (base64url), the key id and
field name bound in as associated data. Ids, refs, topics and times stay in the clear. When the key has been
deleted (the subject was forgotten) the field reads as `[forgotten]` (lists as empty).
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Sequence
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from eventsourcing.persistence import StoredEvent

import domain.consolidation  # noqa: F401  (importing registers the event topics)
import domain.entities  # noqa: F401
import domain.facts  # noqa: F401
import domain.recalls  # noqa: F401
import domain.relations  # noqa: F401
import domain.sessions  # noqa: F401
import domain.tenants  # noqa: F401
from domain.events import DomainEvent, event_class_for, upcast
from domain.forgetting import EMPTY_WHEN_FORGOTTEN, FORGOTTEN, SubjectForgotten
from domain.ports import KeyStore, Pending

SEAL = "sealed:v1:"
SEAL_BYTES = SEAL.encode()
_FORGOTTEN_TOPIC = SubjectForgotten.stored_topic()


def stream_id(tenant: str) -> str:
    """Every tenant has exactly one stream: its ontology."""
    return f"tenant:{tenant}"


def _plain(value: Any) -> Any:
    """Tuples of strings or of pydantic-dumped dicts, as JSON-ready values."""
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    return value


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class EventMapper:
    def __init__(self, keys: KeyStore | None = None) -> None:
        self.keys = keys
        self._ciphers: dict[str, AESGCM | None] = {}
        self._generation = getattr(keys, "generation", 0)

    # ------------------------------------------------------------------ writing

    def to_stored(self, tenant: str, version: int, event: DomainEvent) -> StoredEvent:
        return self.to_stored_batch([Pending(tenant, version, event)])[0]

    def to_stored_batch(self, pending: Sequence[Pending]) -> list[StoredEvent]:
        """Serialize a batch; every data key it needs is created and committed first, in one transaction."""
        keys: dict[str, bytes] = {}
        if self.keys is not None:
            wanted = [p.key for p in pending if p.key is not None]
            wanted += [grant for p in pending for grant in p.grants]
            if wanted:
                keys = self.keys.keys_for(wanted)
        stored = []
        for p in pending:
            event = p.event
            content = [name for name in event.content_fields if getattr(event, name) not in (None, "", (), {})]
            if p.key is None or p.key.key_id not in keys or not content:
                state = event.model_dump_json().encode()
            else:
                # The structure as pydantic writes it, then each sealed field spliced in as a JSON string.
                cipher = self._cipher_for(p.key.key_id, keys[p.key.key_id])
                head = event.model_dump_json(exclude=set(content))
                sealed = ",".join(
                    f'"{name}":{json.dumps(self._seal(cipher, p.key.key_id, name, getattr(event, name)))}'
                    for name in content)
                state = (head[:-1] + ("," if len(head) > 2 else "") + sealed + "}").encode()
            stored.append(StoredEvent(originator_id=stream_id(p.tenant), originator_version=p.version,
                                      topic=event.stored_topic(), state=state))
        return stored

    def _check_generation(self) -> None:
        generation = getattr(self.keys, "generation", 0)
        if generation != self._generation:  # the key store dropped keys: so must we
            self._ciphers.clear()
            self._generation = generation

    def _cipher_for(self, key_id: str, key: bytes) -> AESGCM:
        self._check_generation()
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            cipher = AESGCM(key)
            if "/fact/" not in key_id:  # a fact's key seals one fact: caching it would only grow memory
                self._ciphers[key_id] = cipher
        return cipher

    @staticmethod
    def _seal(cipher: AESGCM, key_id: str, name: str, value: Any) -> str:
        nonce = os.urandom(12)
        if isinstance(value, str):
            plain = b"s" + value.encode()  # a text field: no JSON needed
        else:
            plain = b"j" + json.dumps(_plain(value), ensure_ascii=False, separators=(",", ":")).encode()
        sealed = cipher.encrypt(nonce, plain, f"{key_id}|{name}".encode())
        return f"{SEAL}{_b64(nonce)}:{_b64(sealed)}:{key_id}"

    # ------------------------------------------------------------------ reading

    def to_event(self, topic: str, state: bytes) -> DomainEvent:
        cls, stored_version = event_class_for(topic)
        if topic == _FORGOTTEN_TOPIC:
            self.evict()
        if stored_version == cls.version and SEAL_BYTES not in state:
            return cls.model_validate_json(state)
        data = json.loads(state)
        if stored_version != cls.version:
            data = upcast(cls.topic, stored_version, data)
        return cls.model_validate(self.unseal(cls, data))

    def unsealed_state(self, topic: str, state: bytes) -> bytes:
        """The stored JSON with its content opened (or `[forgotten]`), for readers that parse JSON themselves."""
        if topic == _FORGOTTEN_TOPIC:
            self.evict()
        if SEAL_BYTES not in state:
            return state
        cls, _version = event_class_for(topic)
        data = self.unseal(cls, json.loads(state))
        return json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode()

    def unseal(self, cls: type[DomainEvent], data: dict[str, Any]) -> dict[str, Any]:
        for name in cls.content_fields:
            value = data.get(name)
            if isinstance(value, str) and value.startswith(SEAL):
                data[name] = self._open(name, value)
        return data

    def _open(self, name: str, value: str) -> Any:
        nonce, sealed, key_id = value[len(SEAL):].split(":", 2)
        self._check_generation()
        cipher = self._ciphers.get(key_id)
        if cipher is None and key_id not in self._ciphers:
            key = self.keys.get(key_id) if self.keys is not None else None
            cipher = AESGCM(key) if key is not None else None
            if "/fact/" not in key_id:  # a fact's key opens one fact: caching it would only grow memory
                self._ciphers[key_id] = cipher
        if cipher is None:
            return [] if name in EMPTY_WHEN_FORGOTTEN else FORGOTTEN
        try:
            plain = cipher.decrypt(_unb64(nonce), _unb64(sealed), f"{key_id}|{name}".encode())
        except InvalidTag:
            return [] if name in EMPTY_WHEN_FORGOTTEN else FORGOTTEN
        return plain[1:].decode() if plain[:1] == b"s" else json.loads(plain[1:])

    def evict(self) -> None:
        """Drop every cached key: a subject was forgotten (perhaps by another process)."""
        self._ciphers.clear()
        if self.keys is not None:
            self.keys.evict_cache()  # type: ignore[attr-defined]
