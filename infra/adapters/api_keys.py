"""API keys: one file of hashed keys, each bound to one tenant. The key itself is shown once and never stored.

A key reads `nk_<key_id>_<secret>`: `key_id` finds the record, and the SHA-256 of the whole key is compared in
constant time. The secret is 256 random bits, so a fast hash is enough (a slow password hash protects guessable
secrets, and these are not guessable). The file is replaced atomically and re-read when it changes, so keys
created by `noumena keys create` reach a running server without a restart.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import threading
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

from domain.errors import UnknownApiKey
from domain.ports import ApiKeyRecord, IssuedKey

KEY_PREFIX = "nk_"


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


class ApiKeyStore:
    """The keys file (the `ApiKeys` port): create, list, revoke, and resolve a presented key to its tenant."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._records: dict[str, ApiKeyRecord] = {}
        self._stamp: tuple[int, int] | None = None

    def _load(self) -> dict[str, ApiKeyRecord]:
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            self._records, self._stamp = {}, None
            return self._records
        stamp = (stat.st_mtime_ns, stat.st_size)
        if stamp != self._stamp:
            data = json.loads(self.path.read_text(encoding="utf-8") or "{}")
            self._records = {r["key_id"]: ApiKeyRecord(**{**r, "agents": tuple(r.get("agents", ()))})
                             for r in data.get("keys", [])}
            self._stamp = stamp
        return self._records

    def _save(self, records: dict[str, ApiKeyRecord]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump({"keys": [asdict(r) for r in records.values()]}, out, indent=1)
        os.replace(tmp, self.path)
        self._stamp = None

    def create(self, tenant: str, label: str = "", agents: tuple[str, ...] = ()) -> IssuedKey:
        """Issue a new key for `tenant` (acting only as `agents`, when named); only its hash is written."""
        with self._lock:
            records = dict(self._load())
            key_id = secrets.token_hex(6)
            key = f"{KEY_PREFIX}{key_id}_{secrets.token_urlsafe(32)}"
            record = ApiKeyRecord(key_id=key_id, tenant=tenant, sha256=hash_key(key), label=label,
                                  created_at=datetime.now(UTC).isoformat(timespec="seconds"),
                                  agents=tuple(sorted(set(agents))))
            records[key_id] = record
            self._save(records)
            return IssuedKey(record, key)

    def list(self, tenant: str | None = None) -> list[ApiKeyRecord]:
        with self._lock:
            return [r for r in self._load().values() if tenant is None or r.tenant == tenant]

    def revoke(self, key_id: str) -> ApiKeyRecord:
        with self._lock:
            records = dict(self._load())
            record = records.pop(key_id, None)
            if record is None:
                raise UnknownApiKey(f"no API key {key_id!r}")
            self._save(records)
            return record

    def tenant_for(self, key: str) -> str | None:
        """The tenant a presented key belongs to, or None for any key that is not stored exactly."""
        record = self.record_for(key)
        return None if record is None else record.tenant

    def record_for(self, key: str) -> ApiKeyRecord | None:
        """The record of a presented key (its tenant and agents), or None for any key not stored exactly."""
        if not key.startswith(KEY_PREFIX):
            return None
        key_id = key[len(KEY_PREFIX):].split("_", 1)[0]
        with self._lock:
            record = self._load().get(key_id)
        if record is None or not hmac.compare_digest(record.sha256, hash_key(key)):
            return None
        return record
