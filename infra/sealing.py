"""The cipher step of the mapper: content fields sealed and opened with their subject's data key (AES-256-GCM,
`cryptography`'s AESGCM), the keys coming from a key store (`infra/keys/`).

Opening tells two failures apart. A key that is gone (the subject was forgotten: crypto-shredding) makes the
field read as `[forgotten]` (a list as empty). A key that exists but does not open the record (AES-GCM's
`InvalidTag`: the ciphertext, its tag, its nonce or its associated data was changed) is an integrity error,
`SealedFieldCorrupted`: the stored event was tampered with or damaged, and reading it must not pretend it was
forgotten.
"""

from __future__ import annotations

import os
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from domain.forgetting import EMPTY_WHEN_FORGOTTEN, FORGOTTEN
from domain.ports import KeyStore
from infra.sealed_format import NONCE_BYTES, SealedRecord, associated_data, plaintext, value_of


class SealedFieldCorrupted(Exception):
    """A sealed field whose key exists did not open: the stored bytes were changed (tampering or corruption)."""

    def __init__(self, key_name: str, field: str) -> None:
        super().__init__(f"sealed field {field!r} (key {key_name!r}) fails its integrity check: the stored event "
                         "was changed or damaged")
        self.key_name = key_name
        self.field = field


class FieldCipher:
    """Seals and opens content fields. Ciphers are cached by key name (a fact's own key, used for one fact
    only, is not), and dropped whenever the key store's generation moves (a subject was forgotten)."""

    def __init__(self, keys: KeyStore) -> None:
        self.keys = keys
        self._ciphers: dict[str, AESGCM | None] = {}
        """By key name; None: the key is gone."""
        self._generation = getattr(keys, "generation", 0)

    def seal(self, key_name: str, key: bytes, field: str, value: Any) -> SealedRecord:
        """One field sealed under a fresh random nonce, bound to its key's name and to the field."""
        cipher = self._cipher_for_sealing(key_name, key)
        nonce = os.urandom(NONCE_BYTES)
        return SealedRecord(field, nonce, cipher.encrypt(nonce, plaintext(value), associated_data(key_name, field)))

    def open(self, key_name: str, record: SealedRecord) -> Any:
        """A field's value; `[forgotten]` (a list as empty) when its key is gone; `SealedFieldCorrupted` when
        the key exists and the record does not open with it."""
        cipher = self._cipher_for_opening(key_name)
        if cipher is None:
            return self.forgotten(record.field)
        try:
            plain = cipher.decrypt(record.nonce, record.ciphertext, associated_data(key_name, record.field))
        except InvalidTag:
            raise SealedFieldCorrupted(key_name, record.field) from None
        return value_of(plain)

    @staticmethod
    def forgotten(field: str) -> Any:
        """What a field whose key is gone reads as."""
        return [] if field in EMPTY_WHEN_FORGOTTEN else FORGOTTEN

    def drop_cached(self) -> None:
        """Forget every cached cipher (a subject was forgotten, perhaps by another process)."""
        self._ciphers.clear()

    def _fresh(self) -> None:
        generation = getattr(self.keys, "generation", 0)
        if generation != self._generation:  # the key store dropped keys: so must we
            self._ciphers.clear()
            self._generation = generation

    def _cipher_for_sealing(self, key_name: str, key: bytes) -> AESGCM:
        self._fresh()
        cipher = self._ciphers.get(key_name)
        if cipher is None:
            cipher = AESGCM(key)
            if "/fact/" not in key_name:  # a fact's key seals one fact: caching it would only grow memory
                self._ciphers[key_name] = cipher
        return cipher

    def _cipher_for_opening(self, key_name: str) -> AESGCM | None:
        self._fresh()
        if key_name in self._ciphers:
            return self._ciphers[key_name]
        key = self.keys.get(key_name)  # type: ignore[attr-defined]
        cipher = AESGCM(key) if key is not None else None
        if "/fact/" not in key_name:
            self._ciphers[key_name] = cipher
        return cipher
