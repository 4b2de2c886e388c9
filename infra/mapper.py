"""Maps domain events to eventsourcing's StoredEvent and back: stable topic + version, JSON state, and the
content fields sealed with their subject's data key (AES-256-GCM) when a key store is configured.

A sealed field is stored as the string `sealed:v1:<nonce>:<ciphertext>:<key id>` (base64url), the key id and
field name bound in as associated data. Ids, refs, topics and times stay in the clear. When the key has been
deleted (the subject was forgotten) the field reads as `[forgotten]` (lists as empty).
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from collections.abc import Callable, Sequence
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
from infra.kernels import load

SEAL_KERNEL_VERSION = 2
"""The `VERSION` of `infra/_seal_kernel.c` this module calls; a stale build is not used."""
_kernel: Any
_kernel, use_kernel = load("infra._seal_kernel", SEAL_KERNEL_VERSION, "NOUMENA_SEAL_KERNEL",
                           "sealing runs in Python")
"""Whether new sealers seal in the compiled kernel (when built; `NOUMENA_SEAL_KERNEL=0` turns it off) or with
`cryptography`'s AESGCM. Both write the same bytes (tests/test_seal_kernel.py)."""

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


_EMPTY = (None, "", (), {})
_URLSAFE = bytes.maketrans(b"+/", b"-_")


def _json_safe(text: str) -> bool:
    """Whether `text` can stand inside a JSON string as it is (printable ASCII without quote or backslash)."""
    return text.isascii() and text.isprintable() and '"' not in text and "\\" not in text


_HEADS: dict[str, bytes] = {}
"""`,"name":"sealed:v1:` by field name."""


class _Spec:
    """What the mapper needs of an event class, looked up once."""

    __slots__ = ("serializer", "fields", "single", "exclude", "topic")

    def __init__(self, cls: type[DomainEvent]) -> None:
        self.serializer = cls.__pydantic_serializer__
        self.fields = cls.content_fields
        single = len(self.fields) == 1 and cls.model_fields[self.fields[0]].annotation in (str, str | None)
        self.single = self.fields[0] if single else None
        """The content field, when it is the only one and a text."""
        self.exclude = set(self.fields)
        self.topic = cls.stored_topic()


_SPECS: dict[type, _Spec] = {}


class _Sealer:
    """Seals content fields with one data key: each as `,"name":"sealed:v1:<nonce>:<ciphertext>:<key id>"`, the
    JSON bytes spliced into the event. What depends only on the key and the field name is made once. With the
    compiled kernel (`cipher` None) one call seals a field and writes its text."""

    __slots__ = ("cipher", "key", "key_id", "suffix", "ads")

    def __init__(self, key_id: str, key: bytes) -> None:
        self.cipher = None if use_kernel and isinstance(key, bytes) and len(key) == 32 else AESGCM(key)
        self.key = key
        self.key_id = key_id
        self.suffix = f":{key_id if _json_safe(key_id) else json.dumps(key_id)[1:-1]}\"".encode()
        self.ads: dict[str, bytes] = {}

    def seal(self, nonce: bytes, name: str, value: Any) -> bytes:
        """A 12-byte nonce is 16 base64 characters without padding: nonce and ciphertext are encoded in one call
        and split there."""
        ad = self.ads.get(name)
        if ad is None:
            ad = self.ads[name] = f"{self.key_id}|{name}".encode()
        head = _HEADS.get(name)
        if head is None:
            head = _HEADS[name] = f',"{name}":"{SEAL}'.encode()
        if self.cipher is None:  # the kernel: a text as b"s" + its UTF-8, bytes as they are
            if not isinstance(value, str):
                value = b"j" + json.dumps(_plain(value), ensure_ascii=False, separators=(",", ":")).encode()
            return _kernel.seal_field(self.key, nonce, value, ad, head, self.suffix)  # type: ignore[no-any-return]
        if isinstance(value, str):
            plain = b"s" + value.encode()  # a text field: no JSON needed
        else:
            plain = b"j" + json.dumps(_plain(value), ensure_ascii=False, separators=(",", ":")).encode()
        encoded = binascii.b2a_base64(nonce + self.cipher.encrypt(nonce, plain, ad), newline=False)
        encoded = encoded.translate(_URLSAFE).rstrip(b"=")
        return b"".join((head, encoded[:16], b":", encoded[16:], self.suffix))


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class EventMapper:
    def __init__(self, keys: KeyStore | None = None) -> None:
        self.keys = keys
        self._ciphers: dict[str, AESGCM | None] = {}
        """For opening: by key id (None: the key is gone)."""
        self._sealers: dict[str, _Sealer] = {}
        """For sealing: by key id."""
        self._generation = getattr(keys, "generation", 0)

    # ------------------------------------------------------------------ writing

    def to_stored(self, tenant: str, version: int, event: DomainEvent) -> StoredEvent:
        return self.to_stored_batch([Pending(tenant, version, event)])[0]

    def to_stored_batch(self, pending: Sequence[Pending]) -> list[StoredEvent]:
        """Serialize a batch; every data key it needs is created and committed in one transaction before this
        returns (the key store's commit runs while the batch is sealed), so no event can be written before its
        key is durable."""
        stored, keys_ready = self.to_stored_pending(pending)
        if keys_ready is not None:
            keys_ready()()  # (nothing to hold forgets off for: these events are not written here)
        return stored

    def to_stored_pending(self, pending: Sequence[Pending]
                          ) -> tuple[list[StoredEvent], Callable[[], Callable[[], None]] | None]:
        """Serialize a batch, and `ready`, to call before committing it (None: nothing sealed): the new data keys
        it is sealed with may still be being committed; `ready` waits until they are (raising if they could not
        be), then holds off forgets until the function it returns is called, after the commit (see
        `KeyStore.keys_pending`)."""
        keys: dict[str, tuple[str, bytes]] = {}
        ready = None
        if self.keys is not None:
            wanted = [p.key for p in pending if p.key is not None]
            if wanted:  # (a key store commits new keys while we seal: waited for before the events are written)
                keys, ready = self.keys.keys_pending(wanted)
            self._check_generation()
        stored = []
        nonces = b""
        used = 0
        sealing = self.keys is not None
        streams: dict[str, str] = {}
        sealers = self._sealers
        for p in pending:
            event = p.event
            cls = type(event)
            spec = _SPECS.get(cls)
            if spec is None:
                spec = _SPECS[cls] = _Spec(cls)
            key = p.key
            state = None
            if key is not None and sealing and spec.fields:
                # The structure as pydantic writes it, then each sealed field spliced in as a JSON string, sealed
                # with the key's name (its id, or a derived key's name) and bytes. A key not given is an error,
                # never plaintext.
                name, secret = keys[key.key_id]
                sealer = sealers.get(name)
                if sealer is None:
                    sealer = _Sealer(name, secret)
                    if "/fact/" not in name:  # a fact's key seals one fact: caching it would only grow memory
                        sealers[name] = sealer
                if spec.single is not None:  # one content field (most events): no lists, no loops
                    value = getattr(event, spec.single)
                    if value is not None and value != "":
                        if used + 12 > len(nonces):  # nonces for the rest of the batch, from one call
                            nonces, used = os.urandom(12 * (len(pending) + 8)), 0
                        sealed = sealer.seal(nonces[used:used + 12], spec.single, value)
                        used += 12
                        head = spec.serializer.to_json(event, exclude=spec.exclude)[:-1]
                        state = b"".join((head, sealed, b"}")) if len(head) > 1 else \
                            b"".join((b"{", sealed[1:], b"}"))
                else:
                    content = [field for field in spec.fields if getattr(event, field) not in _EMPTY]
                    if content:
                        parts = [spec.serializer.to_json(event, exclude=set(content))[:-1]]
                        for field in content:
                            if used + 12 > len(nonces):
                                nonces, used = os.urandom(12 * (len(pending) + 8)), 0
                            parts.append(sealer.seal(nonces[used:used + 12], field, getattr(event, field)))
                            used += 12
                        if len(parts[0]) == 1:  # nothing but the sealed fields
                            parts[1] = parts[1][1:]
                        parts.append(b"}")
                        state = b"".join(parts)
            if state is None:
                state = spec.serializer.to_json(event)
            stream = streams.get(p.tenant)
            if stream is None:
                stream = streams[p.tenant] = stream_id(p.tenant)
            stored.append(StoredEvent(originator_id=stream, originator_version=p.version, topic=spec.topic,
                                      state=state))
        return stored, ready

    def _check_generation(self) -> None:
        generation = getattr(self.keys, "generation", 0)
        if generation != self._generation:  # the key store dropped keys: so must we
            self._ciphers.clear()
            self._sealers.clear()
            self._generation = generation

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
