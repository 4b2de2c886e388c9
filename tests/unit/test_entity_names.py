"""Finding entities by name (domain/entity_names.py): labels, aliases and refs, Chinese and Latin, exact, by
prefix, by word and one typo away, ranked; checked by hand and against a plain scan of every name."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from domain.entity_names import EntityNames, Found, NamedEntity, _edit_distance_at_most_one, words_of
from domain.resolution import normalize

WANG = NamedEntity("person:wang", "Wang Wei", ("王总", "王伟", "Mr. Wang"))
OTHERS = (NamedEntity("person:wangfang", "Wang Fang", ("王芳",)),
          NamedEntity("agent:wang-assistant", "Wang's assistant"),
          NamedEntity("person:li", "Li Wei", ("李总",)),
          NamedEntity("person:wong", "Wong Kar"))


def names() -> EntityNames:
    return EntityNames((*OTHERS, WANG))


def find(index: EntityNames, text: str, **options: object) -> list[Found]:
    return index.find(text, 1000, **options)[0]  # type: ignore[arg-type]


def first(index: EntityNames, text: str) -> str:
    return find(index, text)[0].ref


def test_wang_is_found_first_by_his_chinese_title_his_name_in_any_case_and_a_typo() -> None:
    index = names()
    for text in ("王总", "王總", "Wang", "wang", "ＷＡＮＧ", "Wnag", "Wagn", "wangg", "person:wang", "wang wei"):
        assert first(index, text) == "person:wang", text


def test_each_match_says_how_and_on_which_name() -> None:
    index = names()
    by_title = find(index, "王总")[0]
    assert (by_title.match, by_title.matched, by_title.kind, by_title.label) == ("exact", "王总", "person", "Wang Wei")
    assert find(index, "person:wang")[0].score == 1.0 and find(index, "person:wang")[0].match == "ref"
    assert find(index, "Wnag")[0].match == "fuzzy"
    assert find(index, "wan")[0].match == "prefix"
    assert {f.ref for f in find(index, "总") if f.match == "contains"} == {"person:wang", "person:li"}


def test_ranking_puts_exact_before_prefix_before_word_before_fuzzy() -> None:
    found = find(names(), "wang")
    scores = [f.score for f in found]
    assert scores == sorted(scores, reverse=True)
    assert [f.ref for f in found][:3] == ["person:wang", "person:wangfang", "agent:wang-assistant"]
    assert found[-1].ref == "person:wong" and found[-1].match == "fuzzy"


def test_a_name_no_entity_comes_near_finds_nothing() -> None:
    assert find(names(), "Zhao") == [] and find(names(), "   ") == []


def test_an_entity_added_again_is_found_by_its_new_names_only_and_a_removed_one_not_at_all() -> None:
    index = names()
    index.add(NamedEntity("person:wang", "Wang Jun", ("老王",)))
    assert first(index, "老王") == "person:wang" and all(f.ref != "person:wang" for f in find(index, "王总"))
    index.remove("person:wang")
    assert all(f.ref != "person:wang" for f in find(index, "wang jun")) and "person:wang" not in index


def test_what_the_caller_may_not_see_is_never_found() -> None:
    found = find(names(), "wang", may_see=lambda ref: ref != "person:wang")
    assert found and all(f.ref != "person:wang" for f in found)


def _reference_edit_distance(a: str, b: str) -> int:
    """Damerau-Levenshtein (optimal string alignment), the plain dynamic programme."""
    d = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i in range(len(a) + 1):
        d[i][0] = i
    for j in range(len(b) + 1):
        d[0][j] = j
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            cost = 0 if a[i - 1] == b[j - 1] else 1
            d[i][j] = min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                d[i][j] = min(d[i][j], d[i - 2][j - 2] + 1)
    return d[len(a)][len(b)]


@given(st.text("abcdé王总", max_size=7), st.text("abcdé王总", max_size=7))
def test_one_edit_is_what_the_plain_edit_distance_says(a: str, b: str) -> None:
    assert _edit_distance_at_most_one(a, b) == (_reference_edit_distance(a, b) <= 1)


_NAME = st.text("abcdewxyz王李总伟 ", min_size=1, max_size=12).filter(lambda s: normalize(s) != "")


@settings(max_examples=150, deadline=None)
@given(st.lists(_NAME, min_size=1, max_size=25, unique=True), _NAME)
def test_every_name_equal_to_begun_by_or_holding_a_word_one_edit_from_the_query_is_found_as_a_scan_finds_it(
        labels: list[str], query: str) -> None:
    index = EntityNames(NamedEntity(f"thing:t{i}", label) for i, label in enumerate(labels))
    found = {f.ref: f for f in find(index, query, widest=10_000)}
    key = normalize(query)
    for i, label in enumerate(labels):
        ref, name = f"thing:t{i}", normalize(label)
        if name == key:
            assert found[ref].match == "exact", (label, query)
        elif name.startswith(key):
            assert ref in found and found[ref].score >= 0.8, (label, query)
        elif all(any(w.startswith(q) or (len(q) >= 4 and _reference_edit_distance(w, q) <= 1)
                     for w in words_of(label)) for q in words_of(query)):
            assert ref in found, (label, query)  # every word of the query begins a word of it, or nearly
    for ref, f in found.items():  # and nothing is found that no rule explains
        label = labels[int(ref.removeprefix("thing:t"))]
        assert f.matched in (label, ref.partition(":")[2]), (f, label)
