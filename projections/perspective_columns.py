"""Storage for a perspective index: growable numpy columns and many short texts in one buffer."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


class Column:
    """A growable numpy column (amortized doubling): `view` is its filled part, `data` the whole buffer."""

    __slots__ = ("data", "size")

    def __init__(self, dtype: Any, capacity: int = 64, data: np.ndarray | None = None) -> None:
        if data is not None:
            self.data = np.ascontiguousarray(data, dtype=dtype)
            self.size = len(self.data)
        else:
            self.data = np.zeros(capacity, dtype=dtype)
            self.size = 0

    def append(self, value: Any) -> int:
        if self.size == len(self.data):
            grown = np.zeros(max(64, 2 * len(self.data)), dtype=self.data.dtype)
            grown[: self.size] = self.data[: self.size]
            self.data = grown
        self.data[self.size] = value
        self.size += 1
        return self.size - 1

    @property
    def view(self) -> np.ndarray:
        return self.data[: self.size]

    @property
    def nbytes(self) -> int:
        return int(self.data.nbytes)


class Texts:
    """Many short strings in one UTF-8 buffer: `get(i)` decodes the i-th, unless it was replaced (`replace`)."""

    __slots__ = ("blob", "offsets", "replaced")

    def __init__(self, texts: Sequence[str] | None = None) -> None:
        self.replaced: dict[int, str] = {}
        """The texts given by `replace`, by position: they are read from here, not from the buffer."""
        if texts:
            encoded = [t.encode() for t in texts]
            self.blob = bytearray(b"".join(encoded))
            offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
            np.cumsum([len(e) for e in encoded], out=offsets[1:])
            self.offsets = Column(np.int64, data=offsets)
        else:
            self.blob = bytearray()
            self.offsets = Column(np.int64)
            self.offsets.append(0)

    @classmethod
    def joined(cls, blob: bytes, lengths: np.ndarray) -> Texts:
        """The texts whose UTF-8 bytes, one after the other, are `blob`, the i-th `lengths[i]` bytes long."""
        texts = cls()
        texts.blob = bytearray(blob)
        offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        texts.offsets = Column(np.int64, data=offsets)
        return texts

    def append(self, text: str) -> None:
        self.blob += text.encode()
        self.offsets.append(len(self.blob))

    def get(self, index: int) -> str:
        if self.replaced:
            replaced = self.replaced.get(index)
            if replaced is not None:
                return replaced
        offsets = self.offsets.data
        return self.blob[int(offsets[index]): int(offsets[index + 1])].decode()

    def replace(self, texts: dict[int, str]) -> None:
        """Read `texts` (by position) from now on instead of what the buffer holds for them, and zero those bytes
        the first time one is replaced: a forgotten text leaves the process's memory, not only its answers, with
        no copy of the whole buffer (its other texts keep their places)."""
        fresh = np.array([position for position in texts if position not in self.replaced], dtype=np.int64)
        if len(fresh):
            offsets = self.offsets.data
            starts, lengths = offsets[fresh], offsets[fresh + 1] - offsets[fresh]
            total = int(lengths.sum())
            if total:
                shift = np.repeat(starts - (np.cumsum(lengths) - lengths), lengths)
                view = np.frombuffer(self.blob, dtype=np.uint8)  # (writable: the buffer is a bytearray)
                view[np.arange(total, dtype=np.int64) + shift] = 0
                del view  # (a buffer exported to numpy could not grow)
        self.replaced.update(texts)

    @property
    def nbytes(self) -> int:
        return len(self.blob) + self.offsets.nbytes
