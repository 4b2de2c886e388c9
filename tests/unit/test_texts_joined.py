"""A column of texts turned into `Texts` at once (its bytes joined by polars, perspective_load._texts) reads back
exactly as the texts appended one by one do: every text, empty and missing ones (read as empty) and any Unicode."""

from __future__ import annotations

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from projections.perspective_columns import Texts
from projections.perspective_load import _texts
from tests.properties import examples


@settings(max_examples=examples(1.0))
@given(st.lists(st.one_of(st.none(), st.text(max_size=40)), max_size=60))
def test_a_column_joined_at_once_reads_back_as_the_texts_one_by_one(texts: list[str | None]) -> None:
    joined = _texts(pl.Series(texts, dtype=pl.String))
    one_by_one = Texts([t or "" for t in texts])
    assert [joined.get(i) for i in range(len(texts))] == [t or "" for t in texts]
    assert bytes(joined.blob) == bytes(one_by_one.blob)
    assert list(joined.offsets.view) == list(one_by_one.offsets.view)
