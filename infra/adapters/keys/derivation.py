"""What a data key is and how a group member's key comes from its group's.

A fact's key is derived from its group's key (`domain.forgetting.fact_key` groups facts with the same other
owners), so writing a fact writes no key. A derived key is named `<group key id>/<key id>`; the group's key id is
`<tenant>/root/<random hex>`.
"""

from __future__ import annotations

import hashlib
import re

KEY_BYTES = 32  # AES-256
DERIVED_NAME = re.compile(r"^([a-z0-9][a-z0-9_-]*/root/[0-9a-f]{32})/(.+)$")
"""A derived key's name: `<tenant>/root/<random hex>/<key id>`, the group key it comes from and its own id."""

Sealing = tuple[str, bytes]
"""What seals one content key: the name the sealed field records, and the key's bytes."""


def derive(group_key: bytes, key_id: str) -> bytes:
    """A member's key from its group's key: keyed BLAKE2b (a pseudorandom function) of the member's key id."""
    return hashlib.blake2b(key_id.encode(), key=group_key, digest_size=KEY_BYTES, person=b"noumena-derive").digest()


def member_sealing(group: tuple[str, bytes], key_id: str) -> Sealing:
    """A group member's sealing: named `<group key id>/<key id>`, its key derived from the group's."""
    return f"{group[0]}/{key_id}", derive(group[1], key_id)


def derived_name(key_name: str) -> re.Match[str] | None:
    """The group key id and member key id of a derived key's name (None for a key stored on its own)."""
    return DERIVED_NAME.match(key_name) if "/root/" in key_name else None
