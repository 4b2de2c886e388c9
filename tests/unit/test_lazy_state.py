"""The read-through maps and sets of a state loaded from a snapshot (infra/adapters/lazy_state.py) behave as the dict
and the set they stand for, whatever mix of lookups, changes, deletions and whole reads runs on them, read each bucket
of the snapshot at most once, and their changes written over the snapshot make the same dict or set. The
snapshot here is a dict in buckets, read through the same reader interface the file uses."""

from __future__ import annotations

import pickle

from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from infra.adapters.lazy_state import LazyMap, LazySet, RecordSource
from tests.properties import examples

KEYS = st.sampled_from([f"k{i}" for i in range(8)] + [("s", "r", "o"), ("s", "r", "p")])
OPS = st.lists(st.tuples(st.sampled_from(["get", "in", "getitem", "set", "del", "pop", "len", "iter", "eq"]),
                         KEYS, st.integers(0, 5)), max_size=40)


BUCKETS = 3


def _bucket_of(index: int, key: object) -> int:
    return sum(repr(key).encode()) % BUCKETS


def _source(stored: dict, reads: list) -> RecordSource:  # type: ignore[type-arg]
    def read(index: int, bucket: int) -> dict:  # type: ignore[type-arg]
        reads.append(bucket)
        return {k: v for k, v in stored.items() if _bucket_of(index, k) == bucket}

    def read_all(index: int):  # type: ignore[no-untyped-def]
        for bucket in range(BUCKETS):
            yield bucket, {k: v for k, v in stored.items() if _bucket_of(index, k) == bucket}

    return RecordSource(_bucket_of, read, read_all, "a stored dict")


def _written_over(stored: dict, lazy: LazyMap | LazySet) -> dict:  # type: ignore[type-arg]
    """What the snapshot holds once the changes are written over it (as a snapshot of the changes does), each into
    the bucket it names."""
    written = dict(stored)
    for bucket, (entries, deleted) in lazy.changed_entries().items():
        assert all(_bucket_of(0, key) == bucket for key in [*entries, *deleted])
        written.update(entries)
        for key in deleted:
            written.pop(key, None)
    return written


@hsettings(max_examples=examples(1.0))
@given(stored=st.dictionaries(KEYS, st.integers(0, 5), max_size=8), ops=OPS)
def test_a_read_through_map_answers_every_operation_as_the_dict_it_stands_for(stored, ops):
    reads: list[object] = []
    plain, lazy = dict(stored), LazyMap(_source(stored, reads), 0)
    for op, key, value in ops:
        if op == "get":
            assert lazy.get(key) == plain.get(key)
        elif op == "in":
            assert (key in lazy) == (key in plain)
        elif op == "getitem":
            assert (lazy[key] if key in lazy else None) == plain.get(key)
        elif op == "set":
            lazy[key] = plain[key] = value
        elif op == "del":
            if key in plain:
                del plain[key], lazy[key]
            else:
                assert key not in lazy
        elif op == "pop":
            assert lazy.pop(key, None) == plain.pop(key, None)
        elif op == "len":
            assert len(lazy) == len(plain)
        elif op == "iter":
            assert sorted(map(repr, lazy)) == sorted(map(repr, plain))
            assert dict(lazy.items()) == plain
        else:
            assert lazy == plain and plain == lazy
    assert _written_over(stored, lazy) == plain  # (the changes written over the snapshot make the same dict)
    assert lazy == plain
    assert len(reads) == len(set(reads))  # (a bucket is read once at most...)
    assert pickle.loads(pickle.dumps(lazy)) == plain  # noqa: S301  (...and it pickles as the plain dict)


@hsettings(max_examples=examples(1.0))
@given(stored=st.sets(KEYS, max_size=8), ops=OPS)
def test_a_read_through_set_answers_every_operation_as_the_set_it_stands_for(stored, ops):
    reads: list[object] = []
    plain, lazy = set(stored), LazySet(_source(dict.fromkeys(stored), reads), 0)
    for op, key, _ in ops:
        if op in ("get", "in", "getitem"):
            assert (key in lazy) == (key in plain)
        elif op == "set":
            lazy.add(key)
            plain.add(key)
        elif op in ("del", "pop"):
            lazy.discard(key)
            plain.discard(key)
        elif op == "len":
            assert len(lazy) == len(plain)
        elif op == "iter":
            assert sorted(map(repr, lazy)) == sorted(map(repr, plain))
        else:
            assert lazy == plain and plain == lazy
    assert set(_written_over(dict.fromkeys(stored), lazy)) == plain
    assert lazy == plain and (lazy | {"x"}) == plain | {"x"}


CHANGES = st.lists(st.tuples(st.sampled_from(["get", "in", "set", "del", "append", "store", "items"]), KEYS,
                             st.integers(0, 5)), max_size=50)


def _copy(value: object) -> object:
    return pickle.loads(pickle.dumps(value))  # noqa: S301  (what storing a bucket and reading it back makes)


@hsettings(max_examples=examples(1.0))
@given(stored=st.dictionaries(KEYS, st.one_of(st.integers(0, 5), st.lists(st.integers(0, 5), max_size=2)),
                              max_size=8), ops=CHANGES)
def test_snapshots_of_the_changes_since_the_last_make_the_same_dict_when_values_change_in_place(stored, ops):
    """A kept state snapshots again and again (`store`: its changes written over what is stored, then `stored()`),
    and values handed out by a lookup change in place (`append`), as the rules change a fact's fields with no
    write to the map. What is stored always ends as the dict; a snapshot writes to every bucket changed since the
    last, and to no other but those a changeable value was handed out of."""
    on_disk: dict = _copy(stored)  # type: ignore[assignment, type-arg]
    plain, lazy = _copy(stored), LazyMap(_source(_copy(stored), []), 0)  # type: ignore[arg-type]
    changed_since: set[int] = set()
    handed_since: set[int] = set()

    def store() -> None:
        nonlocal on_disk
        changes = lazy.changed_entries()
        assert changed_since <= set(changes) <= changed_since | handed_since, (changes, changed_since)
        on_disk = _copy(_written_over(on_disk, lazy))  # type: ignore[assignment]
        lazy.stored()
        changed_since.clear()
        handed_since.clear()
        assert on_disk == plain

    for op, key, value in ops:
        bucket = _bucket_of(0, key)
        if op in ("get", "append"):
            held = lazy.get(key)
            assert held == plain.get(key)
            if isinstance(held, list):
                handed_since.add(bucket)
                if op == "append":
                    held.append(value)
                    plain[key].append(value)  # type: ignore[attr-defined]
                    changed_since.add(bucket)
        elif op == "in":
            assert (key in lazy) == (key in plain)
        elif op == "set":
            lazy[key] = plain[key] = value
            changed_since.add(bucket)
        elif op == "del" and key in plain:
            del plain[key], lazy[key]
            changed_since.add(bucket)
        elif op == "items":
            assert dict(lazy.items()) == plain
            handed_since.update(range(BUCKETS))
        elif op == "store":
            store()
    store()
