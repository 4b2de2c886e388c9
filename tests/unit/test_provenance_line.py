"""A fact's provenance line is written the same way whether its index is built from the read model's frames (a
polars expression, `provenance_line`) or fact by fact from the log (`provenance_text`)."""

from __future__ import annotations

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from projections.perspective_index import provenance_text
from projections.perspective_load import provenance_line
from tests.properties import examples

names = st.one_of(st.none(), st.just(""), st.text(alphabet="abcm-1; ,", min_size=1, max_size=6))
rows = st.lists(st.tuples(names, st.one_of(st.none(), st.lists(st.text(alphabet="m0123", min_size=1, max_size=3),
                                                                 max_size=3)), names), min_size=1, max_size=20)


@settings(max_examples=examples(1))
@given(rows)
def test_the_column_expression_writes_what_the_fold_writes(facts: list[tuple]) -> None:
    frame = pl.DataFrame({"session_id": [s for s, _, _ in facts], "message_ids": [m for _, m, _ in facts],
                          "actor": [a for _, _, a in facts]},
                         schema={"session_id": pl.String, "message_ids": pl.List(pl.String), "actor": pl.String})
    written = frame.select(provenance_line().alias("line"))["line"].to_list()
    assert written == [provenance_text({"session_id": s, "message_ids": m or [], "actor": a}) for s, m, a in facts]
