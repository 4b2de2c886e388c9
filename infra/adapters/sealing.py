"""The cipher step of the mapper: an event's content fields sealed and opened with their subject's data key
(AES-256-GCM, `cryptography`'s AESGCM), the keys coming from a key store (`infra/adapters/keys/`).

An event's sealed fields are sealed together, as one record (format v3, `infra/adapters/sealed_format.py`): one nonce,
one tag and one serialization by pydantic per event, whatever the number of fields. Every field of one event is
sealed under the one key the event's content belongs to (`domain.forgetting.content_key`), so sealing them
apart could never let one be forgotten without the others.

Opening tells two failures apart. A key that is gone (the subject was forgotten: crypto-shredding) makes the
fields read as `[forgotten]` (a list as empty). A key that exists but does not open the record (AES-GCM's
`InvalidTag`: the ciphertext, its tag, its nonce or its associated data was changed; in v3 that is the whole
stored event) is an integrity error, `SealedFieldCorrupted`: the stored event was tampered with or damaged, and
reading it must not pretend it was forgotten.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from pydantic_core import from_json

from domain.events import DomainEvent
from domain.forgetting import EMPTY_WHEN_FORGOTTEN, FORGOTTEN
from domain.ports import KeyStore
from infra.adapters.sealed_format import SEALED_V3, SealedRecord, recorded_fields, recorded_name, value_of

_EMPTY = (None, "", (), {})
"""Values with nothing to seal: a content field holding one is left in the clear."""


class SealedFieldCorrupted(Exception):
    """A sealed field whose key exists did not open: the stored bytes were changed (tampering or corruption)."""

    def __init__(self, key_name: str, field: str) -> None:
        super().__init__(f"sealed field {field!r} (key {key_name!r}) fails its integrity check: the stored event "
                         "was changed or damaged")
        self.key_name = key_name
        self.field = field


class _Layout(NamedTuple):
    """How the content fields of one class of event (or one subset of them) are sealed: their names as a set (for
    pydantic's `exclude` and `include`: a set is the type it documents; a frozenset costs more a call),
    as the v3 header records them, and the one field when there is only one (it is read once, and sealed as its
    UTF-8 when it is a text)."""

    fields: tuple[str, ...]
    names: set[str]
    recorded: bytes
    single: str | None


def _layout(fields: tuple[str, ...]) -> _Layout:
    return _Layout(fields, set(fields), recorded_fields(fields), fields[0] if len(fields) == 1 else None)


class FieldCipher:
    """Seals and opens content fields. What seals with a key (its cipher and its name as the v3 header records
    it) and what opens with it are cached by key name (a fact's own key, used for one fact only, is not), and
    dropped whenever the key store's generation moves (a subject was forgotten)."""

    def __init__(self, keys: KeyStore) -> None:
        self.keys = keys
        self._ciphers: dict[str, AESGCM | None] = {}
        """For opening, by key name; None: the key is gone."""
        self._sealers: dict[str, tuple[AESGCM, bytes]] = {}
        """For sealing, by key name: the cipher, and the name as the v3 header records it."""
        self._layouts: dict[type[DomainEvent], _Layout] = {}
        """By class of event: its content fields' layout."""
        self._subsets: dict[tuple[str, ...], _Layout] = {}
        """By tuple of fields: the layout of some of a class's content fields (the others empty)."""
        self._generation = getattr(keys, "generation", 0)

    def seal_event(self, event: DomainEvent, sealing: tuple[str, bytes], nonce: bytes) -> bytes:
        """The stored state of `event`: its content fields that are not empty sealed as one v3 record with
        `sealing` (the key's name and bytes) under `nonce` (fresh, random; see `infra/adapters/sealed_format.py`), or
        its JSON as it is when every content field is empty. Call `refresh` first in every batch."""
        cls = type(event)
        layout = self._layouts.get(cls)
        if layout is None:
            layout = self._layouts[cls] = _layout(cls.content_fields)
        if layout.single is not None:  # (most events: a message, a reason, a task, a summary)
            value = getattr(event, layout.single)
            if value in _EMPTY:
                return cls.__pydantic_serializer__.to_json(event)
        else:
            value = None
            content = tuple(f for f in layout.fields if getattr(event, f) not in _EMPTY)
            if not content:
                return cls.__pydantic_serializer__.to_json(event)
            if len(content) < len(layout.fields):
                layout = self._subsets.get(content) or self._subsets.setdefault(content, _layout(content))
        key_name = sealing[0]
        sealer = self._sealers.get(key_name)
        if sealer is None:
            sealer = (AESGCM(sealing[1]), recorded_name(key_name))
            if "/fact/" not in key_name:  # a fact's key seals one fact: caching it would only grow memory
                self._sealers[key_name] = sealer
        serializer = cls.__pydantic_serializer__
        header = serializer.to_json(event, exclude=layout.names) + SEALED_V3 + sealer[1] + layout.recorded
        if type(value) is str:  # one text: sealed as its UTF-8
            plain = b"s" + value.encode()
        else:
            plain = b"j" + serializer.to_json(event, include=layout.names)
        return header + nonce + sealer[0].encrypt(nonce, plain, header)

    def open(self, key_name: str, record: SealedRecord) -> dict[str, Any]:
        """The record's fields with their values; `[forgotten]` (a list as empty) when its key is gone;
        `SealedFieldCorrupted` when the key exists and the record does not open with it."""
        cipher = self._cipher_for_opening(key_name)
        if cipher is None:
            return {field: self.forgotten(field) for field in record.fields}
        try:
            plain = cipher.decrypt(record.nonce, record.ciphertext, record.associated)
        except InvalidTag:
            raise SealedFieldCorrupted(key_name, record.field) from None
        if record.whole and plain[:1] == b"j":
            return from_json(plain[1:])  # type: ignore[no-any-return]
        return {record.fields[0]: value_of(plain)}

    @staticmethod
    def forgotten(field: str) -> Any:
        """What a field whose key is gone reads as."""
        return [] if field in EMPTY_WHEN_FORGOTTEN else FORGOTTEN

    def drop_cached(self) -> None:
        """Forget every cached cipher (a subject was forgotten, perhaps by another process)."""
        self._ciphers.clear()
        self._sealers.clear()

    def refresh(self) -> None:
        """Drop the cached ciphers if the key store dropped keys since (a subject was forgotten)."""
        generation = getattr(self.keys, "generation", 0)
        if generation != self._generation:
            self.drop_cached()
            self._generation = generation

    def _cipher_for_opening(self, key_name: str) -> AESGCM | None:
        self.refresh()
        if key_name in self._ciphers:
            return self._ciphers[key_name]
        key = self.keys.get(key_name)  # type: ignore[attr-defined]
        cipher = AESGCM(key) if key is not None else None
        if "/fact/" not in key_name:
            self._ciphers[key_name] = cipher
        return cipher
