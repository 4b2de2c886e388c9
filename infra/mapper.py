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
from infra.keystore import Sealing, derive

SEAL_KERNEL_VERSION = 4
"""The `VERSION` of `infra/_seal_kernel.c` this module calls; a stale build is not used."""
_kernel: Any
_kernel, use_kernel = load("infra._seal_kernel", SEAL_KERNEL_VERSION, "NOUMENA_SEAL_KERNEL",
                           "sealing runs in Python")
"""Whether a batch's fields are sealed in the compiled kernel (when built; `NOUMENA_SEAL_KERNEL=0` turns it off)
or with `cryptography`'s AESGCM. Both write the same bytes (tests/test_seal_kernel.py)."""

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


def _spec_of(cls: type[DomainEvent]) -> _Spec:
    spec = _SPECS.get(cls)
    if spec is None:
        spec = _SPECS[cls] = _Spec(cls)
    return spec


Job = tuple[bytes, bytes | None, Any, tuple[bytes, bytes, bytes]]
"""One field to seal: (key, member id, value, (associated data, head, suffix)). With a member id (UTF-8), `key` is
its group's key and the field's key is derived from it (`keystore.derive`). The value is a text (sealed as b"s" + its
UTF-8) or bytes (sealed as they are: b"j" + JSON). The last three depend only on the key's name and the field
(`_extras`), so the mapper makes them once per name and field."""


def _extras(name: str, field: str) -> tuple[bytes, bytes, bytes]:
    """A field's associated data (`<key name>|<field>`), its JSON head and the suffix naming its key."""
    head = _HEADS.get(field)
    if head is None:
        head = _HEADS[field] = f',"{field}":"{SEAL}'.encode()
    return f"{name}|{field}".encode(), head, _suffix(name)


def _seal_jobs(nonces: bytes, jobs: list[Job]) -> list[bytes]:
    """Each job sealed as `head + base64url(nonce) + ":" + base64url(ciphertext + tag) + suffix` (no padding),
    job i with nonces[12 * i:12 * i + 12]: in the kernel, one call for them all, or else in Python. Both write the
    same bytes (tests/test_seal_kernel.py). (The kernel keys its one context for each job rather than keeping a
    keyed context per cached key: tried, that measured slower, since with hundreds of sessions in turn each
    context is cold in the CPU's caches by the time it is used again.)"""
    if use_kernel:
        return _kernel.seal_batch(nonces, jobs)  # type: ignore[no-any-return]
    return _seal_jobs_python(nonces, jobs)


def _seal_jobs_python(nonces: bytes, jobs: list[Job]) -> list[bytes]:
    out = []
    ciphers: dict[bytes, AESGCM] = {}
    for i, (key, member, value, (ad, head, suffix)) in enumerate(jobs):
        if member is not None:
            key = derive(key, member.decode())
        cipher = ciphers.get(key)
        if cipher is None:
            cipher = ciphers[key] = AESGCM(key)
        nonce = nonces[12 * i:12 * i + 12]
        plain = b"s" + value.encode() if isinstance(value, str) else value
        encoded = binascii.b2a_base64(nonce + cipher.encrypt(nonce, plain, ad), newline=False)
        encoded = encoded.translate(_URLSAFE).rstrip(b"=")
        out.append(b"".join((head, encoded[:16], b":", encoded[16:], suffix)))
    return out


def _suffix(key_id: str) -> bytes:
    return f":{key_id if _json_safe(key_id) else json.dumps(key_id)[1:-1]}\"".encode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class EventMapper:
    def __init__(self, keys: KeyStore | None = None) -> None:
        self.keys = keys
        self._ciphers: dict[str, AESGCM | None] = {}
        """For opening: by key id (None: the key is gone)."""
        self._sealers: dict[str, dict[str, tuple[bytes, bytes, bytes]]] = {}
        """For sealing: by key name, `_extras` by field (not kept for a fact's key)."""
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
        keys: dict[str, Sealing] = {}
        ready = None
        if self.keys is not None:
            wanted = [p.key for p in pending if p.key is not None]
            if wanted:  # (a key store commits new keys while we seal: waited for before the events are written)
                keys, ready = self.keys.keys_pending(wanted)
            self._check_generation()
        if not keys:  # nothing to seal
            stored = []
            streams: dict[str, str] = {}
            for p in pending:
                event = p.event
                spec = _spec_of(type(event))
                stream = streams.get(p.tenant)
                if stream is None:
                    stream = streams[p.tenant] = stream_id(p.tenant)
                stored.append(StoredEvent(originator_id=stream, originator_version=p.version, topic=spec.topic,
                                          state=spec.serializer.to_json(event)))
            return stored, ready
        # Sealed: a first pass writes each event's structure as pydantic does and lists the fields to seal (one
        # job each); the jobs are sealed together (`_seal_jobs`: one kernel call for the batch); a second pass
        # splices each sealed field into its event as a JSON string. A key not given is an error, never plaintext.
        jobs: list[Job] = []
        recipes: list[tuple[Pending, _Spec, bytes, int]] = []
        cached = self._sealers
        for p in pending:
            event = p.event
            spec = _spec_of(type(event))
            key = p.key
            if key is None or not spec.fields:
                recipes.append((p, spec, spec.serializer.to_json(event), 0))
                continue
            sealing = keys[key.key_id]
            name = sealing[0]
            member = sealing[2].encode() if len(sealing) == 3 else None  # type: ignore[misc]
            by_field = cached.get(name)
            if by_field is None:
                by_field = {}
                if member is None and "/fact/" not in name:  # (a fact's key seals one fact: not kept)
                    cached[name] = by_field
            field = spec.single
            if field is not None:  # one content field, a text (most events): no lists, no loops
                value = getattr(event, field)
                if value is None or value == "":
                    recipes.append((p, spec, spec.serializer.to_json(event), 0))
                    continue
                extras = by_field.get(field)
                if extras is None:
                    extras = by_field[field] = _extras(name, field)
                jobs.append((sealing[1], member, value, extras))
                recipes.append((p, spec, spec.serializer.to_json(event, exclude=spec.exclude)[:-1], 1))
                continue
            content = [field for field in spec.fields if getattr(event, field) not in _EMPTY]
            if not content:
                recipes.append((p, spec, spec.serializer.to_json(event), 0))
                continue
            for field in content:
                value = getattr(event, field)
                if not isinstance(value, str):  # a text is sealed as b"s" + its UTF-8, anything else as b"j" + JSON
                    value = b"j" + json.dumps(_plain(value), ensure_ascii=False, separators=(",", ":")).encode()
                extras = by_field.get(field)
                if extras is None:
                    extras = by_field[field] = _extras(name, field)
                jobs.append((sealing[1], member, value, extras))
            recipes.append((p, spec, spec.serializer.to_json(event, exclude=set(content))[:-1], len(content)))
        sealed = _seal_jobs(os.urandom(12 * len(jobs)), jobs)
        stored = []
        streams = {}
        at = 0
        for p, spec, state, fields in recipes:
            if fields:
                if len(state) == 1:  # nothing but the sealed fields: no comma before the first
                    state = b"".join((b"{", sealed[at][1:], *sealed[at + 1:at + fields], b"}"))
                elif fields == 1:
                    state = b"".join((state, sealed[at], b"}"))
                else:
                    state = b"".join((state, *sealed[at:at + fields], b"}"))
                at += fields
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
