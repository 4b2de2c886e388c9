"""Read-through maps and sets for a tenant's state loaded from an indexed snapshot (infra/adapters/state_snapshots.py).

The `Ontology` (domain/ontology.py) accepts any mutable mapping or set for its big indexes. A state loaded from a
snapshot gets these instead of dicts and sets. The snapshot holds each map in buckets (a key's bucket follows from
the key); a lookup that misses what is in memory reads that key's bucket from the snapshot file (unsealing and
unpickling it) and keeps its entries, so the bucket is never read again (a key it does not hold is absent); a
deletion is remembered (a tombstone), so a bucket read later never brings the entry back; iterating or counting a
whole map reads every bucket of it once. So a write that looks up a few keys costs a few buckets, whatever the size
of the state.

A snapshot of the state's changes writes only the entries that changed (`changed_entries`), over their buckets, without
reading them: the keys set or deleted, and those whose value was handed out by a lookup (the rules change values such
as a fact in place, so a value handed out may have changed; one of a type that cannot change in place, such as a fact
id, is not counted), every entry of a map whose values were handed out whole (`values()`, `items()`). `stored()`
starts the count again once those are stored: a state kept after its snapshot (the snapshotter's) then writes only
what changed since.

Loaded values are kept for the life of the state (never evicted): the rules change them in place and journal the
changes, so there is one object per key. Reads may run on other threads than the writer's (`OntologyService`'s
readers hold its lock, but tests and tools may not): a bucket is read and kept, and every change made, under one
lock per loaded state, so an entry read on one thread never replaces an object another thread has changed or
deleted.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, ItemsView, Iterator, KeysView, Mapping, MutableMapping, MutableSet, ValuesView
from typing import Any

from domain.ports import SnapshotDamaged

BucketOf = Callable[[int, object], int]
"""(map index, key) -> the bucket of the snapshot that holds the key, if it holds it."""
BucketReader = Callable[[int, int], dict[Any, Any]]
"""(map index, bucket) -> the entries the snapshot holds in that bucket."""
AllReader = Callable[[int], Iterator[tuple[int, dict[Any, Any]]]]
"""map index -> (bucket, its entries) for every bucket of that map."""
UNCHANGEABLE = frozenset({str, int, float, bool, bytes, type(None)})
"""Types of values that cannot change in place: handing one out leaves its bucket as it was."""


class RecordSource:
    """The snapshot a loaded state reads its buckets from, shared by that state's maps and sets."""

    def __init__(self, bucket_of: BucketOf, read: BucketReader, read_all: AllReader, name: str) -> None:
        self.bucket_of = bucket_of
        self._read = read
        self._read_all = read_all
        self.name = name
        self.lock = threading.RLock()
        self.loaded = 0
        """Entries read from the snapshot so far (tests and the benchmark read it)."""
        self.buckets_read = 0
        self.damaged: str | None = None
        """Why a bucket could not be read, once one could not (the state must then be folded afresh)."""
        self.base: Any = None
        """What the snapshot store needs to know about the file to write a state's changes over it."""

    def _check(self) -> None:
        if self.damaged is not None:
            raise SnapshotDamaged(f"state snapshot {self.name} is damaged ({self.damaged})")

    def read(self, index: int, bucket: int) -> dict[Any, Any]:
        self._check()
        try:
            entries = self._read(index, bucket)
        except SnapshotDamaged as error:
            self.damaged = str(error)
            raise
        self.loaded += len(entries)
        self.buckets_read += 1
        return entries

    def read_all(self, index: int) -> Iterator[tuple[int, dict[Any, Any]]]:
        self._check()
        try:
            for bucket, entries in self._read_all(index):
                self.loaded += len(entries)
                self.buckets_read += 1
                yield bucket, entries
        except SnapshotDamaged as error:
            self.damaged = str(error)
            raise


class _OnDemand:
    """What a map and a set read on demand share: what was read (`_mem`), what was deleted since the snapshot
    (`_gone`), which buckets were read; reading a key's bucket on a miss, every bucket the first time the whole is
    asked for (an iteration, a length), and the entries a snapshot of changes must write. `_take` adds one
    bucket's entries to `_mem`."""

    __slots__ = ("_mem", "_gone", "_buckets", "_changed", "_all_changed", "source", "index", "complete")
    _mem: Any

    def __init__(self, source: RecordSource, index: int) -> None:
        self._gone: set[Any] = set()
        """Keys deleted since the snapshot: never read from it again."""
        self._buckets: set[int] = set()
        """The snapshot's buckets read (every key of theirs not in memory is absent or deleted)."""
        self._changed: set[Any] = set()
        """Keys set, deleted or whose value was handed out since the last `stored()`."""
        self._all_changed = False
        """The values were handed out whole since the last `stored()`: any entry in memory may have changed."""
        self.source = source
        self.index = index
        self.complete = False
        """Every bucket of the snapshot is read (after an iteration or a count)."""

    def _take(self, entries: dict[Any, Any]) -> None:
        raise NotImplementedError

    def _read_bucket_of(self, key: object) -> None:
        """Read the bucket that would hold `key`, unless it is in memory, deleted, or its bucket was read. Under
        the source's lock."""
        if key not in self._mem and key not in self._gone:
            bucket = self.source.bucket_of(self.index, key)
            if bucket not in self._buckets:
                self._take(self.source.read(self.index, bucket))
                self._buckets.add(bucket)

    def load_all(self) -> None:
        if self.complete:
            return
        with self.source.lock:
            if self.complete:
                return
            for bucket, entries in self.source.read_all(self.index):
                if bucket not in self._buckets:  # (one read already: its entries in memory are as new or newer)
                    self._take(entries)
                    self._buckets.add(bucket)
            self.complete = True

    def __iter__(self) -> Iterator[Any]:
        self.load_all()
        return iter(self._mem)

    def __len__(self) -> int:
        self.load_all()
        return len(self._mem)

    def changed_entries(self) -> dict[int, tuple[dict[Any, Any], list[Any]]]:
        """What a snapshot of this state's changes must write over the last one stored (the snapshot it was
        loaded from, until `stored()`), by bucket: the entries set or handed out since, with their values now,
        and the keys deleted since. No bucket is read: the changes are written over the bucket, not with it.
        Under the source's lock."""
        bucket_of, index, mem = self.source.bucket_of, self.index, self._mem
        values = mem if isinstance(mem, dict) else dict.fromkeys(mem)
        changed = set(values) | self._changed if self._all_changed else self._changed
        buckets: dict[int, tuple[dict[Any, Any], list[Any]]] = {}
        for key in tuple(changed):  # (a copy: a lookup on another thread may add to it)
            entries, deleted = buckets.setdefault(bucket_of(index, key), ({}, []))
            if key in values:
                entries[key] = values[key]
            else:
                deleted.append(key)
        return buckets

    def stored(self) -> None:
        """The entries `changed_entries` gave are stored: from now on only changes made after count."""
        self._changed.clear()
        self._all_changed = False


class LazyMap(_OnDemand, MutableMapping[Any, Any]):
    """A dict whose entries are read from a snapshot on first use (see the module's docstring)."""

    __slots__ = ()

    def __init__(self, source: RecordSource, index: int) -> None:
        super().__init__(source, index)
        self._mem: dict[Any, Any] = {}

    def _take(self, entries: dict[Any, Any]) -> None:
        mem, gone = self._mem, self._gone
        for key, value in entries.items():
            if key not in mem and key not in gone:  # (one set since is newer, one deleted since is gone)
                mem[key] = value

    def _fetch(self, key: object) -> tuple[bool, Any]:
        if self.complete:
            return False, None
        with self.source.lock:
            self._read_bucket_of(key)
            mem = self._mem
            if key in mem:
                return True, mem[key]
            return False, None

    def __getitem__(self, key: object) -> Any:
        try:
            value = self._mem[key]
        except KeyError:
            found, value = self._fetch(key)
            if not found:
                raise KeyError(key) from None
        if type(value) not in UNCHANGEABLE:  # (handed out: the caller may change it in place)
            self._changed.add(key)
        return value

    def get(self, key: object, default: Any = None) -> Any:
        mem = self._mem
        if key in mem:
            value = mem[key]
        else:
            found, value = self._fetch(key)
            if not found:
                return default
        if type(value) not in UNCHANGEABLE:
            self._changed.add(key)
        return value

    def __contains__(self, key: object) -> bool:
        return key in self._mem or self._fetch(key)[0]

    def __setitem__(self, key: object, value: Any) -> None:
        with self.source.lock:
            self._mem[key] = value
            self._gone.discard(key)
            self._changed.add(key)

    def __delitem__(self, key: object) -> None:
        with self.source.lock:
            if key not in self:
                raise KeyError(key)
            del self._mem[key]
            self._gone.add(key)
            self._changed.add(key)

    def keys(self) -> KeysView[Any]:
        self.load_all()
        return self._mem.keys()

    def values(self) -> ValuesView[Any]:
        self.load_all()
        self._all_changed = True  # (handed out whole: any may be changed in place)
        return self._mem.values()

    def items(self) -> ItemsView[Any, Any]:
        self.load_all()
        self._all_changed = True
        return self._mem.items()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Mapping):
            return NotImplemented
        self.load_all()
        if isinstance(other, LazyMap):
            other.load_all()
            return self._mem == other._mem
        return self._mem == other

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"LazyMap({self._mem!r}, complete={self.complete})"

    def __reduce__(self) -> tuple[Any, ...]:
        self.load_all()
        return dict, (dict(self._mem),)  # (pickled whole, as the dict it stands for)

class LazySet(_OnDemand, MutableSet[Any]):
    """A set whose members are looked up in a snapshot on first use (see the module's docstring)."""

    __slots__ = ()

    def __init__(self, source: RecordSource, index: int) -> None:
        super().__init__(source, index)
        self._mem: set[Any] = set()

    def _take(self, entries: dict[Any, Any]) -> None:
        mem, gone = self._mem, self._gone
        mem.update(item for item in entries if item not in gone)

    def __contains__(self, item: object) -> bool:
        if item in self._mem:
            return True
        if self.complete:
            return False
        with self.source.lock:
            self._read_bucket_of(item)
            return item in self._mem

    def add(self, item: Any) -> None:
        with self.source.lock:
            self._mem.add(item)
            self._gone.discard(item)
            self._changed.add(item)

    def discard(self, item: Any) -> None:
        with self.source.lock:
            self._mem.discard(item)
            self._gone.add(item)
            self._changed.add(item)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, (set, frozenset, LazySet)):
            return NotImplemented
        self.load_all()
        return self._mem == (set(other) if isinstance(other, LazySet) else other)

    __hash__ = None  # type: ignore[assignment]

    @classmethod
    def _from_iterable(cls, it: Any) -> set[Any]:  # (what `|`, `&`, `-` of the mixin make: a plain set)
        return set(it)

    def __repr__(self) -> str:
        return f"LazySet({self._mem!r}, complete={self.complete})"

    def __reduce__(self) -> tuple[Any, ...]:
        return set, (set(self),)

