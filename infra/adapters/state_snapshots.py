"""Snapshots of each tenant's folded state (the `Ontology` the rules decide on), one file per tenant in the home.

A process that starts folds only the events after its snapshot instead of the whole log, and reads the state's
big maps on demand: a snapshot is an indexed file (SQLite), `<home>/state/<tenant>.snapshot`, with

- a `meta` table: the header (JSON: the format, a fingerprint of the code that folds events, the tenant, the stream
  version the state is at, a digest of the stored event at that version, the name of the data key that seals the
  file, the file's lineage (a random id its deltas and merges keep) and its layout: the salt and the number
  of buckets of each map) and the core (the state's small
  fields, sealed with the header as associated data, so a changed header does not open);
- a `records` table: each big map or set of the state (`LAZY`) spread over buckets by a salted digest of the key
  (about 8 entries each when written whole), one row per bucket: the pickled entries sealed with AES-256-GCM under
  the tenant's snapshot key, with the lineage and the row's id (map and bucket) as associated data (a bucket moved
  to another place does not open). No ref, relation or value is readable in the file; every bucket is written,
  empty or not.

After it come delta files, `<home>/state/<tenant>.snapshot.<after>-<version>.delta`, of the same tables: the
header (the snapshot's lineage, key and layout, its own version and anchor, `after`, the version the state that
wrote it was loaded at or last stored at, and `partial`), the core at its version, and, for every bucket that state
changed since, one record: the entries it set since (as they are at its version) and the keys it deleted, to be
written over the bucket (`partial`; deltas of earlier versions held every bucket changed whole, and still read). So
a delta brings any state of the lineage at a version from its `after` to its own to its version: a load follows a
chain from the snapshot's version, each time taking the delta that reaches furthest among those that apply there
(`_chain`), and reads a bucket from the last file of the chain that holds it whole (the snapshot, or an older
delta), with the changes the deltas after that one hold for it written over it in order.

Loading checks the header as before (format, code, tenant, the log's event at that version, the key), each delta's
against it, and unseals only the cores: the maps are `infra.adapters.lazy_state` read-through maps over the open
files, so the first write after a restart reads the few buckets it looks keys up in, whatever the size of the
state. A delta that does not fit is skipped with a warning (the chain ends before it, more of the log is folded).
A bucket found damaged later raises `SnapshotDamaged`; the service then folds the whole log.

The snapshot key comes from the key store (`domain.forgetting.state_snapshot_key`): every forget in the tenant
deletes it, so no copy of a snapshot taken before the forget opens again, in this home or any other. Without a key
store (`NOUMENA_ENCRYPT_CONTENT=false`) records are plain pickles (the log is plain too).

Snapshots are taken in two places. While a process writes, its snapshots are taken by a process of its own, the
snapshotter (infra/runtime/state_snapshotter.py, started on the first `request`), which folds the log from the last
snapshot and keeps the state it folded from one request to the next (`take_from_log`), so the writers never
serialize a state and each request folds only what was written since the last; when a process stops, it snapshots
its states in place (`save`, on a background thread). Writes are atomic (a temporary file, fsync, `os.replace`,
fsync of the folder). A state folded from the log is written whole; a state loaded from a snapshot writes only the
entries it changed (`lazy_state`: a key set or deleted, or a changeable value handed out) since it was loaded or last
stored, as a delta, without reading the buckets they fall in; the snapshotter, once the deltas are many or large,
merges them and its own changes into a copy of the snapshot instead (each bucket changed read, changed and sealed
again once: `MERGE_AFTER`, `MERGE_SHARE`), and deletes those it holds. A
snapshot is stored only while the key store holds forgets off and no forget of the tenant is in the log after the
snapshot's version, so a process that took a snapshot just before another process's forget never stores it (the
snapshotter takes that fence before it reads the log, so a forget while it folds stops it too).
Anything unusable (missing, other format or code, corrupt, not of this log, key deleted) is ignored with a warning
(an info line for a key deleted by a forget) and the caller folds the whole log.
"""

from __future__ import annotations

import array
import copy
import fcntl
import glob
import hashlib
import json
import logging
import os
import pickle
import shutil
import sqlite3
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import closing, contextmanager
from dataclasses import fields
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from domain.forgetting import SubjectForgotten, state_snapshot_key
from domain.ontology import Ontology
from domain.ports import KeysForgotten, KeyStore, SnapshotDamaged
from infra.adapters.eventlog import store_failures
from infra.adapters.lazy_state import LazyMap, LazySet, RecordSource
from infra.adapters.mapper import stream_id

if TYPE_CHECKING:
    from infra.runtime.state_snapshotter import SnapshotterProcess

log = logging.getLogger(__name__)

FORMAT = 3
SQLITE_MAGIC = b"SQLite format 3\x00"
OLD_MAGIC = b"noumena-state\n"
"""How format 1 (the whole state as one sealed pickle) began."""
FOLDING_CODE = ("domain", "infra/adapters/mapper.py", "infra/adapters/event_json.py")
"""What decides how events fold into state: the domain's modules (events, upcasters, the ontology) and how
stored events are read. A change to any of them makes older snapshots unusable."""
LAZY = ("entities", "facts", "current_by_key", "functional_current", "slots", "generations", "facts_by_scope",
        "sessions", "compactions", "person_scopes", "entity_links", "linked_people", "served_by", "recall_uses",
        "seen_event_ids")
"""The state's maps (and, last, its set) stored one record per entry and read on demand."""
SETS = frozenset({"seen_event_ids"})
CORE = ("tenant", "exists", "version", "relation_types", "forgotten_people", "recall_count")
"""The state's small fields, stored (and read) together."""
assert {f.name for f in fields(Ontology)} == {*LAZY, *CORE, "_journal", "_trim_on_commit"}, \
    "every field of the Ontology must be stored: add it to LAZY or CORE"
_SCHEMA = ("CREATE TABLE meta (name TEXT PRIMARY KEY, value BLOB NOT NULL)",
           "CREATE TABLE records (id INTEGER PRIMARY KEY, value BLOB NOT NULL)")
BUCKET_BITS = 40
"""A record's id: its map's index shifted by this many bits, plus its bucket."""
DELTA = ".delta"
"""A delta file's name ends so: `<tenant>.snapshot.<after>-<version>.delta`."""
MERGE_AFTER = 32
"""The snapshotter merges the deltas into the snapshot once there would be this many (a load opens each; a delta
of changes is small, and the snapshotter writes one as often as the writers ask, so a merge, which copies the
snapshot and rewrites every bucket the deltas change while no request is answered, comes once per many)..."""
MERGE_SHARE = 2
"""...or once they hold half the snapshot's size (a merge copies the snapshot: done rarely, a snapshot beside
bulk writes lags by what is written meanwhile)."""
PER_BUCKET = 8
"""About how many entries a bucket holds when a snapshot is written whole (unpickled together, so the classes and
time zones its entries share are read once). A lookup unpickles its whole bucket, and a tail folded after a restart
looks up keys spread over the whole state, most in buckets no other lookup reads: the fewer entries a bucket holds,
the fewer are unpickled for nothing (and the more rows the file has; docs/benchmarks.md)."""


@cache
def code_fingerprint() -> str:
    """A digest of the code that folds events (and the Python version, which pickles)."""
    root = Path(__file__).resolve().parents[2]
    digest = hashlib.sha256(f"{sys.version_info[:2]}".encode())
    for name in FOLDING_CODE:
        path = root / name
        for file in sorted(path.glob("*.py")) if path.is_dir() else [path]:
            digest.update(file.name.encode() + b"\0" + file.read_bytes() + b"\0")
    return digest.hexdigest()[:32]


class _Unusable(Exception):
    """Why a snapshot file is not used."""


class _Replaced(Exception):
    """The snapshot file was replaced while it was being opened."""


class _Seal:
    """Sealing of records under one data key (or none: plain)."""

    def __init__(self, key: bytes | None) -> None:
        self._aead = AESGCM(key) if key is not None else None

    def seal(self, plain: bytes, aad: bytes) -> bytes:
        if self._aead is None:
            return plain
        nonce = os.urandom(12)
        return nonce + self._aead.encrypt(nonce, plain, aad)

    def open(self, body: bytes, aad: bytes) -> bytes:
        if self._aead is None:
            return body
        return self._aead.decrypt(body[:12], body[12:], aad)


class _Layout:
    """How a snapshot's entries are spread over buckets: by a salted digest of the key, into a number of buckets
    per map fixed when the snapshot is written whole (its successors written over it keep it)."""

    def __init__(self, salt: bytes, buckets: list[int]) -> None:
        self.salt = salt
        self.buckets = buckets

    @classmethod
    def for_sizes(cls, sizes: list[int]) -> _Layout:
        return cls(os.urandom(16), [1 << (size // PER_BUCKET).bit_length() for size in sizes])

    def bucket_of(self, index: int, key: object) -> int:
        digest = hashlib.blake2b(repr(key).encode("utf-8", "surrogatepass"), key=self.salt, digest_size=8).digest()
        return int.from_bytes(digest, "little") % self.buckets[index]


def _record_aad(lineage: str, record_id: int) -> bytes:
    return lineage.encode() + b"\0" + record_id.to_bytes(8, "little")


OnStored = Callable[[str, int, str], None]
"""(tenant, version, kind): what the snapshotter process reports it stored."""


class FileStateSnapshots:
    """Implements domain.ports.StateSnapshots with an indexed file per tenant in `<home>/state/`, and the delta
    files written after it."""

    def __init__(self, home: Path, log_: Any, keys: KeyStore | None, every: int,
                 snapshotter: Callable[[OnStored], SnapshotterProcess] | None = None) -> None:
        """`snapshotter`: makes the handle on a snapshotter process (infra/runtime/state_snapshotter.py) that opens
        the same log, keys and home, given what to call when it stored a snapshot (the composition root builds it);
        None (an in-memory log, which another process cannot read, or the snapshotter itself): `request` does
        nothing."""
        self.folder = Path(home) / "state"
        self.every = every
        self._log = log_
        self._keys = keys
        self._snapshotter = snapshotter(self._stored_by_snapshotter) if snapshotter is not None and every > 0 \
            else None
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="noumena-state-snapshot")
        self._pending: list[Future[None]] = []
        self._lock = threading.Lock()
        self._closed = False
        self._kept: dict[str, tuple[Any, RecordSource]] = {}
        """In the snapshotter process: by tenant, the service holding the state its last snapshot of changes was
        taken of, and the snapshot that state reads from (`take_from_log`)."""
        self.stored: list[tuple[str, int, str]] = []
        """(tenant, version, "whole" or "changes") of each snapshot this process stored, or its snapshotter did,
        in order (tests and the benchmark read it)."""
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
            for _ in range(3):
                try:
                    return self._load(tenant, path)
                except _Replaced:
                    continue  # (another process stored a newer one as it was opened: open that one)
            raise _Unusable("replaced again and again as it was opened")
        except FileNotFoundError:
            return None
        except _Unusable as why:
            log.warning("state snapshot %s ignored (%s): folding the whole log", path, why)
        except (sqlite3.Error, OSError, ValueError, KeyError, TypeError, InvalidTag, pickle.UnpicklingError,
                EOFError, AttributeError, ImportError) as error:
            log.warning("state snapshot %s ignored (corrupt: %s): folding the whole log", path,
                        type(error).__name__ + (f": {error}" if str(error) else ""))
        return None

    def _load(self, tenant: str, path: Path) -> Ontology | None:
        with open(path, "rb") as file:
            head = file.read(len(SQLITE_MAGIC))
            before = os.fstat(file.fileno())
        if head != SQLITE_MAGIC:
            raise _Unusable(f"format 1 (the whole state pickled), this version reads {FORMAT}"
                            if head.startswith(OLD_MAGIC) else "not a snapshot")
        db = _connect_read_only(path)
        deltas: list[_Delta] = []
        try:
            # (the connection keeps the file it opened, also once a newer snapshot replaces it: a state loaded
            # from it reads consistent records for as long as it lives)
            pages = _pages(db)
            now = os.stat(path)
            if (now.st_ino, now.st_size) != (before.st_ino, before.st_size):
                raise _Replaced
            if pages != before.st_size:
                raise _Unusable(f"truncated or grown: {before.st_size} bytes, its pages make {pages}")
            meta = dict(db.execute("SELECT name, value FROM meta"))
            raw_header = meta["header"]
            header = json.loads(raw_header)
            if not isinstance(header, dict):
                raise ValueError("bad header")
            why = self._unusable(tenant, header)
            if why is not None:
                raise _Unusable(why)
            key = None
            if self._keys is not None:
                key = self._keys.get(header["key"])
                if key is None:  # its key is gone: a forget in the tenant since it was taken
                    log.info("state snapshot %s was taken before a forget (its key is deleted): folding the whole "
                             "log", path)
                    db.close()
                    self.discard(tenant)
                    return None
            seal = _Seal(key)
            core = _unpickle(seal.open(meta["core"], _raw(raw_header)))
            deltas = self._chain(tenant, header, seal)
            version = deltas[-1].version if deltas else header["version"]
            if deltas:
                core = deltas[-1].core
            if not isinstance(core, dict) or core.get("tenant") != tenant or core.get("version") != version:
                raise _Unusable(f"it does not hold tenant {tenant} at version {version}")
        except BaseException:
            db.close()
            for delta in deltas:
                delta.db.close()
            raise
        source = _FileSource(db, deltas, seal, header, version, str(path))
        state = Ontology(**core, **{name: (LazySet if name in SETS else LazyMap)(source.records, index)
                                    for index, name in enumerate(LAZY)})
        return state

    def _delta_files(self, tenant: str) -> list[tuple[int, int, Path]]:
        """(after, version, path) of each of the tenant's delta files: `<tenant>.snapshot.<after>-<version>.delta`,
        the buckets a state loaded at version `after` changed up to `version`."""
        prefix = f"{tenant}.snapshot."
        found = []
        for file in self.folder.glob(f"{glob.escape(prefix)}*{DELTA}") if self.folder.is_dir() else ():
            after, dash, version = file.name[len(prefix):-len(DELTA)].partition("-")
            if dash and after.isdigit() and version.isdigit():
                found.append((int(after), int(version), file))
        return found

    def _delta_path(self, tenant: str, after: int, version: int) -> Path:
        return self.folder / f"{tenant}.snapshot.{after}-{version}{DELTA}"

    def _chain(self, tenant: str, header: dict[str, Any], seal: _Seal, upto: int | None = None) -> list[_Delta]:
        """The deltas that bring the snapshot `header` forward (to `upto` at most), opened, in order. A delta
        written by a state loaded at version `after` holds every bucket changed since, whole, as at its version: it
        applies over any state of the lineage at a version from `after` to its own. So from the snapshot's version,
        each step takes the delta that reaches furthest among those that apply there. A delta that does not open
        (torn, of another lineage, key or log) is skipped with a warning; one deleted meanwhile (merged into a newer
        snapshot than the one open here) is skipped."""
        reached = header["version"]
        left = [d for d in self._delta_files(tenant) if d[1] > reached and (upto is None or d[1] <= upto)]
        chain: list[_Delta] = []
        try:
            while usable := [d for d in left if d[0] <= reached < d[1]]:
                after, version, file = best = max(usable, key=lambda d: d[1])
                left.remove(best)
                try:
                    chain.append(self._open_delta(tenant, header, seal, after, version, file))
                except FileNotFoundError:
                    continue
                except (_Unusable, sqlite3.Error, OSError, ValueError, KeyError, TypeError, InvalidTag,
                        pickle.UnpicklingError, EOFError, AttributeError, ImportError) as why:
                    log.warning("state snapshot delta %s ignored (%s)", file,
                                why if isinstance(why, _Unusable) else
                                f"corrupt: {type(why).__name__}" + (f": {why}" if str(why) else ""))
                    continue
                reached = version
            return chain
        except BaseException:
            for delta in chain:
                delta.db.close()
            raise

    def _open_delta(self, tenant: str, header: dict[str, Any], seal: _Seal, after: int, version: int,
                    file: Path) -> _Delta:
        size = os.stat(file).st_size
        db = _connect_read_only(file)
        try:
            pages = _pages(db)
            if pages != size:
                raise _Unusable(f"truncated or grown: {size} bytes, its pages make {pages}")
            meta = dict(db.execute("SELECT name, value FROM meta"))
            raw_header = meta["header"]
            own = json.loads(raw_header)
            if not isinstance(own, dict):
                raise ValueError("bad header")
            for name in ("format", "code", "tenant", "key", "lineage", "salt", "buckets"):
                if own.get(name) != header.get(name):
                    raise _Unusable(f"its {name} is not the snapshot's")
            if own.get("after") != after or own.get("version") != version:
                raise _Unusable("its header and its name disagree")
            if self._anchor(tenant, version) != own.get("anchor"):
                raise _Unusable(f"the log's event {version} of the tenant is not the one it was taken at")
            core = _unpickle(seal.open(meta["core"], _raw(raw_header)))
            # (the ids of its records, sealed with its header: reading them from the table would read the whole
            # file, hundreds of MB for a delta of a long bulk write)
            ids = set(array.array("q", seal.open(meta["ids"], _raw(raw_header) + b"\0ids")))
        except BaseException:
            db.close()
            raise
        return _Delta(db, version, core, ids, own.get("partial") is True)

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
        if not isinstance(header.get("lineage"), str) or not isinstance(header.get("salt"), str):
            return "no lineage or salt"
        buckets = header.get("buckets")
        if not isinstance(buckets, list) or len(buckets) != len(LAZY) or \
                not all(isinstance(n, int) and 0 < n < 1 << BUCKET_BITS for n in buckets):
            return f"bad buckets {buckets!r}"
        if self._anchor(tenant, version) != header.get("anchor"):
            return f"the log's event {version} of the tenant is not the one it was taken at (another log?)"
        if (header.get("key") is None) != (self._keys is None):
            return "sealed" if self._keys is None else "not sealed, and content is sealed"
        return None

    def _anchor(self, tenant: str, version: int) -> str | None:
        """A digest of the stored event at `version` of the tenant's stream (None if there is none)."""
        with store_failures(f"reading version {version} of tenant {tenant!r}"):
            stored = list(self._log.recorder.select_events(stream_id(tenant), gt=version - 1, lte=version))
        if not stored:
            return None
        return hashlib.sha256(stored[0].topic.encode() + b"\0" + bytes(stored[0].state)).hexdigest()

    def damaged(self, state: Ontology) -> bool:
        source = getattr(state.facts, "source", None)
        return isinstance(source, RecordSource) and source.damaged is not None

    @staticmethod
    def reads(state: Ontology) -> tuple[int, int] | None:
        """How many buckets, and entries in them, a state loaded from a snapshot has read from it (None: it was
        not loaded from one)."""
        source = getattr(state.facts, "source", None)
        return (source.buckets_read, source.loaded) if isinstance(source, RecordSource) else None

    # ------------------------------------------------------------------ saving

    def save(self, tenant: str, state: Ontology) -> None:
        # (now: the caller holds the state still; pickled values are what the file will hold)
        serialized = self._serialized(state)
        with self._lock:
            if self._closed:  # (a snapshot is only a faster start: none is taken after close)
                log.info("state snapshot of tenant %s at version %s not stored: the store is closed", tenant,
                         state.version)
                return
            self._pending = [f for f in self._pending if not f.done()]
            self._pending.append(self._writer.submit(self._store, tenant, state.version, *serialized))

    def request(self, tenant: str) -> None:
        if self._snapshotter is not None:
            self._snapshotter.request(tenant)

    def wrote(self) -> None:
        if self._snapshotter is not None:
            self._snapshotter.wrote()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the snapshotter has answered every request so far (tests, benchmarks); False on timeout."""
        return self._snapshotter.wait(timeout) if self._snapshotter is not None else True

    def settle(self, versions: dict[str, int], timeout: float) -> set[str]:
        # (only a snapshotter that runs and has answered is asked: starting one, its imports, would cost a
        # short-lived process, a CLI call, more than the few events it leaves to fold; and only for a tenant with a
        # snapshot on disk: without one it would fold the whole log, which this process holds folded already)
        deadline = time.monotonic() + timeout
        stored = {tenant: self.stored_version(tenant) for tenant in versions}
        given_up = {tenant for tenant, version in stored.items() if version == 0}
        while True:
            behind = {tenant for tenant, version in versions.items()
                      if tenant not in given_up and stored[tenant] < version}
            left = deadline - time.monotonic()
            if not behind or self._snapshotter is None or not self._snapshotter.answering or left <= 0:
                return behind | given_up
            for tenant in sorted(behind):
                self._snapshotter.request(tenant, at_once=True)
            self.wait(left)
            for tenant in behind:  # (a request that stored nothing is not made again: the stop snapshots in place)
                before, stored[tenant] = stored[tenant], self.stored_version(tenant)
                if stored[tenant] == before:
                    given_up.add(tenant)

    def fold_elsewhere(self, tenant: str, version: int, timeout: float,
                       stopping: Callable[[], bool] = lambda: False) -> Ontology | None:
        # (asked at once, whatever the writes do, and waited for in short slices so that a closing store is
        # noticed; a forget deleted the tenant's snapshots, so the snapshotter folds its whole log)
        snapshotter = self._snapshotter
        if snapshotter is None:
            return None
        deadline = time.monotonic() + timeout
        snapshotter.request(tenant, at_once=True)
        while not snapshotter.wait(min(0.25, max(0.0, deadline - time.monotonic())), (tenant,)):
            if stopping() or time.monotonic() >= deadline:
                return None
        return self.load(tenant) if self.stored_version(tenant) >= version else None

    @property
    def snapshotter(self) -> SnapshotterProcess | None:
        """The writing process's handle on its snapshotter (tests set its `pause` and `latest`)."""
        return self._snapshotter

    def _stored_by_snapshotter(self, tenant: str, version: int, kind: str) -> None:
        self.stored.append((tenant, version, kind))

    def stored_version(self, tenant: str) -> int:
        """The version a state loaded now would be at (the snapshot's, brought forward by its deltas); 0 if none."""
        path = self.path(tenant)
        try:
            header = _header_of(path)
            if not isinstance(header, dict) or self._unusable(tenant, header) is not None:
                return 0
            key = self._keys.get(header["key"]) if self._keys is not None else None
            if self._keys is not None and key is None:
                return 0
            chain = self._chain(tenant, header, _Seal(key))
            for delta in chain:
                delta.db.close()
            return chain[-1].version if chain else int(header["version"])
        except Exception:  # noqa: BLE001  (missing, or not a snapshot: none to count on)
            return 0

    def take_from_log(self, tenant: str) -> tuple[int, str] | None:
        """In the snapshotter process: fold the tenant's log from its snapshot (or from the start, if it has no
        usable one) and store the result: only the buckets the events since changed, as a delta after that
        snapshot or merged into a copy of it (or the whole state). Returns (version, "whole", "changes" or
        "merged") if it stored one; None if the snapshot is current, or another snapshotter is taking this
        tenant's, or a forget ran meanwhile.

        The state is kept from one request to the next once a snapshot of its changes is stored: the next request
        folds only the events after it, reading no bucket it holds already, and writes only the buckets those
        events changed, as a delta after the last (so the cost of a request follows the events written since, not
        the size of the state or how far it is from the snapshot it was loaded from). It is dropped, and the next
        request loads the files again, whenever it may no longer be the fold of the log or its changes would not
        follow the files on disk: a forget ran (the snapshot key it was sealed under is gone: every forget deletes
        it), the files are of another lineage or no longer lead to its version, nothing was stored, or the state
        was written whole (a state folded from the log, not read from a snapshot).

        The key store's forget fence is taken first and the cached keys dropped before the log is read: the
        content a forget that ran before deleted the keys of folds as forgotten (no key is read from a cache that
        predates it), and a forget that runs while the log is folded makes the fence refuse the snapshot. A
        snapshot is a fold of the log up to its version (the same fold `OntologyService` makes: from the snapshot,
        or afresh when the events after it hold a forget)."""
        from domain.application.ontology_service import OntologyService

        self.folder.mkdir(parents=True, exist_ok=True)
        with _exclusively(self.folder / f".{tenant}.lock") as mine:
            if not mine:
                log.info("state snapshot of tenant %s not taken here: another snapshotter is taking it", tenant)
                return None
            fence = self._keys.keys_pending([state_snapshot_key(tenant)]) if self._keys is not None else None
            kept = self._kept.pop(tenant, None)
            if kept is not None and not self._leads_to(tenant, kept[1].base, fence):
                kept = None
            self._log.mapper.evict()
            service = kept[0] if kept is not None else OntologyService(
                self._log, clock=lambda: datetime.now(UTC), seal_content=self._keys is not None, snapshots=self)
            state = service.ontology(tenant)
            source = _source_of(state)
            if not state.version:
                return None
            if source is not None and source.base.version == state.version:
                self._kept[tenant] = (service, source)
                return None  # (the fence holds nothing until its `ready` is called)
            try:
                serialized = self._serialized(state)
            except SnapshotDamaged:  # (a bucket it had to copy does not read: that snapshot goes, the next is whole)
                self.discard(tenant)
                return None
            kind = self._store_now(tenant, state.version, *serialized, fence=fence, merge=True)
            if kind is None:
                return None
            if source is not None:  # (a state folded from the log, written whole: the next request loads it)
                for name in LAZY:
                    getattr(state, name).stored()
                source.base = source.base.at(state.version)
                self._kept[tenant] = (service, source)
            return state.version, kind

    def _leads_to(self, tenant: str, base: _Base, fence: Fence | None) -> bool:
        """Whether a state kept since its last snapshot (`base`) may still write its changes after it: no forget
        ran since (the snapshot key is the one it was sealed under), and the snapshot on disk is of its lineage
        and reaches its version, itself or through a delta that ends there."""
        if fence is not None and fence[0][state_snapshot_key(tenant).key_id][0] != base.key_id:
            return False
        try:
            header = _header_of(self.path(tenant))
        except (OSError, sqlite3.Error, ValueError, TypeError):
            return False
        if not isinstance(header, dict) or (header.get("lineage"), header.get("key")) != (base.lineage, base.key_id):
            return False
        version = header.get("version")
        return isinstance(version, int) and (version >= base.version or
                                             any(end == base.version for _, end, _ in self._delta_files(tenant)))

    def _serialized(self, state: Ontology) -> tuple[bytes, list[tuple[int, bytes]], _Base | None, str, _Layout]:
        """What a snapshot of `state` stores: its core, its rows (every bucket whole; or, for a state loaded from
        a snapshot, its changes since, by bucket: the entries set, each value pickled on its own so that a read
        unpickles only the latest of a key's values, and the keys deleted), that snapshot, the lineage and the
        layout."""
        dumps, protocol = pickle.dumps, pickle.HIGHEST_PROTOCOL
        core = dumps({name: getattr(state, name) for name in CORE}, protocol=protocol)
        maps = [getattr(state, name) for name in LAZY]
        source = _source_of(state)
        rows: list[tuple[int, bytes]] = []
        if source is not None:
            base: _Base | None = source.base
            with source.lock:  # (readers on other threads may be reading buckets meanwhile)
                for index, held in enumerate(maps):
                    rows += [((index << BUCKET_BITS) | bucket,
                              dumps(({key: dumps(value, protocol=protocol) for key, value in entries.items()},
                                     deleted), protocol=protocol))
                             for bucket, (entries, deleted) in sorted(held.changed_entries().items())]
            lineage, layout = base.lineage, base.layout  # type: ignore[union-attr]
        else:
            base = None
            lineage, layout = uuid.uuid4().hex, _Layout.for_sizes([len(m) for m in maps])
            for index, held in enumerate(maps):
                buckets: list[dict[Any, Any]] = [{} for _ in range(layout.buckets[index])]
                bucket_of = layout.bucket_of
                if isinstance(held, (set, LazySet)):
                    for key in held:
                        buckets[bucket_of(index, key)][key] = None
                else:
                    for key, value in held.items():
                        buckets[bucket_of(index, key)][key] = value
                rows += [((index << BUCKET_BITS) | bucket, dumps(entries, protocol=protocol))
                         for bucket, entries in enumerate(buckets)]
        return core, rows, base, lineage, layout

    def _store(self, tenant: str, version: int, core: bytes, rows: list[tuple[int, bytes]], base: _Base | None,
               lineage: str, layout: _Layout) -> None:
        try:
            self._store_now(tenant, version, core, rows, base, lineage, layout)
        except Exception:  # a snapshot is an optimisation: never let it break the process
            log.exception("state snapshot of tenant %s at version %s not stored", tenant, version)

    def _store_now(self, tenant: str, version: int, core: bytes, rows: list[tuple[int, bytes]], base: _Base | None,
                   lineage: str, layout: _Layout, fence: Fence | None = None, merge: bool = False) -> str | None:
        """Store a snapshot; return "whole", "changes" (a delta file) or "merged" (the deltas and these changes
        written into the snapshot, when `merge` and the deltas have grown) if it is in place. `fence`: the
        snapshot key and the forget fence, taken before the state was folded (by default, now)."""
        ready = None
        key_id, key = None, None
        if self._keys is not None:
            sealings, ready = fence or self._keys.keys_pending([state_snapshot_key(tenant)])
            key_id, key = sealings[state_snapshot_key(tenant).key_id]
        elif fence is not None:
            raise ValueError("a fence without a key store")
        path = self.path(tenant)
        if base is not None and base.key_id != key_id:
            log.info("state snapshot of tenant %s at version %s not stored: its key changed since the state was "
                     "loaded (a forget)", tenant, version)
            return None
        seal = _Seal(key)
        kind, target, chain = "whole", path, []
        if base is not None:
            try:
                on_disk = _header_of(path)
            except (FileNotFoundError, sqlite3.OperationalError):
                log.info("state snapshot of tenant %s at version %s not stored: the one it was loaded from is "
                         "gone (discarded after a forget)", tenant, version)
                return None
            why = base.why_not_over(on_disk, version)
            if why is not None:
                log.info("state snapshot of tenant %s at version %s not stored: %s", tenant, version, why)
                return None
            kind, target = "changes", self._delta_path(tenant, base.version, version)
            if merge and self._deltas_grown(tenant, on_disk["version"], path):
                chain = self._chain(tenant, on_disk, seal, upto=version)
                if (chain[-1].version if chain else on_disk["version"]) < base.version:
                    for delta in chain:
                        delta.db.close()
                    log.info("state snapshot of tenant %s at version %s not stored: the files on disk no longer "
                             "lead to version %s, which its changes follow", tenant, version, base.version)
                    return None
                kind, target = "merged", path  # (these changes apply over the chain's end: see `_chain`)
        header: dict[str, Any] = {"format": FORMAT, "code": code_fingerprint(), "tenant": tenant,
                                  "version": version, "anchor": self._anchor(tenant, version), "key": key_id,
                                  "lineage": lineage, "salt": layout.salt.hex(), "buckets": layout.buckets}
        if kind == "changes":
            header["after"] = base.version  # type: ignore[union-attr]
            header["partial"] = True  # (its rows are changes over a bucket: see `_FileSource`)
        raw_header = json.dumps(header, sort_keys=True)
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))
        let_go = None
        try:
            if kind == "merged":
                try:
                    shutil.copyfile(path, tmp)
                except FileNotFoundError:
                    log.info("state snapshot of tenant %s at version %s not stored: the one it was loaded from is "
                             "gone (discarded after a forget)", tenant, version)
                    return None
            db = sqlite3.connect(tmp, isolation_level=None)
            try:
                db.execute("PRAGMA journal_mode=OFF")  # (a temporary: fsynced below, then moved in place whole)
                db.execute("PRAGMA synchronous=OFF")
                db.execute("BEGIN")
                if kind == "merged":
                    copied = json.loads(dict(db.execute("SELECT name, value FROM meta"))["header"])
                    if (copied.get("lineage"), copied.get("version")) != (on_disk["lineage"], on_disk["version"]):
                        log.info("state snapshot of tenant %s at version %s not stored: another process replaced "
                                 "the snapshot meanwhile", tenant, version)
                        return None
                    _merge_into(db, chain, rows, seal, lineage)
                else:
                    for statement in _SCHEMA:
                        db.execute(statement)
                    db.executemany("INSERT OR REPLACE INTO records VALUES (?, ?)",
                                   ((record_id, seal.seal(plain, _record_aad(lineage, record_id)))
                                    for record_id, plain in rows))
                meta = [("header", raw_header), ("core", seal.seal(core, raw_header.encode()))]
                if kind == "changes":
                    ids = array.array("q", sorted(record_id for record_id, _ in rows)).tobytes()
                    meta.append(("ids", seal.seal(ids, raw_header.encode() + b"\0ids")))
                db.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", meta)
                db.execute("COMMIT")
            finally:
                db.close()
            del rows
            with open(tmp, "rb+") as out:
                os.fsync(out.fileno())
            if ready is not None:
                let_go = ready()  # no forget runs from here until let_go(); raises if one ran since the key
            if self._forgotten_after(tenant, version):
                log.info("state snapshot of tenant %s at version %s not stored: a forget followed it", tenant,
                         version)
                return None
            os.replace(tmp, target)
            if let_go is not None:  # in place: a forget may run (and discard it) from here; the rest is durability
                let_go()
                let_go = None
            _fsync_folder(self.folder)
            if kind != "changes":
                self._prune(tenant, lineage, version)
            self.stored.append((tenant, version, kind))
            return kind
        except KeysForgotten:
            log.info("state snapshot of tenant %s at version %s not stored: a forget ran meanwhile", tenant, version)
            return None
        finally:
            if let_go is not None:
                let_go()
            tmp.unlink(missing_ok=True)
            for delta in chain:
                delta.db.close()

    def _deltas_grown(self, tenant: str, version: int, path: Path) -> bool:
        """Whether the deltas after the snapshot at `version` are many or large enough to be merged into it (a
        load opens each, and reads a bucket from the newest that holds it)."""
        sizes = []
        for _, delta_version, file in self._delta_files(tenant):
            if delta_version > version:
                try:
                    sizes.append(file.stat().st_size)
                except FileNotFoundError:
                    continue
        try:
            whole = path.stat().st_size
        except FileNotFoundError:
            return False
        return len(sizes) >= MERGE_AFTER - 1 or sum(sizes) * MERGE_SHARE >= whole

    def _prune(self, tenant: str, lineage: str, version: int) -> None:
        """Delete the deltas a snapshot of this lineage at `version` makes useless: those up to its version, and
        those of another lineage."""
        for _, delta_version, file in self._delta_files(tenant):
            try:
                if delta_version <= version or _header_of(file).get("lineage") != lineage:
                    file.unlink(missing_ok=True)
            except (sqlite3.Error, OSError, ValueError, KeyError, TypeError):
                file.unlink(missing_ok=True)

    def _forgotten_after(self, tenant: str, version: int) -> bool:
        topic = SubjectForgotten.stored_topic()
        with store_failures(f"reading the stream of tenant {tenant!r} after version {version}"):
            return any(s.topic == topic for s in self._log.recorder.select_events(stream_id(tenant), gt=version))

    # ------------------------------------------------------------------ forgetting, closing

    def discard(self, tenant: str) -> None:
        # (not waiting for a snapshot being stored: it is called after the forget is in the log, and a snapshot
        # taken before that is never stored)
        self.path(tenant).unlink(missing_ok=True)
        for *_, file in self._delta_files(tenant):
            file.unlink(missing_ok=True)

    def close(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, []
            self._closed = True
        if self._snapshotter is not None:
            self._snapshotter.close()  # (the process ends with the store)
            self._remove_stale_temporaries()  # (one it was writing when it was killed)
        for future in pending:
            future.result()
        self._writer.shutdown(wait=True)  # (its thread ends with the store)


class _Base:
    """What a loaded state came from (its snapshot, brought forward to `version` by deltas): what a delta of its
    changes is written after."""

    def __init__(self, header: dict[str, Any], version: int) -> None:
        self.lineage: str = header["lineage"]
        self.version = version
        self.key_id: str | None = header["key"]
        self.layout = _Layout(bytes.fromhex(header["salt"]), list(header["buckets"]))

    def at(self, version: int) -> _Base:
        """This base brought forward to `version`: a state's changes up to it are stored after it."""
        moved = copy.copy(self)
        moved.version = version
        return moved

    def why_not_over(self, header: dict[str, Any], version: int) -> str | None:
        """Why the changes of a state loaded from this base, now at `version`, cannot follow the snapshot in place
        (`header`; None: they can). They hold every bucket changed since the base's version: they bring any state
        of the lineage at a version from the base's to ours to ours, so they are of use unless the snapshot in place
        is of another lineage or already past ours."""
        if header.get("lineage") != self.lineage or header.get("key") != self.key_id:
            return "another process replaced the snapshot since the state was loaded"
        if not isinstance(header.get("version"), int) or header["version"] > version:
            return f"the snapshot in place is at version {header.get('version')}, after {version}"
        return None


class _Delta:
    """A delta file open for reading: the state's core at its version, and which records it holds."""

    def __init__(self, db: sqlite3.Connection, version: int, core: Any, ids: set[int], partial: bool) -> None:
        self.db = db
        self.version = version
        self.core = core
        self.ids = ids
        self.partial = partial
        """Its records are changes over the bucket (entries set, keys deleted), not the bucket whole."""


class _FileSource:
    """Reads a loaded state's buckets from its open snapshot file and deltas: a bucket from the last file of the
    chain that holds it whole (a delta of whole buckets, else the snapshot), with the changes the deltas after
    that one hold for it written over it in order."""

    def __init__(self, db: sqlite3.Connection, deltas: list[_Delta], seal: _Seal, header: dict[str, Any],
                 version: int, name: str) -> None:
        self._db = db
        self._deltas = deltas
        self._seal = seal
        self._lineage = header["lineage"]
        base = _Base(header, version)
        self._buckets = base.layout.buckets
        self.records = RecordSource(base.layout.bucket_of, self._read, self._read_all, name)
        self.records.base = base

    def _plain(self, record_id: int, body: bytes) -> Any:
        return pickle.loads(self._seal.open(body, _record_aad(self._lineage, record_id)))  # noqa: S301

    def _damaged(self, index: int, error: BaseException) -> SnapshotDamaged:
        return SnapshotDamaged(f"a bucket of {LAZY[index]} does not read: "
                               f"{type(error).__name__}{f': {error}' if str(error) else ''}")

    def _holders(self, record_id: int) -> list[sqlite3.Connection]:
        """The files to read a record from, in order: the last of the chain that holds it whole (a delta of whole
        buckets, else the snapshot), then each delta after it that holds changes to it."""
        changes = []
        for delta in reversed(self._deltas):
            if record_id in delta.ids:
                if not delta.partial:
                    return [delta.db, *reversed(changes)]
                changes.append(delta.db)
        return [self._db, *reversed(changes)]

    def _read(self, index: int, bucket: int) -> dict[Any, Any]:
        record_id = (index << BUCKET_BITS) | bucket
        query = "SELECT value FROM records WHERE id = ?", (record_id,)
        try:
            holders = self._holders(record_id)
            bodies = [row[0] for row in (db.execute(*query).fetchone() for db in holders) if row is not None]
            if len(bodies) != len(holders):
                raise KeyError("missing")
            return _overlaid(self._plain(record_id, bodies[0]), [self._plain(record_id, b) for b in bodies[1:]],
                             LAZY[index])
        except _READ_ERRORS as error:
            raise self._damaged(index, error) from error

    def _read_all(self, index: int) -> Iterator[tuple[int, dict[Any, Any]]]:
        first = index << BUCKET_BITS
        query = "SELECT id, value FROM records WHERE id >= ? AND id < ?", (first, first + self._buckets[index])
        try:
            bodies = dict(self._db.execute(*query).fetchall())
            if len(bodies) != self._buckets[index]:
                raise KeyError(f"{self._buckets[index] - len(bodies)} buckets missing")
            changes: dict[int, list[bytes]] = {}
            for delta in self._deltas:
                rows = delta.db.execute(*query).fetchall()
                if delta.partial:
                    for record_id, body in rows:
                        changes.setdefault(record_id, []).append(body)
                else:
                    bodies.update(rows)
                    for record_id, _ in rows:
                        changes.pop(record_id, None)
        except _READ_ERRORS as error:
            raise self._damaged(index, error) from error
        mask = (1 << BUCKET_BITS) - 1
        for record_id, body in bodies.items():
            try:
                entries = _overlaid(self._plain(record_id, body),
                                    [self._plain(record_id, b) for b in changes.get(record_id, ())], LAZY[index])
            except _READ_ERRORS as error:
                raise self._damaged(index, error) from error
            yield record_id & mask, entries


def _overlaid(entries: Any, changes: list[Any], name: str) -> dict[Any, Any]:
    """A bucket's entries with changes written over them in order (each: the entries set, their values pickled one
    by one, and the keys deleted). Read from the last change back, so a value a later change replaced is never
    unpickled (a value such as a person's linked entities changes with nearly every delta)."""
    if not isinstance(entries, dict):
        raise TypeError(f"a bucket of {name} holds a {type(entries).__name__}")
    settled: set[Any] = set()
    for change in reversed(changes):
        if not (isinstance(change, tuple) and len(change) == 2 and isinstance(change[0], dict)):
            raise TypeError(f"a change to a bucket of {name} holds a {type(change).__name__}")
        values, deleted = change
        for key in deleted:
            if key not in settled:
                settled.add(key)
                entries.pop(key, None)
        for key, value in values.items():
            if key not in settled:
                settled.add(key)
                entries[key] = _unpickle(value)
    return entries


def _merge_into(db: sqlite3.Connection, chain: list[_Delta], rows: list[tuple[int, bytes]], seal: _Seal,
                lineage: str) -> None:
    """Write a chain of deltas, then `rows` (changes, plain), into `db`, a copy of the snapshot they follow: a
    bucket a delta holds whole replaces the one before; the changes to a bucket are written over it, and it is
    sealed again (each bucket read and written once, whatever the number of changes to it)."""
    insert = "INSERT OR REPLACE INTO records VALUES (?, ?)"
    changes: dict[int, list[bytes]] = {}
    for delta in chain:
        found = delta.db.execute("SELECT id, value FROM records").fetchall()
        if not delta.partial:
            db.executemany(insert, found)
            for record_id, _ in found:
                changes.pop(record_id, None)
            continue
        for record_id, body in found:
            changes.setdefault(record_id, []).append(seal.open(body, _record_aad(lineage, record_id)))
    for record_id, plain in rows:
        changes.setdefault(record_id, []).append(plain)
    dumps, protocol, name = pickle.dumps, pickle.HIGHEST_PROTOCOL, "the snapshot"
    for record_id, plains in changes.items():
        aad = _record_aad(lineage, record_id)
        row = db.execute("SELECT value FROM records WHERE id = ?", (record_id,)).fetchone()
        if row is None:
            raise KeyError(f"record {record_id} missing from {name}")
        entries = _overlaid(_unpickle(seal.open(row[0], aad)), [_unpickle(plain) for plain in plains], name)
        db.execute(insert, (record_id, seal.seal(dumps(entries, protocol=protocol), aad)))


_READ_ERRORS = (sqlite3.Error, InvalidTag, pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError,
                ImportError, IndexError, KeyError)
"""What reading a damaged bucket raises."""


Fence = tuple[dict[str, tuple[str, bytes]], Callable[[], Callable[[], None]]]
"""What `KeyStore.keys_pending` hands out: the sealings by key id, and `ready` (the forget fence)."""


@contextmanager
def _exclusively(path: Path) -> Iterator[bool]:
    """Whether this process holds the lock file `path` (an advisory lock, let go when the block ends or the
    process dies); False at once if another process holds it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


def _source_of(state: Ontology) -> RecordSource | None:
    """The snapshot every big map of `state` reads from (None: a state folded from the log, or one with a map
    made afresh)."""
    source = getattr(state.facts, "source", None)
    if isinstance(source, RecordSource) and all(getattr(getattr(state, name), "source", None) is source
                                                for name in LAZY):
        return source
    return None


def _connect_read_only(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{quote(str(path))}?mode=ro&immutable=1", uri=True, check_same_thread=False)


def _pages(db: sqlite3.Connection) -> int:
    """The bytes a file's pages make (a file of another size is torn, or grown by something else)."""
    return int(db.execute("PRAGMA page_count").fetchone()[0] * db.execute("PRAGMA page_size").fetchone()[0])


def _header_of(path: Path) -> Any:
    """The header of a snapshot or delta file (raises if there is none)."""
    with closing(sqlite3.connect(f"file:{quote(str(path))}?mode=ro", uri=True)) as db:
        return json.loads(db.execute("SELECT value FROM meta WHERE name = 'header'").fetchone()[0])


def _raw(header: str | bytes) -> bytes:
    return header.encode() if isinstance(header, str) else header


def _unpickle(plain: bytes) -> Any:
    return pickle.loads(plain)  # noqa: S301  (our own file, authenticated by its AES-GCM tag when sealed)


def _fsync_folder(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
