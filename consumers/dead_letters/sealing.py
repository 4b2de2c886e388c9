"""Dead letters are covered by the same keys as the log (the decision: seal, don't purge).

A dead-lettered input is kept on a Kafka topic, where single records cannot be deleted. So its bytes are sealed
before they are produced, with the data key of the subject they belong to, found by a lenient look at the
envelope: the session's key for session events (owned by the session and the person it serves), the entity's
key for a person or memory registration, and for facts a key owned by the people and session they mention.
Forgetting that subject deletes the key, and the dead-lettered copy becomes unreadable with everything else.
Input that names no subject (undecodable bytes, JSON without a tenant) cannot be attributed to anyone and stays
as it came: it holds no identifiable subject to forget.
"""

from __future__ import annotations

import json
import os
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from domain.forgetting import ContentKey
from domain.ports import KeyStore

MAGIC = b"noumena-sealed-dlq:v1:"


def subject_key(value: bytes | None, coordinates: str) -> ContentKey | None:
    """The key that should seal this input, or None when it names no subject."""
    if not value:
        return None
    try:
        envelope = json.loads(value)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(envelope, dict) or not isinstance(envelope.get("tenant"), str):
        return None
    tenant = envelope["tenant"]
    payload: Any = envelope.get("payload")
    if not isinstance(payload, dict):
        return None
    session_id = payload.get("session_id")
    if isinstance(session_id, str) and session_id:
        return ContentKey(f"{tenant}/session/{session_id}", frozenset({f"session:{session_id}"}))
    ref = payload.get("ref")
    if isinstance(ref, str) and ref.startswith(("person:", "memory:")):
        return ContentKey(f"{tenant}/entity/{ref}", frozenset({ref}))
    owners = {v for v in (payload.get(k) for k in ("subject", "object", "scope"))
              if isinstance(v, str) and v.startswith(("person:", "session:"))}
    source = payload.get("source")
    if isinstance(source, dict) and isinstance(source.get("session_id"), str):
        owners.add(f"session:{source['session_id']}")
    if not owners:
        return None
    return ContentKey(f"{tenant}/dead-letter/{coordinates}", frozenset(owners))


def seal(keys: KeyStore, value: bytes | None, coordinates: str, subject_of: bytes | None = None) -> bytes | None:
    """The bytes to put on the DLQ topic: sealed when the input names a subject, else as they came.
    `subject_of`: the bytes that name the subject when `value` cannot (a truncated dead letter's cut-off JSON)."""
    key = subject_key(value if subject_of is None else subject_of, coordinates)
    if key is None or value is None:
        return value
    secret = keys.keys_for([key])[key.key_id]
    nonce = os.urandom(12)
    return MAGIC + key.key_id.encode() + b"\n" + nonce + AESGCM(secret).encrypt(nonce, value, key.key_id.encode())


def is_sealed(value: bytes | None) -> bool:
    return bool(value) and value.startswith(MAGIC)  # type: ignore[union-attr]


def unseal(keys: KeyStore | None, value: bytes | None) -> bytes | None:
    """The original bytes; None when the subject was forgotten (the key is gone)."""
    if not is_sealed(value) or value is None:
        return value
    header, _, rest = value[len(MAGIC):].partition(b"\n")
    key_id = header.decode()
    secret = keys.get(key_id) if keys is not None else None
    if secret is None:
        return None
    try:
        return AESGCM(secret).decrypt(rest[:12], rest[12:], key_id.encode())
    except InvalidTag:
        return None
