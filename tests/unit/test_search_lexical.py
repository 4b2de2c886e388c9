"""Reading the best lexical matches in impact order (projections/search_lexical.py) against scoring every posting."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.properties import examples

T = "acme"


@settings(max_examples=examples(1.0), deadline=None)
@given(st.data())
def test_the_best_lexical_matches_read_in_impact_order_equal_scoring_every_posting(data):
    """`top_matches` stops reading long postings early; its answer must be the full scoring's best allowed."""
    from array import array

    import numpy as np

    from projections.search_index import SearchIndex, _Posting
    from projections.search_lexical import Marks, idf, impact_order, top_matches
    from projections.search_text import Analyzer

    n = data.draw(st.integers(1, 300), label="documents")
    terms = [f"t{k}" for k in range(5)]
    presence = data.draw(st.lists(st.floats(0.02, 0.98), min_size=5, max_size=5), label="presence")
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))
    index = SearchIndex(T, Analyzer(), None)
    index.vocabulary = {t: k for k, t in enumerate(terms)}
    index.postings = [_Posting(array("i"), array("H")) for _ in terms]
    lengths = rng.integers(1, 12, n)
    for doc in range(n):
        for k in range(5):
            if rng.random() < presence[k]:
                tf = int(rng.integers(1, 7))
                index.postings[k].docs.append(doc)
                index.postings[k].tfs.append(tf)
                lengths[doc] += tf
    index.doc_len = array("I", lengths.tolist())
    index.total_len, index.live_docs = int(lengths.sum()), n
    visible = rng.random(n) < data.draw(st.floats(0.0, 1.0), label="visible share")
    query = data.draw(st.lists(st.sampled_from(terms), min_size=1, max_size=6), label="query")
    limit = data.draw(st.integers(1, 40), label="limit")
    k1, b = 1.2, data.draw(st.sampled_from([0.0, 0.3, 0.75, 1.0]), label="b")

    docs, scores = index.bm25(query, k1, b)
    keep = visible[docs]
    expected = np.sort(scores[keep])[::-1][:limit]

    average = index.total_len / n
    prepared = []
    for term in dict.fromkeys(query):
        posting = index.postings[index.vocabulary[term]]
        ordered = data.draw(st.integers(0, len(posting.docs)), label=f"{term} ordered")
        order = None
        if ordered:
            dense = data.draw(st.booleans(), label=f"{term} has a dense tf array")  # a common term's
            order = impact_order(np.frombuffer(posting.docs, dtype=np.int32)[:ordered],
                                 np.frombuffer(posting.tfs, dtype=np.uint16)[:ordered], lengths,
                                 n_docs=n if dense else None)
        prepared.append((posting.docs, posting.tfs, query.count(term) * idf(n, len(posting.docs)), order))
    exact = data.draw(st.integers(1, limit), label="exact")
    marks = Marks()
    for _ in range(2):  # the marks of one reading do not leak into the next
        found, found_scores = top_matches(prepared, lengths, average, k1, b, limit, lambda d: visible[d], marks,
                                          exact=exact, score_all_below=0,
                                          first_block=data.draw(st.integers(1, 64), label="block"))
        assert visible[found].all() and len(set(found.tolist())) == len(found)
        np.testing.assert_allclose(found_scores[:exact], expected[:exact], rtol=1e-4)
        assert len(found) >= min(exact, len(expected))
        full = dict(zip(docs.tolist(), scores.tolist(), strict=True))
        np.testing.assert_allclose(found_scores, [full[d] for d in found.tolist()], rtol=1e-4)
        assert (np.diff(found_scores) <= 1e-6).all()


@settings(max_examples=examples(1.0), deadline=None)
@given(st.lists(st.lists(st.sampled_from(["quokka", "invoice", "wire", "month", "fri"]), max_size=6),
                min_size=1, max_size=30),
       st.lists(st.integers(0, 4), min_size=30, max_size=30),
       st.lists(st.sampled_from(["quokka", "invoice", "wire", "month"]), min_size=1, max_size=3))
def test_a_sessions_match_as_a_whole_is_the_bm25_of_its_turns_joined_into_one_document(texts, sessions, query):
    """`bm25_grouped`: a session's terms counted over its turns, its length their sum, idf and average length over
    the sessions; the reference indexes each session's turns joined as one document and scores them in full."""
    import numpy as np

    from projections.search_documents import Documents
    from projections.search_text import Analyzer

    turns = Documents(Analyzer())
    for doc, words in enumerate(texts):
        turns._index_terms(doc, words)
    groups = np.array(sessions[: len(texts)], dtype=np.int64)
    grouped = turns.bm25_grouped(query, 1.2, 0.3, np.arange(len(texts), dtype=np.int64), groups, 5)
    joined = Documents(Analyzer())
    present = sorted(set(groups.tolist()))
    for row, group in enumerate(present):
        joined._index_terms(row, [w for words, g in zip(texts, groups.tolist(), strict=True) if g == group
                                  for w in words])
    docs, scores = joined.bm25(query, 1.2, 0.3)
    expected = np.zeros(5)
    expected[np.array(present)[docs]] = scores
    assert np.allclose(grouped, expected, atol=1e-5)
