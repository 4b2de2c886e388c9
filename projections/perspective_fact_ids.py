"""A perspective index's fact ids: each fact's id as 32 ASCII bytes, a 64-bit hash of it kept sorted for lookups,
and the ids added since the last sort in a dict (a fold adds facts one by one; the sort is redone in bulk)."""

from __future__ import annotations

import hashlib

import numpy as np

from projections.perspective_columns import Column


def id_hash(fact_id: str) -> int:
    """A signed 64-bit hash of a fact id: the first 16 hex digits of our uuid ids, blake2b for anything else."""
    try:
        value = int(fact_id[:16], 16) if len(fact_id) >= 16 else None
    except ValueError:
        value = None
    if value is None:
        value = int.from_bytes(hashlib.blake2b(fact_id.encode(), digest_size=8).digest(), "big")
    return value - (1 << 64) if value >= (1 << 63) else value


class FactIds:
    """Fact id <-> the fact's int id (its row in the index's fact columns)."""

    def __init__(self, ids: Column | None = None, hashes: Column | None = None) -> None:
        self.ids = ids if ids is not None else Column("S32")
        self.hashes = hashes if hashes is not None else Column(np.int64)
        self._sorted_hashes = np.zeros(0, dtype=np.int64)
        self._sorted_order = np.zeros(0, dtype=np.int32)
        self._recent: dict[str, int] = {}
        """Fact ids added since the last sort (the sorted hashes cover the rest)."""

    @property
    def recent(self) -> int:
        """How many ids were added since the last sort."""
        return len(self._recent)

    def add(self, fact_id: str) -> int:
        """Append the next fact's id; returns its int id."""
        index = self.ids.append(fact_id.encode())
        self.hashes.append(id_hash(fact_id))
        self._recent[fact_id] = index
        return index

    def find(self, fact_id: str) -> int | None:
        """The int id of a fact id, or None."""
        recent = self._recent.get(fact_id)
        if recent is not None:
            return recent
        h = id_hash(fact_id)
        lo = int(np.searchsorted(self._sorted_hashes, h, "left"))
        hi = int(np.searchsorted(self._sorted_hashes, h, "right"))
        encoded = fact_id.encode()
        for k in range(lo, hi):
            candidate = int(self._sorted_order[k])
            if self.ids.data[candidate] == encoded:
                return candidate
        return None

    def find_many(self, ids: np.ndarray, hashes: np.ndarray) -> np.ndarray:
        """The int ids of many facts (-1 when unknown) by their ids (S32) and `id_hash`es, vectorized; only ids
        sorted already are found (call after `sort`)."""
        if not len(self._sorted_hashes):
            return np.full(len(ids), -1, dtype=np.int64)
        at = np.searchsorted(self._sorted_hashes, hashes)
        at[at >= len(self._sorted_hashes)] = 0
        found = self._sorted_order[at]
        ok = (self._sorted_hashes[at] == hashes) & (self.ids.view[found] == ids)
        return np.where(ok, found, -1).astype(np.int64)

    def at(self, index: int) -> str:
        """The id of the fact with int id `index`."""
        return bytes(self.ids.data[index]).decode()

    def sort(self) -> None:
        """Sort every id's hash (bulk, vectorized): lookups no longer need the dict of recent ids."""
        hashes = self.hashes.view
        sort = np.argsort(hashes, kind="stable").astype(np.int32)
        self._sorted_hashes, self._sorted_order = hashes[sort], sort
        self._recent = {}

    @property
    def nbytes(self) -> int:
        return self.ids.nbytes + self.hashes.nbytes + self._sorted_hashes.nbytes + self._sorted_order.nbytes
