"""How text becomes search terms: English words stemmed with stopwords removed, Chinese as character bigrams.

Mixed text is normal here (`李总 prefers monthly settlement`), so a text is cut into runs of Han/kana characters and
runs of everything else:
- other runs: Unicode words (`\\w+`), case-folded; English stopwords (bm25s's list) dropped; the rest stemmed with
  the Snowball English stemmer (PyStemmer, what bm25s uses). Numbers stay as they are.
- Han/kana runs: every character bigram plus every character (`李总` -> `李总`, `李`, `总`), so a two-character
  word matches exactly and a one-character query still finds something. No dictionary to load, nothing to tune
  per domain; a word segmenter (jieba) was the alternative: docs/search.md says how they compare.

`FUNCTION_WORDS`: the words that make a request a question (interrogatives, auxiliaries and modals, pronouns,
hedges: "what would she likely enjoy"; stemmed, `likely` is `like`, so that word goes too). Documents keep them;
a search leaves them out of its BM25 query when the request has other words (`SearchParameters.function_weight`):
matched, they rank every turn that asks something.
"""

from __future__ import annotations

import re
from functools import lru_cache

import Stemmer
from bm25s.stopwords import STOPWORDS_EN

_CJK = r"\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_RUNS = re.compile(rf"([{_CJK}]+)|([^\W_]+)", re.UNICODE)
_STOPWORDS = frozenset(STOPWORDS_EN) | frozenset({"s", "t"})
FUNCTION_WORDS = (  # (kept as terms: in a statement they may be the point; in a question they are its form)
    "what when where which who whom whose why how "
    "do does did done doing has have had having am are was were been being can could shall should may might must "
    "would will likely possibly probably perhaps "
    "i me my mine we us our you your yours he him his she her hers they them their its "
    "about any some other another else each every more most much many than so very just also too ever "
    "based kind sort type way thing things"
).split()


_HAN_OR_KANA = re.compile(rf"[{_CJK}]")


def is_han_or_kana(term: str) -> bool:
    """A term cut from a Han/kana run (a character or a character bigram): no word of its own, so a bigram across
    two words is in no document without saying anything is missing."""
    return bool(_HAN_OR_KANA.search(term))


class Analyzer:
    """Turns text into terms (strings). One per index; the stemmer keeps a cache of its own."""

    def __init__(self) -> None:
        self.forget_cached()
        self.function_terms = frozenset(self.terms(" ".join(FUNCTION_WORDS)))

    def forget_cached(self) -> None:
        """Drop the words seen so far (the stemmer's cache and ours hold every word of every text and query
        analyzed): after a forget, they may be the forgotten person's."""
        self._stemmer = Stemmer.Stemmer("english")
        self._stem = lru_cache(maxsize=200_000)(self._stemmer.stemWord)

    def terms(self, text: str) -> list[str]:
        out: list[str] = []
        for cjk, word in _RUNS.findall(text):
            if cjk:
                out.extend(cjk)
                out.extend(cjk[i:i + 2] for i in range(len(cjk) - 1))
            else:
                word = word.casefold()
                if word in _STOPWORDS:
                    continue
                out.append(word if word.isdigit() else self._stem(word))
        return out

    def without(self, text: str, terms: set[str]) -> str:
        """`text` without the words whose term is one of `terms` (what is left of a request once the names it
        links are taken out), the rest as it was."""
        if not terms:
            return text
        words = [word for cjk, word in _RUNS.findall(text) if word and not cjk]
        dropped = {w for w in words if self._stem(w.casefold()) in terms or w.casefold() in terms}
        if not dropped:
            return text
        return re.sub(r"\w+", lambda m: "" if m.group(0) in dropped else m.group(0), text).strip() or text
