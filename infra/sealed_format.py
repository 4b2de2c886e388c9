"""The sealed format's bytes, without any cryptography: how sealed fields are laid out in a stored event.

Format v2 (written): the event's JSON without its sealed fields (ids, refs, topics and times stay in the clear),
a NUL byte (never part of JSON text: pydantic and `json` escape control characters), the format byte 2, the
key's name (2-byte big-endian length, UTF-8), then one record per sealed field: its name (1-byte length,
ASCII), the 4-byte big-endian length of the rest, the 12-byte nonce, the AES-256-GCM ciphertext and its 16-byte
tag. The plaintext is b"s" + a text's UTF-8, or b"j" + JSON; the associated data `<key name>|<field>` binds the
key and the field.

Format v1 (still read, no longer written): each sealed field a JSON string
`sealed:v1:<nonce>:<ciphertext>:<key name>` (base64url).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass
from typing import Any

SEALED = b"\x00\x02"
"""Ends a v2 event's JSON and starts its sealed fields (the NUL, then the format byte)."""
NONCE_BYTES = 12
TAG_BYTES = 16
V1_MARKER = "sealed:v1:"
_V1 = re.compile(r"sealed:v1:([A-Za-z0-9_-]{16}):([A-Za-z0-9_-]{23,}):(.+)", re.DOTALL)
"""A whole v1 field: nonce (12 bytes), ciphertext and tag (17 bytes or more), key name. Anything else that
starts with the marker is a text someone wrote (a label of an entity whose content is not sealed, or any text in a
store that seals nothing): it reads as it is."""


@dataclass(frozen=True, slots=True)
class SealedRecord:
    """One sealed field as stored: which field, its nonce, and its ciphertext with the tag."""

    field: str
    nonce: bytes
    ciphertext: bytes


@dataclass(frozen=True, slots=True)
class SealedParts:
    """A v2 state taken apart: the JSON of the fields in the clear, the key's name, the records."""

    clear_json: bytes
    key_name: str
    records: list[SealedRecord]


def associated_data(key_name: str, field: str) -> bytes:
    """What binds a record to its key and its field (AES-GCM's associated data)."""
    return f"{key_name}|{field}".encode()


def plaintext(value: Any) -> bytes:
    """A field's value as the bytes that are sealed: b"s" + a text's UTF-8, or b"j" + JSON."""
    if isinstance(value, str):
        return b"s" + value.encode()
    return b"j" + json.dumps(_plain(value), ensure_ascii=False, separators=(",", ":")).encode()


def value_of(plain: bytes) -> Any:
    """The value a plaintext holds (the inverse of `plaintext`)."""
    return plain[1:].decode() if plain[:1] == b"s" else json.loads(plain[1:])


def _plain(value: Any) -> Any:
    """Tuples of strings or of pydantic models, as JSON-ready values."""
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    return value


def write_v2(clear_json: bytes, key_name: str, records: list[SealedRecord]) -> bytes:
    """A v2 state: the JSON in the clear, then the key's name and every record."""
    name = key_name.encode()
    if len(name) > 0xFFFF:
        raise ValueError(f"a key name longer than 65535 bytes cannot be recorded: {key_name[:80]!r}...")
    parts = [clear_json, SEALED, len(name).to_bytes(2, "big"), name]
    for record in records:
        field = record.field.encode("ascii")
        parts += [bytes((len(field),)), field, (len(record.nonce) + len(record.ciphertext)).to_bytes(4, "big"),
                  record.nonce, record.ciphertext]
    return b"".join(parts)


def is_v2(state: bytes) -> bool:
    return 0 in state


def read_v2(state: bytes) -> SealedParts:
    """Take a v2 state apart; a ValueError says what is malformed (bytes after the JSON that are not sealed
    fields, or a part cut short)."""
    cut = state.index(0)
    end = len(state)
    if state[cut:cut + 2] != SEALED or cut + 4 > end:
        raise ValueError(f"a stored event has bytes after its JSON that are not sealed fields (format byte "
                         f"{state[cut + 1:cut + 2]!r}, expected {SEALED[1:]!r})")
    at = cut + 4 + int.from_bytes(state[cut + 2:cut + 4], "big")
    if at > end:
        raise ValueError("a stored event's sealed fields are cut short (in the key name)")
    key_name = state[cut + 4:at].decode()
    records = []
    while at < end:
        size = state[at]
        field = state[at + 1:at + 1 + size].decode("ascii")
        at += 1 + size
        size = int.from_bytes(state[at:at + 4], "big")
        record = state[at + 4:at + 4 + size]
        at += 4 + size
        if at > end or size < NONCE_BYTES + TAG_BYTES:
            raise ValueError(f"a stored event's sealed field {field!r} is cut short")
        records.append(SealedRecord(field, record[:NONCE_BYTES], record[NONCE_BYTES:]))
    return SealedParts(state[:cut], key_name, records)


def read_v1(value: Any) -> tuple[str, bytes, bytes] | None:
    """A v1 field's key name, nonce and ciphertext, or None when the value is not a whole v1 field (then it is a
    text someone wrote, and reads as written)."""
    if not isinstance(value, str) or not value.startswith(V1_MARKER):
        return None
    found = _V1.fullmatch(value)
    if found is None:
        return None
    nonce, sealed, key_name = found.groups()
    try:
        return key_name, _unb64(nonce), _unb64(sealed)
    except binascii.Error:  # not base64 after all: not something v1 wrote
        return None


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
