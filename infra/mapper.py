"""Maps domain events to eventsourcing's StoredEvent and back: stable topic + version, JSON state, and the
content fields sealed with their subject's data key (AES-256-GCM) when a key store is configured.

An event with sealed fields is stored in format v2: its JSON without those fields (ids, refs, topics and times
stay in the clear), a NUL byte (never part of JSON text: pydantic and `json` escape control characters), the
format byte 2, the key's name (2-byte big-endian length, UTF-8), then one record per sealed field: its name
(1-byte length, ASCII), the 4-byte big-endian length of the rest, the 12-byte nonce, the AES-256-GCM ciphertext
and its 16-byte tag. The plaintext is b"s" + a text's UTF-8, or b"j" + JSON; the associated data
`<key name>|<field>` binds the key and the field. The earlier format v1, each sealed field a JSON string
`sealed:v1:<nonce>:<ciphertext>:<key name>` (base64url), is still read. When the key has been deleted (the
subject was forgotten) a field reads as `[forgotten]` (lists as empty).
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
from collections.abc import Callable, Sequence
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from eventsourcing.persistence import StoredEvent
from pydantic_core import SchemaSerializer, from_json, to_json

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

SEAL_KERNEL_VERSION = 6
"""The `VERSION` of `infra/_seal_kernel.c` this module calls; a stale build is not used."""
_kernel: Any
_kernel, use_kernel = load("infra._seal_kernel", SEAL_KERNEL_VERSION, "NOUMENA_SEAL_KERNEL",
                           "sealing runs in Python")
"""Whether a batch's fields are sealed in the compiled kernel (when built; `NOUMENA_SEAL_KERNEL=0` turns it off)
or with `cryptography`'s AESGCM. Both write the same bytes (tests/test_seal_kernel.py)."""

SEAL = "sealed:v1:"
"""Format v1's marker (still read, no longer written)."""
SEAL_BYTES = SEAL.encode()
_V1 = re.compile(r"sealed:v1:([A-Za-z0-9_-]{16}):([A-Za-z0-9_-]{23,}):(.+)", re.DOTALL)
"""A whole v1 field: nonce (12 bytes), ciphertext and tag (17 bytes or more), key name. Anything else that
starts with the marker is a text someone wrote (a label of an entity whose content is not sealed, or any text in a
store that seals nothing): it reads as it is."""
SEALED = b"\x00\x02"
"""Ends a v2 event's JSON and starts its sealed fields (the NUL, then the format byte)."""
RECORD_MIN = 12 + 16  # nonce + tag
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
_FIELD_HEADS: dict[str, bytes] = {}
"""A record's head (the field name's length and the name) by field."""


_PLAIN_FIELD = frozenset({"type", "schema", "metadata", "frozen", "validation_alias"})
"""The keys of a model field's core schema that do not change how it is written."""


def _structure_serializer(cls: type[DomainEvent]) -> Callable[[dict[str, Any]], bytes] | None:
    """A serializer of an event's fields without its content fields, for its `__dict__`: the same JSON as
    `to_json(event, exclude=...)`, without pydantic looking every field up in the exclusion set for every event
    (a typed dict of the model's other fields, with their own schemas and the model's config). None unless the
    class is written by its fields alone: no model serializer, computed fields, extra fields, aliases or excluded
    fields."""
    schema: Any = cls.__pydantic_core_schema__
    if schema.get("type") != "model" or "serialization" in schema or schema.get("root_model") or \
            schema.get("config", {}).get("extra_fields_behavior") == "allow":  # (extra fields are written too)
        return None
    inner = schema.get("schema", {})
    if inner.get("type") != "model-fields" or inner.get("computed_fields") or inner.get("extras_schema"):
        return None
    fields = {}
    for name, field in inner["fields"].items():
        if set(field) - _PLAIN_FIELD:
            return None
        if name not in cls.content_fields:
            fields[name] = {"type": "typed-dict-field", "schema": field["schema"], "required": True}
    try:
        return SchemaSerializer({"type": "typed-dict", "fields": fields}, schema.get("config")).to_json
    except Exception:  # a schema this way of building cannot take: pydantic's exclusion is used
        return None


class _Spec:
    """What the mapper needs of an event class, looked up once."""

    __slots__ = ("serializer", "fields", "single", "exclude", "topic", "structure", "candidate")

    def __init__(self, cls: type[DomainEvent]) -> None:
        self.serializer = cls.__pydantic_serializer__
        self.fields = cls.content_fields
        single = len(self.fields) == 1 and cls.model_fields[self.fields[0]].annotation in (str, str | None)
        self.single = self.fields[0] if single else None
        """The content field, when it is the only one and a text."""
        self.exclude = set(self.fields)
        self.topic = cls.stored_topic()
        self.structure: Callable[[dict[str, Any]], bytes] | None = None
        """The JSON without the `single` field from the event's `__dict__` (`_structure_serializer`), once it has
        been seen to write exactly what `to_json(event, exclude=...)` writes."""
        self.candidate = _structure_serializer(cls) if single else None

    def without_content(self, event: DomainEvent) -> bytes:
        """The event's JSON without its (single) content field; the first call checks the candidate serializer."""
        state: bytes = self.serializer.to_json(event, exclude=self.exclude)
        candidate, self.candidate = self.candidate, None
        if candidate is not None:
            try:
                same = candidate(event.__dict__) == state
            except Exception:
                same = False
            if same:
                self.structure = candidate
        return state


_SPECS: dict[type, _Spec] = {}


def _spec_of(cls: type[DomainEvent]) -> _Spec:
    spec = _SPECS.get(cls)
    if spec is None:
        spec = _SPECS[cls] = _Spec(cls)
    return spec


Extras = tuple[bytes, bytes] | tuple[bytes, bytes, bool]
Job = tuple[bytes, bytes | None, Any, Extras]
"""One field to seal: (key, member id, value, extras). The value is a text (sealed as b"s" + its UTF-8) or bytes
(sealed as they are: b"j" + JSON). Without a member id, `key` is the data key and the extras are (associated data,
head) (`_extras`). With a member id (UTF-8), `key` is its group's key, the field's key is derived from it
(`keystore.derive`), and the extras are (group key id + "/", field head, first) (`_member_extras`): the key's name
is the group's id, "/" and the member id, and the associated data and head are made from it as `_extras` makes
them. Extras depend only on the key (or group) and the field, so the mapper makes them once for each."""


def _field_head(field: str) -> bytes:
    head = _FIELD_HEADS.get(field)
    if head is None:
        encoded = field.encode()
        head = _FIELD_HEADS[field] = bytes((len(encoded),)) + encoded
    return head


def _extras(name: str, field: str) -> tuple[Extras, Extras]:
    """A field's associated data (`<key name>|<field>`) with its record's head: as the event's first sealed field
    (the head starts the sealed part and names the key) and as a later one."""
    raw = name.encode()
    if len(raw) > 0xFFFF:
        raise ValueError(f"a key name longer than 65535 bytes cannot be recorded: {name[:80]!r}...")
    head = _field_head(field)
    ad = f"{name}|{field}".encode()
    return (ad, b"".join((SEALED, len(raw).to_bytes(2, "big"), raw, head))), (ad, head)


def _member_extras(group: str, field: str) -> tuple[Extras, Extras]:
    """The extras of a group member's field, as its event's first sealed field and as a later one."""
    prefix, head = f"{group}/".encode(), _field_head(field)
    return (prefix, head, True), (prefix, head, False)


def _seal_jobs(nonces: bytes, jobs: list[Job]) -> list[bytes]:
    """Each job sealed as its record, `head + length (4 bytes, big-endian) + nonce + ciphertext + tag`, job i with
    nonces[12 * i:12 * i + 12]: in the kernel, one call for them all, or else in Python. Both write the same
    bytes (tests/test_seal_kernel.py). (The kernel keys its one context for each job rather than keeping a
    keyed context per cached key: tried, that measured slower, since with hundreds of sessions in turn each
    context is cold in the CPU's caches by the time it is used again.)"""
    if use_kernel:
        return _kernel.seal_batch(nonces, jobs)  # type: ignore[no-any-return]
    return _seal_jobs_python(nonces, jobs)


def _seal_jobs_python(nonces: bytes, jobs: list[Job]) -> list[bytes]:
    out = []
    ciphers: dict[bytes, AESGCM] = {}
    for i, (key, member, value, extras) in enumerate(jobs):
        if member is None:
            ad, head = extras  # type: ignore[misc]
        else:
            group, head, first = extras  # type: ignore[misc]
            name = group + member
            if len(name) > 0xFFFF:
                raise ValueError("a key name longer than 65535 bytes cannot be recorded")
            ad = b"".join((name, b"|", head[1:]))
            if first:
                head = b"".join((SEALED, len(name).to_bytes(2, "big"), name, head))
            key = derive(key, member.decode())
        cipher = ciphers.get(key)
        if cipher is None:
            cipher = ciphers[key] = AESGCM(key)
        nonce = nonces[12 * i:12 * i + 12]
        plain = b"s" + value.encode() if isinstance(value, str) else value
        sealed = cipher.encrypt(nonce, plain, ad)
        out.append(b"".join((head, (len(nonce) + len(sealed)).to_bytes(4, "big"), nonce, sealed)))
    return out


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class EventMapper:
    def __init__(self, keys: KeyStore | None = None) -> None:
        self.keys = keys
        self._ciphers: dict[str, AESGCM | None] = {}
        """For opening: by key id (None: the key is gone)."""
        self._sealers: dict[str, dict[str, tuple[Extras, Extras]]] = {}
        """For sealing: by key name (not kept for a fact's own key) or group key id, extras by field."""
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
                spec = _SPECS.get(type(event)) or _spec_of(type(event))
                stream = streams.get(p.tenant)
                if stream is None:
                    stream = streams[p.tenant] = stream_id(p.tenant)
                stored.append(StoredEvent(originator_id=stream, originator_version=p.version, topic=spec.topic,
                                          state=spec.serializer.to_json(event)))
            return stored, ready
        # Sealed: a first pass writes each event's JSON without its content fields, as pydantic does, and lists
        # the fields to seal (one job each); the jobs are sealed together (`_seal_jobs`: one kernel call for the
        # batch); a second pass appends each event's records to its JSON (format v2). A key not given is an
        # error, never plaintext.
        jobs: list[Job] = []
        recipes: list[tuple[Pending, _Spec, bytes, int]] = []
        cached = self._sealers
        for p in pending:
            event = p.event
            spec = _SPECS.get(type(event)) or _spec_of(type(event))
            key = p.key
            if key is None or not spec.fields:
                recipes.append((p, spec, spec.serializer.to_json(event), 0))
                continue
            sealing = keys[key.key_id]
            name = sealing[0]  # the key's name, or a group member's group key id
            if len(sealing) == 3:  # a group member: the kernel derives its key and names it
                member = sealing[2].encode()  # type: ignore[misc]
                make = _member_extras
            else:
                member = None
                make = _extras
            by_field = cached.get(name)
            if by_field is None:
                by_field = {}
                if "/fact/" not in name:  # (a fact's own key seals one fact: not kept)
                    cached[name] = by_field
            field = spec.single
            if field is not None:  # one content field, a text (most events): no lists, no loops
                values = event.__dict__  # (the model's fields: read once, for the text and for the structure)
                value = values[field]
                if value is None or value == "":
                    recipes.append((p, spec, spec.serializer.to_json(event), 0))
                    continue
                extras = by_field.get(field)
                if extras is None:
                    extras = by_field[field] = make(name, field)
                jobs.append((sealing[1], member, value, extras[0]))
                structure = spec.structure
                recipes.append((p, spec, structure(values) if structure is not None else spec.without_content(event),
                                1))
                continue
            content = [field for field in spec.fields if getattr(event, field) not in _EMPTY]
            if not content:
                recipes.append((p, spec, spec.serializer.to_json(event), 0))
                continue
            for i, field in enumerate(content):
                value = getattr(event, field)
                if not isinstance(value, str):  # a text is sealed as b"s" + its UTF-8, anything else as b"j" + JSON
                    value = b"j" + json.dumps(_plain(value), ensure_ascii=False, separators=(",", ":")).encode()
                extras = by_field.get(field)
                if extras is None:
                    extras = by_field[field] = make(name, field)
                jobs.append((sealing[1], member, value, extras[1 if i else 0]))
            recipes.append((p, spec, spec.serializer.to_json(event, exclude=set(content)), len(content)))
        sealed = _seal_jobs(os.urandom(12 * len(jobs)), jobs)
        stored = []
        streams = {}
        at = 0
        for p, spec, state, fields in recipes:
            if fields == 1:
                state += sealed[at]
                at += 1
            elif fields:
                state = b"".join((state, *sealed[at:at + fields]))
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
        cut = state.find(0)
        if cut >= 0:  # format v2: the sealed fields follow the JSON
            data = self._open_records(state, cut, from_json(state[:cut]))
        elif stored_version == cls.version and SEAL_BYTES not in state:
            return cls.model_validate_json(state)
        else:
            data = json.loads(state)
        if stored_version != cls.version:
            data = upcast(cls.topic, stored_version, data)
        return cls.model_validate(self.unseal(cls, data) if cut < 0 else data)

    def unsealed_state(self, topic: str, state: bytes) -> bytes:
        """The stored JSON with its content opened (or `[forgotten]`), for readers that parse JSON themselves."""
        if topic == _FORGOTTEN_TOPIC:
            self.evict()
        cut = state.find(0)
        if cut >= 0:  # (pydantic's JSON parser and writer, several times json's: the projector reads every event)
            data = self._open_records(state, cut, from_json(state[:cut]))
        elif SEAL_BYTES not in state:
            return state
        else:
            data = self.unseal(event_class_for(topic)[0], json.loads(state))
        return to_json(data)

    def unseal(self, cls: type[DomainEvent], data: dict[str, Any]) -> dict[str, Any]:
        """Format v1: open the content fields that are sealed strings."""
        for name in cls.content_fields:
            value = data.get(name)
            if isinstance(value, str) and value.startswith(SEAL):
                found = _V1.fullmatch(value)
                if found is None:
                    continue
                nonce, sealed, key_id = found.groups()
                try:
                    parts = _unb64(nonce), _unb64(sealed)
                except binascii.Error:  # not base64 after all: not something v1 wrote
                    continue
                data[name] = self._open(self._cipher(key_id), key_id, name, *parts)
        return data

    def _open_records(self, state: bytes, cut: int, data: dict[str, Any]) -> dict[str, Any]:
        """Format v2: open the records after the JSON (`cut` is the NUL's index) into `data`."""
        end = len(state)
        if state[cut:cut + 2] != SEALED or cut + 4 > end:
            raise ValueError(f"a stored event has bytes after its JSON that are not sealed fields (format byte "
                             f"{state[cut + 1:cut + 2]!r}, expected {SEALED[1:]!r})")
        at = cut + 4 + int.from_bytes(state[cut + 2:cut + 4], "big")
        if at > end:
            raise ValueError("a stored event's sealed fields are cut short (in the key name)")
        key_id = state[cut + 4:at].decode()
        cipher = self._cipher(key_id)
        while at < end:
            size = state[at]
            field = state[at + 1:at + 1 + size].decode("ascii")
            at += 1 + size
            size = int.from_bytes(state[at:at + 4], "big")
            record = state[at + 4:at + 4 + size]
            at += 4 + size
            if at > end or size < RECORD_MIN:
                raise ValueError(f"a stored event's sealed field {field!r} is cut short")
            data[field] = self._open(cipher, key_id, field, record[:12], record[12:])
        return data

    def _cipher(self, key_id: str) -> AESGCM | None:
        """The cipher of a key (None: it is gone), cached unless it opens one fact only."""
        self._check_generation()
        cipher = self._ciphers.get(key_id)
        if cipher is None and key_id not in self._ciphers:
            key = self.keys.get(key_id) if self.keys is not None else None
            cipher = AESGCM(key) if key is not None else None
            if "/fact/" not in key_id:  # a fact's key opens one fact: caching it would only grow memory
                self._ciphers[key_id] = cipher
        return cipher

    @staticmethod
    def _open(cipher: AESGCM | None, key_id: str, field: str, nonce: bytes, sealed: bytes) -> Any:
        if cipher is None:
            return [] if field in EMPTY_WHEN_FORGOTTEN else FORGOTTEN
        try:
            plain = cipher.decrypt(nonce, sealed, f"{key_id}|{field}".encode())
        except InvalidTag:
            return [] if field in EMPTY_WHEN_FORGOTTEN else FORGOTTEN
        return plain[1:].decode() if plain[:1] == b"s" else json.loads(plain[1:])

    def evict(self) -> None:
        """Drop every cached key: a subject was forgotten (perhaps by another process)."""
        self._ciphers.clear()
        if self.keys is not None:
            self.keys.evict_cache()  # type: ignore[attr-defined]
