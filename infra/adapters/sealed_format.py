"""The sealed format's bytes, without any cryptography: how sealed fields are laid out in a stored event.

Format v3 (written): one sealed record per event. The event's JSON without its sealed fields (ids, refs, topics
and times stay in the clear), a NUL byte (never part of JSON text: pydantic and `json` escape control
characters), the format byte 3, the key's name (2-byte big-endian length, UTF-8), the number of sealed fields
(1 byte) and each one's name (1-byte length, ASCII); then the 12-byte nonce and the AES-256-GCM ciphertext, with
its 16-byte tag, of b"s" + the UTF-8 of the one sealed field when it is a text, else b"j" + the sealed fields as
one JSON object (pydantic's JSON of the event, those fields only). The associated data is everything before the
nonce, so the tag covers the whole stored event: a changed byte in the JSON in the clear, the key's name or the
field list fails the integrity check like one in the ciphertext, and a record cannot be moved onto another event.

Format v2 (still read, no longer written): the same JSON and NUL, the format byte 2, the key's name, then one
record per sealed field: its name (1-byte length, ASCII), the 4-byte big-endian length of the rest, the 12-byte
nonce, the ciphertext and its 16-byte tag. The plaintext is b"s" + a text's UTF-8, or b"j" + JSON; the associated
data `<key name>|<field>` binds the key and the field.

Format v1 (still read): each sealed field a JSON string `sealed:v1:<nonce>:<ciphertext>:<key name>` (base64url).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass
from typing import Any

SEALED_V2 = b"\x00\x02"
SEALED_V3 = b"\x00\x03"
"""Ends a sealed event's JSON and starts its sealed part (the NUL, then the format byte)."""
NONCE_BYTES = 12
TAG_BYTES = 16
V1_MARKER = "sealed:v1:"
_V1 = re.compile(r"sealed:v1:([A-Za-z0-9_-]{16}):([A-Za-z0-9_-]{23,}):(.+)", re.DOTALL)
"""A whole v1 field: nonce (12 bytes), ciphertext and tag (17 bytes or more), key name. Anything else that
starts with the marker is a text someone wrote (a label of an entity whose content is not sealed, or any text in a
store that seals nothing): it reads as it is."""


@dataclass(frozen=True, slots=True)
class SealedRecord:
    """One sealed record as stored: the fields it holds (v3: all of the event's sealed fields; v1 and v2: one),
    its nonce, its ciphertext with the tag, and the associated data the tag binds."""

    fields: tuple[str, ...]
    nonce: bytes
    ciphertext: bytes
    associated: bytes
    whole: bool
    """v3: the plaintext is b"s" + the one field's text, or b"j" + a JSON object of `fields`; v1 and v2: the one
    field's `plaintext`."""

    @property
    def field(self) -> str:
        """The sealed field, or the fields joined with commas (how an integrity error names them)."""
        return ",".join(self.fields)


@dataclass(frozen=True, slots=True)
class SealedParts:
    """A sealed state taken apart: the JSON of the fields in the clear, the key's name, the records."""

    clear_json: bytes
    key_name: str
    records: list[SealedRecord]


def associated_data(key_name: str, field: str) -> bytes:
    """What binds a v1 or v2 record to its key and its field (AES-GCM's associated data)."""
    return f"{key_name}|{field}".encode()


def plaintext(value: Any) -> bytes:
    """A v1 or v2 field's value as the bytes that were sealed: b"s" + a text's UTF-8, or b"j" + JSON."""
    if isinstance(value, str):
        return b"s" + value.encode()
    return b"j" + json.dumps(_plain(value), ensure_ascii=False, separators=(",", ":")).encode()


def value_of(plain: bytes) -> Any:
    """The value a v1 or v2 plaintext holds (the inverse of `plaintext`)."""
    return plain[1:].decode() if plain[:1] == b"s" else json.loads(plain[1:])


def _plain(value: Any) -> Any:
    """Tuples of strings or of pydantic models, as JSON-ready values."""
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    return value


def header_v3(clear_json: bytes, key_name: str, fields: tuple[str, ...]) -> bytes:
    """A v3 state up to its nonce (also the record's associated data): the JSON in the clear, the key's name and
    the names of the sealed fields."""
    return b"".join((clear_json, SEALED_V3, recorded_name(key_name), recorded_fields(fields)))


def recorded_name(key_name: str) -> bytes:
    """A key's name as a v2 or v3 header records it: its 2-byte length, then its UTF-8."""
    name = key_name.encode()
    if len(name) > 0xFFFF:
        raise ValueError(f"a key name longer than 65535 bytes cannot be recorded: {key_name[:80]!r}...")
    return len(name).to_bytes(2, "big") + name


def recorded_fields(fields: tuple[str, ...]) -> bytes:
    """The sealed fields' names as a v3 header records them: their number, then each one's length and ASCII."""
    parts = [bytes((len(fields),))]
    for field in fields:
        encoded = field.encode("ascii")
        parts += [bytes((len(encoded),)), encoded]
    return b"".join(parts)


def is_sealed(state: bytes) -> bool:
    """Whether a stored state has a sealed part (v2 or v3): a NUL after its JSON."""
    return 0 in state


def read_sealed(state: bytes) -> SealedParts:
    """Take a v2 or v3 state apart; a ValueError says what is malformed (bytes after the JSON that are not a
    sealed part, or a part cut short)."""
    cut = state.index(0)
    end = len(state)
    marker = state[cut:cut + 2]
    if marker not in (SEALED_V2, SEALED_V3) or cut + 4 > end:
        raise ValueError(f"a stored event has bytes after its JSON that are not sealed fields (format byte "
                         f"{state[cut + 1:cut + 2]!r}, expected {SEALED_V3[1:]!r} or {SEALED_V2[1:]!r})")
    at = cut + 4 + int.from_bytes(state[cut + 2:cut + 4], "big")
    if at > end:
        raise ValueError("a stored event's sealed fields are cut short (in the key name)")
    key_name = state[cut + 4:at].decode()
    if marker == SEALED_V3:
        return SealedParts(state[:cut], key_name, [_record_v3(state, at)])
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
        records.append(SealedRecord((field,), record[:NONCE_BYTES], record[NONCE_BYTES:],
                                    associated_data(key_name, field), False))
    return SealedParts(state[:cut], key_name, records)


def _record_v3(state: bytes, at: int) -> SealedRecord:
    end = len(state)
    if at >= end:
        raise ValueError("a stored event's sealed fields are cut short (in the field list)")
    count, at = state[at], at + 1
    fields = []
    for _ in range(count):
        size = state[at] if at < end else 0
        fields.append(state[at + 1:at + 1 + size].decode("ascii"))
        at += 1 + size
        if at > end or not size:
            raise ValueError("a stored event's sealed fields are cut short (in the field list)")
    if end - at < NONCE_BYTES + TAG_BYTES:
        raise ValueError(f"a stored event's sealed fields {','.join(fields)!r} are cut short")
    return SealedRecord(tuple(fields), state[at:at + NONCE_BYTES], state[at + NONCE_BYTES:], state[:at], True)


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
