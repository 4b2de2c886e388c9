"""Counting a context's tokens as `domain.activation.estimate_tokens` does, line by line (cached per line,
so the same turns and facts are not measured again on every request). Fitting sums each line's estimate plus
its newline, which is never less than the estimate of the joined text, so a block never exceeds its budget."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import lru_cache

from domain.activation import is_wide
from domain.context.model import BlockLine


@lru_cache(maxsize=65_536)
def _wide(text: str) -> int:
    """How many characters `estimate_tokens` counts as one token each (cached: the same turns and facts come back
    with every request)."""
    return 0 if text.isascii() else sum(1 for char in text if ord(char) >= 0x2E80 and is_wide(char))


def forget_cached() -> None:
    """Drop the cached lines (they are the text of served contexts: after a forget, perhaps the forgotten's)."""
    _wide.cache_clear()


def line_tokens(text: str) -> int:
    """`estimate_tokens` of one line and its newline."""
    wide = _wide(text)
    return wide + -(-(len(text) + 1 - wide) // 4)


def text_tokens(lines: Sequence[str]) -> int:
    """`estimate_tokens("\n".join(lines))`, from the cached per-line counts (wide characters add up)."""
    wide = sum(_wide(line) for line in lines)
    length = sum(len(line) for line in lines) + max(0, len(lines) - 1)
    return wide + -(-(length - wide) // 4)


def lines_tokens(lines: Iterable[BlockLine]) -> int:
    """What these lines cost in the block: each line's tokens and its newline."""
    return sum(line_tokens(line.text) for line in lines)
