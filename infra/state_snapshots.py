"""Snapshots of each tenant's folded state (the `Ontology` the rules decide on), one file per tenant in the home.

A process that starts folds only the events after its snapshot instead of the whole log. A snapshot file is

    b"noumena-state\\n" + one line of JSON (the header) + sealed body

The header names the format, a fingerprint of the code that folds events (a snapshot made by other code is
ignored), the tenant, the stream version the state is at, a digest of the stored event at that version (a
snapshot of another log, or of a log restored from an older backup, is ignored) and the name of the data key that
seals the body. The body is the pickled state sealed with AES-256-GCM (the header is its associated data), under
the tenant's snapshot key from the key store (`domain.forgetting.state_snapshot_key`): every forget in the tenant
deletes that key, so no copy of a snapshot taken before the forget opens again, in this home or any other.
Without a key store (`NOUMENA_ENCRYPT_CONTENT=false`) the body is the plain pickle (the log is plain too).

Writes are atomic (a temporary file, fsync, `os.replace`, fsync of the folder) and run on a background thread; a
snapshot is stored only while the key store holds forgets off and no forget of the tenant is in the log after
the snapshot's version, so a process that took a snapshot just before another process's forget never stores it.
Anything unusable (missing, other format or code, corrupt, not of this log, key deleted) is ignored with a
warning (an info line for a key deleted by a forget) and the caller folds the whole log.
"""

from __future__ import annotations

import gc
import hashlib
import json
import logging
import os
import pickle
import sys
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from functools import cache
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from domain.forgetting import SubjectForgotten, state_snapshot_key
from domain.ontology import Ontology
from domain.ports import KeysForgotten, KeyStore
from infra.eventlog import store_failures
from infra.mapper import stream_id

log = logging.getLogger(__name__)

MAGIC = b"noumena-state\n"
FORMAT = 1
FOLDING_CODE = ("domain", "infra/mapper.py", "infra/event_json.py")
"""What decides how events fold into state: the domain's modules (events, upcasters, the ontology) and how
stored events are read. A change to any of them makes older snapshots unusable."""


@cache
def code_fingerprint() -> str:
    """A digest of the code that folds events (and the Python version, which pickles)."""
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256(f"{sys.version_info[:2]}".encode())
    for name in FOLDING_CODE:
        path = root / name
        for file in sorted(path.glob("*.py")) if path.is_dir() else [path]:
            digest.update(file.name.encode() + b"\0" + file.read_bytes() + b"\0")
    return digest.hexdigest()[:32]


class FileStateSnapshots:
    """Implements domain.ports.StateSnapshots with a file per tenant in `<home>/state/`."""

    def __init__(self, home: Path, log_: Any, keys: KeyStore | None, every: int) -> None:
        self.folder = Path(home) / "state"
        self.every = every
        self._log = log_
        self._keys = keys
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="noumena-state-snapshot")
        self._pending: list[Future[None]] = []
        self._lock = threading.Lock()
        self.stored: list[tuple[str, int]] = []
        """(tenant, version) of each snapshot this process stored, in order (tests and the benchmark read it)."""
        self._remove_stale_temporaries()

    def _remove_stale_temporaries(self) -> None:
        """Delete temporaries left by a process killed while it wrote a snapshot (`.<name>.<pid>.<thread>.tmp`)."""
        for tmp in self.folder.glob(".*.tmp") if self.folder.is_dir() else ():
            try:
                pid = int(tmp.name.split(".")[-3])
                os.kill(pid, 0)
            except (ValueError, IndexError, ProcessLookupError):
                tmp.unlink(missing_ok=True)
            except PermissionError:
                pass  # (another user's live process)

    def path(self, tenant: str) -> Path:
        return self.folder / f"{tenant}.snapshot"

    # ------------------------------------------------------------------ loading

    def load(self, tenant: str) -> Ontology | None:
        path = self.path(tenant)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as error:
            log.warning("state snapshot %s ignored (%s): folding the whole log", path, error)
            return None
        try:
            header, raw_header, body = _split(data)
            why = self._unusable(tenant, header)
            if why is not None:
                log.warning("state snapshot %s ignored (%s): folding the whole log", path, why)
                return None
            plain = self._open(header, raw_header, body)
            if plain is None:  # its key is gone: a forget in the tenant since it was taken
                log.info("state snapshot %s was taken before a forget (its key is deleted): folding the whole log",
                         path)
                path.unlink(missing_ok=True)
                return None
            state = _unpickle(plain)
        except (ValueError, KeyError, TypeError, InvalidTag, pickle.UnpicklingError, EOFError, AttributeError,
                ImportError) as error:
            log.warning("state snapshot %s ignored (corrupt: %s): folding the whole log", path,
                        type(error).__name__ + (f": {error}" if str(error) else ""))
            return None
        if not isinstance(state, Ontology) or state.tenant != tenant or state.version != header["version"]:
            log.warning("state snapshot %s ignored (it does not hold tenant %s at version %s): folding the whole "
                        "log", path, tenant, header["version"])
            return None
        return state

    def _unusable(self, tenant: str, header: dict[str, Any]) -> str | None:
        if header.get("format") != FORMAT:
            return f"format {header.get('format')!r}, this version reads {FORMAT}"
        if header.get("code") != code_fingerprint():
            return "taken by other code (another version of noumena folds events differently)"
        if header.get("tenant") != tenant:
            return f"it is tenant {header.get('tenant')!r}'s"
        version = header.get("version")
        if not isinstance(version, int) or version < 1:
            return f"bad version {version!r}"
        if self._anchor(tenant, version) != header.get("anchor"):
            return f"the log's event {version} of the tenant is not the one it was taken at (another log?)"
        if (header.get("key") is None) != (self._keys is None):
            return "sealed" if self._keys is None else "not sealed, and content is sealed"
        return None

    def _open(self, header: dict[str, Any], raw_header: bytes, body: bytes) -> bytes | None:
        if self._keys is None:
            return body
        key = self._keys.get(header["key"])
        if key is None:
            return None
        return AESGCM(key).decrypt(body[:12], body[12:], raw_header)

    def _anchor(self, tenant: str, version: int) -> str | None:
        """A digest of the stored event at `version` of the tenant's stream (None if there is none)."""
        with store_failures(f"reading version {version} of tenant {tenant!r}"):
            stored = list(self._log.recorder.select_events(stream_id(tenant), gt=version - 1, lte=version))
        if not stored:
            return None
        return hashlib.sha256(stored[0].topic.encode() + b"\0" + bytes(stored[0].state)).hexdigest()

    # ------------------------------------------------------------------ saving

    def save(self, tenant: str, state: Ontology) -> None:
        plain = pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)  # (now: the caller holds the state still)
        with self._lock:
            self._pending = [f for f in self._pending if not f.done()]
            self._pending.append(self._writer.submit(self._store, tenant, state.version, plain))

    def _store(self, tenant: str, version: int, plain: bytes) -> None:
        try:
            self._store_now(tenant, version, plain)
        except Exception:  # a snapshot is an optimisation: never let it break the process
            log.exception("state snapshot of tenant %s at version %s not stored", tenant, version)

    def _store_now(self, tenant: str, version: int, plain: bytes) -> None:
        header: dict[str, Any] = {"format": FORMAT, "code": code_fingerprint(), "tenant": tenant,
                                  "version": version, "anchor": self._anchor(tenant, version), "key": None}
        ready = None
        key = None
        if self._keys is not None:
            sealings, ready = self._keys.keys_pending([state_snapshot_key(tenant)])
            header["key"], key = sealings[state_snapshot_key(tenant).key_id]
        raw_header = json.dumps(header, sort_keys=True).encode()
        if key is not None:
            nonce = os.urandom(12)
            body = nonce + AESGCM(key).encrypt(nonce, plain, raw_header)
        else:
            body = plain
        del plain
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.path(tenant)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        with open(tmp, "wb") as out:
            out.write(MAGIC + raw_header + b"\n" + body)
            out.flush()
            os.fsync(out.fileno())
        let_go = None
        try:
            if ready is not None:
                let_go = ready()  # no forget runs from here until let_go(); raises if one ran since the key
            if self._forgotten_after(tenant, version):
                log.info("state snapshot of tenant %s at version %s not stored: a forget followed it", tenant,
                         version)
                return
            os.replace(tmp, path)
            _fsync_folder(self.folder)
            self.stored.append((tenant, version))
        except KeysForgotten:
            log.info("state snapshot of tenant %s at version %s not stored: a forget ran meanwhile", tenant, version)
        finally:
            if let_go is not None:
                let_go()
            tmp.unlink(missing_ok=True)

    def _forgotten_after(self, tenant: str, version: int) -> bool:
        topic = SubjectForgotten.stored_topic()
        with store_failures(f"reading the stream of tenant {tenant!r} after version {version}"):
            return any(s.topic == topic for s in self._log.recorder.select_events(stream_id(tenant), gt=version))

    # ------------------------------------------------------------------ forgetting, closing

    def discard(self, tenant: str) -> None:
        # (not waiting for a snapshot being stored: it is called after the forget is in the log, and a snapshot
        # taken before that is never stored)
        self.path(tenant).unlink(missing_ok=True)

    def close(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, []
        for future in pending:
            future.result()


def _split(data: bytes) -> tuple[dict[str, Any], bytes, bytes]:
    if not data.startswith(MAGIC):
        raise ValueError("not a noumena state snapshot")
    end = data.index(b"\n", len(MAGIC))
    raw_header = data[len(MAGIC):end]
    header = json.loads(raw_header)
    if not isinstance(header, dict):
        raise ValueError("bad header")
    return header, raw_header, data[end + 1:]


def _unpickle(plain: bytes) -> Any:
    """Unpickle with the cyclic garbage collector paused: the state is a million small objects, none garbage."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return pickle.loads(plain)  # noqa: S301  (our own file, authenticated by its AES-GCM tag when sealed)
    finally:
        if enabled:
            gc.enable()


def _fsync_folder(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
