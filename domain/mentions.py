"""Which registered entities a piece of text mentions, by label and alias, with entity resolution's `normalize()`.

The text is folded exactly as names are (NFKC, case fold, traditional to simplified), then split where
`normalize()` would strip whitespace or punctuation. A normalized name matches a normalized stretch of the text:

- anywhere inside Chinese (or other unspaced) text: `李总` is found in `给李总再出一版报价`;
- on word edges where Latin letters or digits meet: `Li` is found in `Li, again` but not in `delivery`, and
  `contract v3` is found in `the Contract V3 draft`.

Leftmost-longest, non-overlapping: at each position the longest name wins and the scan continues after it.
A name shorter than `MIN_NAME_CHARS` normalized characters (a lone `王`) is too ambiguous to look for; a name
shared by several entities is reported as ambiguous and focuses on none of them.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, field

from domain.ontology import Ontology
from domain.resolution import _STRIP, _TRADITIONAL, normalize

MIN_NAME_CHARS = 2
"""Normalized names shorter than this are never looked for in text (one CJK character names half the country)."""

FIND_CACHE_SIZE = 4_096
"""How many texts' answers are kept (recent turns repeat with every request to the same session)."""

_WORDISH = re.compile(r"[0-9a-z]")


def _latin(char: str) -> bool:
    return char.isascii() and bool(_WORDISH.match(char))


@dataclass(frozen=True, slots=True)
class Mention:
    """A stretch of text that names one entity (`ref`), or several (`ambiguous`, then `ref` is empty)."""

    ref: str
    name: str
    """The normalized name that matched."""
    ambiguous: tuple[str, ...] = ()


@dataclass
class MentionIndex:
    """Normalized label/alias -> refs of one tenant's live (unmerged) entities, with the lengths present."""

    by_name: dict[str, set[str]] = field(default_factory=dict)
    names_of: dict[str, tuple[str, ...]] = field(default_factory=dict)
    lengths: dict[int, int] = field(default_factory=dict)
    """normalized length -> how many names have it (the scan only tries lengths that exist)."""
    _found: dict[tuple[str, int], list[Mention]] = field(default_factory=dict, repr=False)
    """Answers already given (the same recent turns come back with every request); emptied by any change."""

    @classmethod
    def from_ontology(cls, state: Ontology) -> MentionIndex:
        index = cls()
        for entity in state.entities.values():
            if entity.merged_into is None:
                index.set_names(entity.ref, (entity.label, *entity.aliases))
        return index

    def set_names(self, ref: str, names: Iterable[str]) -> None:
        """Give `ref` exactly these names (replacing the ones it had)."""
        self.remove(ref)
        self._found.clear()
        keys = tuple(dict.fromkeys(k for k in (normalize(n) for n in names) if len(k) >= MIN_NAME_CHARS))
        self.names_of[ref] = keys
        for key in keys:
            refs = self.by_name.setdefault(key, set())
            refs.add(ref)
            if len(refs) == 1:
                self.lengths[len(key)] = self.lengths.get(len(key), 0) + 1

    def remove(self, ref: str) -> None:
        self._found.clear()
        for key in self.names_of.pop(ref, ()):
            refs = self.by_name.get(key)
            if refs is None:
                continue
            refs.discard(ref)
            if not refs:
                del self.by_name[key]
                self.lengths[len(key)] -= 1
                if not self.lengths[len(key)]:
                    del self.lengths[len(key)]

    def find(self, text: str, max_chars: int = 4_000) -> list[Mention]:
        """The mentions in `text` (its first `max_chars` characters), in order of appearance."""
        known = self._found.get((text, max_chars))
        if known is not None:
            return list(known)
        found = self._scan(text, max_chars)
        if len(self._found) >= FIND_CACHE_SIZE:
            self._found.clear()
        self._found[(text, max_chars)] = found
        return list(found)

    def _scan(self, text: str, max_chars: int) -> list[Mention]:
        folded = unicodedata.normalize("NFKC", text[:max_chars]).casefold().translate(_TRADITIONAL)
        pieces = [p for p in _STRIP.split(folded) if p]
        joined = "".join(pieces)
        edges = {0}
        at = 0
        for piece in pieces:
            at += len(piece)
            edges.add(at)
        lengths = sorted(self.lengths, reverse=True)
        found: list[Mention] = []
        i, n = 0, len(joined)
        while i < n:
            hit = None
            for length in lengths:
                j = i + length
                if j > n:
                    continue
                refs = self.by_name.get(joined[i:j])
                if refs is None or not self._on_edges(joined, i, j, edges):
                    continue
                hit = (j, joined[i:j], refs)
                break
            if hit is None:
                i += 1
                continue
            j, name, refs = hit
            if len(refs) == 1:
                found.append(Mention(ref=next(iter(refs)), name=name))
            else:
                found.append(Mention(ref="", name=name, ambiguous=tuple(sorted(refs))))
            i = j
        return found

    @staticmethod
    def _on_edges(joined: str, i: int, j: int, edges: set[int]) -> bool:
        """Latin letters and digits may not be cut in the middle of a word; other scripts may."""
        if i > 0 and i not in edges and _latin(joined[i - 1]) and _latin(joined[i]):
            return False
        return not (j < len(joined) and j not in edges and _latin(joined[j - 1]) and _latin(joined[j]))
