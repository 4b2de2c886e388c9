"""Entity resolution: which registered entity a mention means, in a fixed order, never merging silently.

1. the exact ref;
2. the normalized label or alias: Unicode NFKC (full-width Latin and digits become half-width), case folded,
   whitespace and common punctuation removed, traditional Chinese folded to simplified for common characters;
3. a fuzzy match of normalized strings with a similarity of at least FUZZY_THRESHOLD (difflib's ratio).

A unique exact or normalized match resolves. Anything else that comes close — several normalized matches,
or any fuzzy match — is ambiguous: the mention becomes a new entity marked `needs_review`, for a person to
merge or keep (`noumena entities review`).
"""

from __future__ import annotations

import difflib
import re
import unicodedata
from dataclasses import dataclass
from enum import StrEnum

from domain.ontology import Ontology

FUZZY_THRESHOLD = 0.85
"""Similarity (difflib ratio over normalized text) at or above which two names are 'probably the same'."""

# A small fold of traditional characters that appear in names and business words, to their simplified forms.
_TRADITIONAL = str.maketrans({
    "總": "总", "張": "张", "陳": "陈", "劉": "刘", "黃": "黄", "趙": "赵", "吳": "吴", "鄭": "郑", "馮": "冯",
    "蕭": "萧", "葉": "叶", "許": "许", "鍾": "钟", "楊": "杨", "羅": "罗", "韓": "韩", "孫": "孙",
    "經": "经", "師": "师", "務": "务", "單": "单", "報": "报", "價": "价", "約": "约",
    "戶": "户", "員": "员", "長": "长", "會": "会", "計": "计", "財": "财", "銷": "销",
    "億": "亿", "萬": "万", "東": "东", "門": "门", "開": "开", "關": "关", "電": "电", "話": "话", "號": "号",
})
_STRIP = re.compile(r"[\s\-_.,·•'\"()（）【】\[\]、，。:：;；/]+")


def normalize(text: str) -> str:
    """The comparison form of a name: width-, case-, space- and script-variant-insensitive."""
    folded = unicodedata.normalize("NFKC", text).casefold().translate(_TRADITIONAL)
    return _STRIP.sub("", folded)


class ResolvedBy(StrEnum):
    EXACT = "exact"
    LABEL = "label"
    NEW = "new"
    AMBIGUOUS = "ambiguous"


@dataclass(frozen=True)
class Resolution:
    mention_ref: str
    ref: str
    by: ResolvedBy
    candidates: tuple[str, ...] = ()

    @property
    def needs_review(self) -> bool:
        return self.by is ResolvedBy.AMBIGUOUS


class NameIndex:
    """Normalized label/alias -> refs, for one tenant's live (unmerged) entities."""

    def __init__(self, state: Ontology) -> None:
        self.by_name: dict[str, set[str]] = {}
        for entity in state.entities.values():
            if entity.merged_into is None:
                self.add(entity.ref, (entity.label, *entity.aliases))

    def add(self, ref: str, names: tuple[str, ...] | list[str]) -> None:
        for name in names:
            key = normalize(name)
            if key:
                self.by_name.setdefault(key, set()).add(ref)

    def exact(self, name: str) -> set[str]:
        return self.by_name.get(normalize(name), set())

    def fuzzy(self, name: str) -> set[str]:
        key = normalize(name)
        if not key:
            return set()
        matcher = difflib.SequenceMatcher(autojunk=False)
        matcher.set_seq2(key)
        found: set[str] = set()
        for other, refs in self.by_name.items():
            matcher.set_seq1(other)
            if matcher.real_quick_ratio() >= FUZZY_THRESHOLD and matcher.quick_ratio() >= FUZZY_THRESHOLD \
                    and matcher.ratio() >= FUZZY_THRESHOLD:
                found |= refs
        return found


def resolve(state: Ontology, names: NameIndex, mention_ref: str, label: str) -> Resolution:
    """Resolve one mention (the runtime's ref guess and the name it saw) against the tenant's entities."""
    entity = state.entities.get(mention_ref)
    if entity is not None:
        return Resolution(mention_ref, entity.merged_into or mention_ref, ResolvedBy.EXACT)
    by_label = names.exact(label)
    if len(by_label) == 1:
        return Resolution(mention_ref, next(iter(by_label)), ResolvedBy.LABEL)
    if len(by_label) > 1:
        return Resolution(mention_ref, mention_ref, ResolvedBy.AMBIGUOUS, tuple(sorted(by_label)))
    close = names.fuzzy(label)
    if close:
        return Resolution(mention_ref, mention_ref, ResolvedBy.AMBIGUOUS, tuple(sorted(close)))
    return Resolution(mention_ref, mention_ref, ResolvedBy.NEW)
