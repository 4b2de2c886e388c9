"""Finding entities by name: an index of every entity's ref, label and aliases that answers a name with a ranked
list of the entities it may mean, in Chinese or Latin script, exactly or with a typo.

Names are compared in resolution's normalized form (domain/resolution.py `normalize`: width, case, spacing and
traditional/simplified insensitive). A match is one of, best first:

| match | when | score |
| --- | --- | --- |
| `ref` | the text is the ref itself (`person:wang`) | 1.0 |
| `exact` | the whole label or an alias (`王总`, `wang wei`) | 0.98 label, 0.96 alias |
| `ref` | the ref's identifier after its kind (`wang` for `person:wang`) | 0.95 |
| `prefix` | the start of a label, alias or identifier (`wang w`) | 0.80 to 0.90, more for a longer share |
| `word` | a whole word of a label or alias (`wei` in `Wang Wei`) | 0.75 |
| `word-prefix` | the start of such a word (`we`) | 0.65 to 0.70 |
| `contains` | every character of a Chinese query inside a name (`总` in `王总`) | 0.55 to 0.60 |
| `fuzzy` | a name or word one edit away (a typo: `Wnag`, `Wagn`, `Wangg`) | 0.45 to 0.50, whole names first |

Every lookup is a dictionary or a bisection (no pass over every name), so a query costs the same at 100,000
entities as at 100: typos are found through the one-character deletions of every word (each word is stored under
the words it becomes with one character left out; a typo of one edit shares one of them with the word).
"""

from __future__ import annotations

import bisect
import heapq
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from domain.resolution import normalize

_WORD_SPLIT = re.compile(r"[\s\-_.,·•'\"()（）【】\[\]、，。:：;；/@#&+]+")
_DIGIT = re.compile(r"[0-9]")
_EXACT = {"label": 0.98, "alias": 0.96, "ref": 0.95}
_TIER_ORDER = {"ref": 9, "exact": 8, "prefix": 7, "word": 6, "word-prefix": 5, "contains": 4, "fuzzy": 3,
               "fuzzy-words": 2}
_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
MIN_FUZZY_LENGTH = 4
"""Words shorter than this are never matched fuzzily: one edit away from a two-letter word is almost anything."""
MAX_FUZZY_LENGTH = 24
"""Longer names are matched by prefix and words only (their deletions would cost memory and find little)."""


@dataclass(frozen=True)
class NamedEntity:
    """What the index holds of one entity."""

    ref: str
    label: str
    aliases: tuple[str, ...] = ()
    hub: bool = False

    @property
    def kind(self) -> str:
        return self.ref.partition(":")[0]

    @property
    def identifier(self) -> str:
        return self.ref.partition(":")[2]


@dataclass(frozen=True)
class Found:
    """One entity a name may mean: how it matched (`match`), on which of its names (`matched`), and how well."""

    ref: str
    label: str
    kind: str
    score: float
    match: str
    matched: str
    aliases: tuple[str, ...] = ()
    hub: bool = False


def words_of(name: str, folded: dict[str, str] | None = None) -> list[str]:
    """The normalized words of a name: split at spaces and punctuation; a run of Chinese characters is one word.
    `folded` caches normalized parts (an index keeps its own, so it goes with the index)."""
    words = []
    for part in _WORD_SPLIT.split(name):
        if not part:
            continue
        word = folded.get(part) if folded is not None else None
        if word is None:
            word = normalize(part)
            if folded is not None:
                folded[part] = word
        if word:
            words.append(word)
    return words


def _deletions(word: str) -> set[str]:
    return {word[:i] + word[i + 1:] for i in range(len(word))}


def _edit_distance_at_most_one(a: str, b: str) -> bool:
    """True when `b` is `a` with at most one insertion, deletion, substitution or swap of neighbours."""
    if a == b:
        return True
    la, lb = len(a), len(b)
    if abs(la - lb) > 1:
        return False
    i = 0
    while i < min(la, lb) and a[i] == b[i]:
        i += 1
    if la == lb:
        if a[i + 1:] == b[i + 1:]:
            return True  # one substitution
        return i + 1 < la and a[i] == b[i + 1] and a[i + 1] == b[i] and a[i + 2:] == b[i + 2:]
    if la > lb:
        return a[i + 1:] == b[i:]
    return a[i:] == b[i + 1:]


class EntityNames:
    """A tenant's entities by name (see the module's docstring for how a name matches). Add an entity again to
    replace its names; remove it to stop finding it."""

    def __init__(self, entities: Iterable[NamedEntity] = ()) -> None:
        self._entities: dict[str, NamedEntity] = {}
        self._names: dict[str, dict[str, str]] = {}
        """Normalized whole name -> {ref: how it is named there (label, alias or ref)}."""
        self._sorted_names: list[str] = []
        self._words: dict[str, set[str]] = {}
        """Normalized word -> the refs with a name holding it."""
        self._sorted_words: list[str] = []
        self._deleted: dict[str, set[str]] = {}
        """A word with one character left out -> the words it came from (words of 3 to 24 letters, no digits)."""
        self._characters: dict[str, set[str]] = {}
        """A Chinese character -> the refs with a name holding it."""
        self._folded: dict[str, str] = {}
        """A name's part as written -> its normalized form (names repeat their parts: Wang, 总, ...)."""
        self._order: dict[str, tuple[int, str]] = {}
        """ref -> how it ranks among equals: shorter labels first (the name said is more of it), then by ref."""
        self._new_names: list[str] = []
        self._new_words: list[str] = []
        for entity in entities:
            self.add(entity)

    def __len__(self) -> int:
        return len(self._entities)

    def __contains__(self, ref: object) -> bool:
        return ref in self._entities

    def get(self, ref: str) -> NamedEntity | None:
        return self._entities.get(ref)

    def of_kind(self, kind: str) -> list[NamedEntity]:
        """Every entity of `kind` (refs `kind:...`), by ref."""
        prefix = f"{kind}:"
        return [self._entities[ref] for ref in sorted(r for r in self._entities if r.startswith(prefix))]

    def _names_of(self, entity: NamedEntity) -> list[tuple[str, str]]:
        """(normalized name, what it is) for every name of `entity`."""
        named = [(normalize(entity.label), "label")]
        named += [(normalize(alias), "alias") for alias in entity.aliases]
        named.append((normalize(entity.identifier), "ref"))
        return [(key, what) for key, what in named if key]

    def add(self, entity: NamedEntity) -> None:
        """Index `entity` under its names (replacing what was indexed for its ref before)."""
        if entity.ref in self._entities:
            self.remove(entity.ref)
        self._entities[entity.ref] = entity
        self._order[entity.ref] = (len(entity.label), entity.ref)
        for key, what in self._names_of(entity):
            if key not in self._names:
                self._names[key] = {}
                self._new_names.append(key)
            self._names[key].setdefault(entity.ref, what)
            for character in _CJK.findall(key):
                self._characters.setdefault(character, set()).add(entity.ref)
        for name in (entity.label, *entity.aliases, entity.identifier):
            for word in words_of(name, self._folded):
                if word not in self._words:
                    self._words[word] = set()
                    self._new_words.append(word)
                    if MIN_FUZZY_LENGTH <= len(word) <= MAX_FUZZY_LENGTH and not _DIGIT.search(word):
                        for deleted in _deletions(word):
                            self._deleted.setdefault(deleted, set()).add(word)
                self._words[word].add(entity.ref)

    def remove(self, ref: str) -> None:
        """Stop finding `ref` (the sorted lists and the deletions keep names no entity holds any more: every
        lookup checks a name is still held)."""
        entity = self._entities.pop(ref, None)
        if entity is None:
            return
        del self._order[ref]
        for key, _ in self._names_of(entity):
            refs = self._names.get(key)
            if refs is not None:
                refs.pop(ref, None)
                if not refs:
                    del self._names[key]
            for character in _CJK.findall(key):
                self._characters.get(character, set()).discard(ref)
        for name in (entity.label, *entity.aliases, entity.identifier):
            for word in words_of(name, self._folded):
                refs_with_word = self._words.get(word)
                if refs_with_word is not None:
                    refs_with_word.discard(ref)
                    if not refs_with_word:
                        del self._words[word]

    def _sort(self) -> None:
        """Bring the sorted lists up to date: a few new names are inserted, many sorted in with the rest."""
        for pending, kept in ((self._new_names, self._sorted_names), (self._new_words, self._sorted_words)):
            if len(pending) > 1000:
                kept.extend(pending)
                kept.sort()
            else:
                for key in pending:
                    bisect.insort(kept, key)
            pending.clear()

    def find(self, text: str, limit: int = 10, *, may_see: Callable[[str], bool] | None = None,
             widest: int = 200) -> tuple[list[Found], int]:
        """The `limit` entities `text` most likely names, best first, and how many it may name in all (a prefix
        counts at most `widest` names, and at most `widest` words for each word of the query). `may_see`, when
        given, decides per ref whether the caller may see it: the others are neither shown nor counted.

        The kinds of match are tiers whose scores never overlap, taken best first: only the tiers the top
        `limit` reach are ranked entity by entity, the rest are only counted (set operations)."""
        self._sort()
        stripped = text.strip()
        key = normalize(stripped)
        if not key:
            return [], 0
        tiers: list[tuple[str, set[str], Callable[[str], tuple[float, str, bool]]]] = []
        if stripped in self._entities:
            ident = normalize(self._entities[stripped].identifier)
            tiers.append(("ref", {stripped}, lambda ref: (1.0, ident, False)))
        exact = self._names.get(key, {})
        if exact:
            tiers.append(("exact", set(exact), lambda ref: (_EXACT[exact[ref]], key, False)))
        prefixed: dict[str, tuple[float, str]] = {}
        for name in self._prefixed(self._sorted_names, key, widest, self._names):
            if name != key:
                score = 0.80 + 0.10 * len(key) / len(name)
                for ref in self._names[name]:
                    if ref not in prefixed or prefixed[ref][0] < score:
                        prefixed[ref] = (score, name)
        if prefixed:
            tiers.append(("prefix", set(prefixed), lambda ref: (prefixed[ref][0], prefixed[ref][1], False)))
        tiers += self._word_tiers(stripped, widest)
        characters = _CJK.findall(key)
        if characters:
            refs = set(self._characters.get(characters[0], ()))
            for character in characters[1:]:
                refs &= self._characters.get(character, set())
            contains = 0.55 + 0.05 * min(1.0, len(characters) / 4)
            tiers.append(("contains", refs, lambda ref: (contains, "", False)))
        near = {n: self._names[n] for n in self._near(key) if n in self._names} if len(key) <= MAX_FUZZY_LENGTH \
            else {}
        if near:
            by_ref = {ref: name for name, refs in near.items() for ref in refs}
            tiers.append(("fuzzy", set(by_ref), lambda ref: (0.50, by_ref[ref], False)))
        tiers.sort(key=lambda tier: -_TIER_ORDER[tier[0]])
        return self._rank(tiers, limit, may_see)

    def _rank(self, tiers: list[tuple[str, set[str], Callable[[str], tuple[float, str, bool]]]], limit: int,
              may_see: Callable[[str], bool] | None) -> tuple[list[Found], int]:
        seen: set[str] = set()
        top: list[Found] = []
        order = self._order
        for match, refs, describe in tiers:
            fresh = refs - seen
            if may_see is not None:
                fresh = {ref for ref in fresh if may_see(ref)}
            seen |= fresh
            wanted = limit - len(top)
            if wanted <= 0 or not fresh:
                continue
            # (the scores of the first three tiers vary within the tier: every member is scored; the others have
            # one score each, so their best are the first in `order`)
            whole = len(fresh) <= wanted or match in ("ref", "exact", "prefix")
            scored = [(describe(ref), ref)
                      for ref in (fresh if whole else heapq.nsmallest(wanted, fresh, key=order.__getitem__))]
            scored.sort(key=lambda item: (-item[0][0], order[item[1]]))
            for (score, name, word), ref in scored[:wanted]:
                entity = self._entities[ref]
                top.append(Found(ref, entity.label, entity.kind, round(score, 4), match.replace("-words", ""),
                                 self._shown_name(entity, name, word), entity.aliases, entity.hub))
        return top, len(seen)

    def _word_tiers(self, text: str, widest: int
                    ) -> list[tuple[str, set[str], Callable[[str], tuple[float, str, bool]]]]:
        """Entities holding every word of the query: as a word of one of their names (`word`), some only as the
        start of one (`word-prefix`), some only one edit away from one (`fuzzy`, below a whole name's typo)."""
        words = words_of(text)
        if not words:
            return []
        # The words with the fewest refs first: the first word's matches are gathered, each further word only
        # narrows them (an intersection costs the smaller set, so a common word costs little after a rare one).
        per_word = sorted(((self._word_matches(word, widest), word) for word in dict.fromkeys(words)),
                          key=lambda item: item[0][0])
        _, exact, prefix_words, near_words = per_word[0][0]
        every = exact
        begun = set().union(*(self._words[o] for o in prefix_words)) - every
        close = set().union(*(self._words[o] for o in near_words)) - every - begun
        for (_, exact, prefix_words, near_words), _word in per_word[1:]:
            ahead = every | begun
            held = ahead & exact
            begun_now = held.union(*(ahead & self._words[o] for o in prefix_words))
            running = ahead | close
            near_now = (running & exact).union(*(running & self._words[o] for o in (*prefix_words, *near_words)))
            every = every & exact
            begun = begun_now - every
            close = near_now - every - begun
        first = per_word[0][1]

        def shown_word(ref: str) -> str:
            entity = self._entities[ref]
            for name in (entity.label, *entity.aliases, entity.identifier):
                for word in words_of(name):
                    if word == first or word.startswith(first) or _edit_distance_at_most_one(first, word):
                        return word
            return first

        return [("word", every, lambda ref: (0.75, first, True)),
                ("word-prefix", begun, lambda ref: (0.70, shown_word(ref), True)),
                ("fuzzy-words", close, lambda ref: (0.47, shown_word(ref), True))]

    def _word_matches(self, word: str, widest: int) -> tuple[int, set[str], list[str], list[str]]:
        """How many refs `word` may match in all, the refs holding it as a word, the words it begins and the words
        one edit away from it."""
        exact = self._words.get(word, set())
        prefix = [o for o in self._prefixed(self._sorted_words, word, widest, self._words) if o != word]
        near = [o for o in self._near(word) if o in self._words] if MIN_FUZZY_LENGTH <= len(word) <= \
            MAX_FUZZY_LENGTH and not _DIGIT.search(word) else []
        size = len(exact) + sum(len(self._words[o]) for o in prefix) + sum(len(self._words[o]) for o in near)
        return size, exact, prefix, near

    @staticmethod
    def _prefixed(sorted_keys: list[str], prefix: str, widest: int, held: Mapping[str, object]) -> list[str]:
        """The keys still `held` that start with `prefix`, at most `widest`, in order."""
        start = bisect.bisect_left(sorted_keys, prefix)
        out: list[str] = []
        for index in range(start, len(sorted_keys)):
            key = sorted_keys[index]
            if not key.startswith(prefix) or len(out) >= widest:
                break
            if key in held and (not out or out[-1] != key):
                out.append(key)
        return out

    def _near(self, probe: str) -> set[str]:
        """The names and words one edit away from `probe`: those sharing a one-deletion variant with it, that are
        one, or that it is one of."""
        if len(probe) < MIN_FUZZY_LENGTH:
            return set()
        deletions = _deletions(probe)
        candidates = {c for variant in (*deletions, probe) for c in self._deleted.get(variant, ())}
        candidates |= {d for d in deletions if d in self._names or d in self._words}
        return {c for c in candidates if c != probe and _edit_distance_at_most_one(probe, c)}

    @staticmethod
    def _shown_name(entity: NamedEntity, key: str, word: bool) -> str:
        """The name of `entity` as written that normalizes to `key` (or, for a word, that holds it; for a Chinese
        query's characters, its first Chinese name)."""
        names = (entity.label, *entity.aliases, entity.identifier)
        for name in names:
            if (key in words_of(name)) if word else (normalize(name) == key if key else _CJK.search(name)):
                return name
        return entity.label
