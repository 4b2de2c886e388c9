"""Key-encryption keys: data keys stored in a database noumena cannot erase byte by byte (PostgreSQL keeps old row
versions in its write-ahead log, in backups and replicas) are stored wrapped, never in plaintext.

The wrapping key (KEK) lives in a file outside the database (`<home>/keys.kek`, mode 0600, or
`NOUMENA_KEK_FILE`): `{"id": <32 hex>, "key": <64 hex>}`, always the same length, so a rotation overwrites the
old key's bytes in place (then fsync) rather than leaving them in a freed block of a new file. A forget deletes
the subject's data keys and *rotates* the KEK: every other data key is unwrapped and wrapped again under a new KEK
in the same transaction, then the old KEK is overwritten. A WAL, backup or replica copy of a deleted key is then
wrapped under a KEK that no longer exists anywhere.

Rotation is crash-safe: the new KEK is written to `keys.kek.next` first; the database records the id of the KEK
its rows are wrapped under (`kek_id`) in the rotation's transaction; on open, a leftover `.next` file is either
finished (its id is the recorded one: it replaces `keys.kek`) or wiped (the transaction never committed).

A wrapped key: 12-byte nonce, then AES-256-GCM of the 32-byte key with the key id as associated data (so a
wrapped key cannot be moved to another id): 60 bytes.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from infra.adapters.keys.derivation import KEY_BYTES

NONCE_BYTES = 12
WRAPPED_BYTES = NONCE_BYTES + KEY_BYTES + 16


class KekMissing(Exception):
    """The database's keys are wrapped under a KEK that no file holds: they cannot be opened."""


@dataclass(frozen=True)
class Kek:
    kek_id: str
    key: bytes

    @staticmethod
    def new() -> Kek:
        return Kek(os.urandom(16).hex(), os.urandom(KEY_BYTES))

    def text(self) -> bytes:
        return json.dumps({"id": self.kek_id, "key": self.key.hex()}).encode()

    def cipher(self) -> AESGCM:
        return AESGCM(self.key)


def wrap(cipher: AESGCM, key_id: str, key: bytes) -> bytes:
    nonce = os.urandom(NONCE_BYTES)
    return nonce + cipher.encrypt(nonce, key, key_id.encode())


def unwrap(cipher: AESGCM, key_id: str, wrapped: bytes) -> bytes:
    """The data key; `InvalidTag` when `cipher` is not the KEK it was wrapped under."""
    return cipher.decrypt(wrapped[:NONCE_BYTES], wrapped[NONCE_BYTES:], key_id.encode())


def is_wrapped(stored: bytes) -> bool:
    return len(stored) == WRAPPED_BYTES


class KekFile:
    """The KEK file and its rotation (see the module docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.next_path = path.with_name(path.name + ".next")

    def read(self, path: Path | None = None) -> Kek | None:
        path = path or self.path
        try:
            data = json.loads(path.read_bytes())
        except FileNotFoundError:
            return None
        return Kek(data["id"], bytes.fromhex(data["key"]))

    def candidates(self) -> list[Kek]:
        """The current KEK and, mid-rotation, the next one. A file that does not parse is being written over in
        place by another process finishing a rotation (`finish`, `discard`): it counts as absent, and a caller
        that finds no KEK it needs reads again (`PostgresKeyStore._find_kek`)."""
        found = []
        for path in (self.path, self.next_path):
            try:
                kek = self.read(path)
            except (ValueError, KeyError):
                continue
            if kek is not None:
                found.append(kek)
        return found

    def create(self) -> Kek:
        """A first KEK, if there is none yet (several processes may race: the first file written wins)."""
        kek = Kek.new()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            found = self.read()
            assert found is not None
            return found
        with os.fdopen(fd, "wb") as handle:
            handle.write(kek.text())
            handle.flush()
            os.fsync(handle.fileno())
        _sync_dir(self.path.parent)
        return kek

    def prepare(self) -> Kek:
        """Write the next KEK beside the current one (before the database is re-wrapped under it)."""
        kek = Kek.new()
        fd = os.open(self.next_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(kek.text())
            handle.flush()
            os.fsync(handle.fileno())
        _sync_dir(self.path.parent)
        return kek

    def finish(self, kek: Kek) -> None:
        """The database is wrapped under `kek`: overwrite the old KEK's bytes with it in place, then wipe the
        `.next` file."""
        _overwrite(self.path, kek.text())
        self.discard()

    def discard(self) -> None:
        """Wipe and remove a `.next` file (a rotation that did not commit, or one finished). Another process
        opening the store may finish the same rotation at the same time: whichever comes second finds nothing."""
        try:
            fd = os.open(self.next_path, os.O_WRONLY)
        except FileNotFoundError:
            return
        try:
            os.write(fd, b"\0" * os.fstat(fd).st_size)
            os.fsync(fd)
        finally:
            os.close(fd)
        self.next_path.unlink(missing_ok=True)
        _sync_dir(self.path.parent)

    def recover(self, recorded: str | None) -> None:
        """On open (with no rotation running: the caller holds the lock a forget holds): finish or undo a rotation
        a crash interrupted, by the KEK id the database records. A `.next` file that does not parse was cut short
        while being written (before its rotation's transaction) or wiped (after it): wiped."""
        try:
            pending = self.read(self.next_path)
        except (ValueError, KeyError):
            self.discard()
            return
        if pending is None:
            return
        if pending.kek_id == recorded:
            self.finish(pending)
        else:
            self.discard()


def _overwrite(path: Path, data: bytes) -> None:
    """Write `data` over the file's bytes in place (same inode, same blocks on an in-place file system), fsync."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        os.write(fd, data)
        os.ftruncate(fd, len(data))
        os.fsync(fd)
    finally:
        os.close(fd)


def _sync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


__all__ = ["Kek", "KekFile", "KekMissing", "InvalidTag", "is_wrapped", "unwrap", "wrap"]
