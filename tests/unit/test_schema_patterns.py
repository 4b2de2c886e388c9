r"""What the OpenAPI document promises is what the server accepts: every string a client generates from the
document's patterns (refs, scopes, identifiers, forget subjects) passes the server's own checks. The document's
patterns are ECMA regexes, whose white space (`\s`) and `.` differ from Python's: they are generated here as an
ECMA engine reads them (schemathesis did; Python's `\s` also takes U+001C-U+001F and U+0085, which ECMA's does not,
so `person:li\x1f` was generated and refused before the patterns excluded them)."""

from __future__ import annotations

import re
from collections.abc import Callable

from hypothesis import given
from hypothesis import strategies as st
from pydantic import TypeAdapter

from api.schemas.forget import ForgetCreate
from domain.forgetting import check_subject
from domain.values import IDENTIFIER_REGEX, REF_SCHEMA_REGEX, Identifier, Ref, Scope

REF = TypeAdapter(Ref)
SCOPE = TypeAdapter(Scope)
IDENTIFIER = TypeAdapter(Identifier)
SCOPE_REGEX = TypeAdapter(Scope).json_schema()["pattern"]
SUBJECT_REGEX = ForgetCreate.model_json_schema()["properties"]["subject"]["pattern"]
NO_SURROGATES = st.characters(exclude_categories=["Cs"])


ECMA_SPACE = "\t\n\v\f\r \xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
r"""ECMA-262's white space and line terminators: what `\s` means in the document's patterns."""


def _ecma(pattern: str) -> str:
    r"""The pattern with `\s`, `\S` and `.` spelled out as an ECMA engine reads them."""
    out, in_class, i = [], False, 0
    while i < len(pattern):
        two = pattern[i:i + 2]
        if two == "\\s":
            out.append(ECMA_SPACE if in_class else f"[{ECMA_SPACE}]")
            i += 2
            continue
        if two == "\\S":
            out.append(f"[^{ECMA_SPACE}]")
            i += 2
            continue
        if pattern[i] == "\\":
            out.append(two)
            i += 2
            continue
        if pattern[i] == "[":
            in_class = True
        elif pattern[i] == "]":
            in_class = False
        elif pattern[i] == "." and not in_class:
            out.append("[^\n\r\u2028\u2029]")
            i += 1
            continue
        out.append(pattern[i])
        i += 1
    return "".join(out)


def _matching(pattern: str) -> st.SearchStrategy[str]:
    return st.from_regex(re.compile(_ecma(pattern)), fullmatch=True, alphabet=NO_SURROGATES)


def test_the_ecma_reading_differs_from_pythons_where_it_matters() -> None:
    assert re.fullmatch(_ecma(r"a:\S"), "a:\x1f") and not re.fullmatch(r"a:\S", "a:\x1f")
    assert not re.fullmatch(_ecma(r"a:\S"), "a:\ufeff") and re.fullmatch(r"a:\S", "a:\ufeff")
    assert not re.fullmatch(_ecma("a.b"), "a\rb")


EDGES = ["\x1c", "\x1d", "\x1e", "\x1f", "\x85", "\ufeff", "\t", "\xa0"]
"""Characters at an edge that one engine calls white space and the other does not (or both do)."""


def _accepted_where_described(pattern: str, value: str, accept: Callable[[str], object]) -> None:
    if re.fullmatch(_ecma(pattern), value):
        accept(value)  # raises when the server refuses what the document describes


def _edges(prefix: str) -> list[str]:
    return [f"{prefix}li{edge}" for edge in EDGES] + [f"{prefix}{edge}li" for edge in EDGES]


@given(st.one_of(_matching(REF_SCHEMA_REGEX), st.sampled_from(_edges("person:"))))
def test_every_ref_the_document_describes_is_a_ref_the_server_accepts(ref: str) -> None:
    if len(ref) <= 512:
        _accepted_where_described(REF_SCHEMA_REGEX, ref, REF.validate_python)


@given(st.one_of(_matching(SCOPE_REGEX), st.sampled_from(_edges("person:"))))
def test_every_scope_the_document_describes_is_a_scope_the_server_accepts(scope: str) -> None:
    if len(scope) <= 512:
        _accepted_where_described(SCOPE_REGEX, scope, SCOPE.validate_python)


@given(st.one_of(_matching(IDENTIFIER_REGEX), st.sampled_from(_edges(""))))
def test_every_identifier_the_document_describes_is_an_identifier_the_server_accepts(identifier: str) -> None:
    if len(identifier) <= 256:
        _accepted_where_described(IDENTIFIER_REGEX, identifier, IDENTIFIER.validate_python)


@given(st.one_of(_matching(SUBJECT_REGEX), st.sampled_from(_edges("session:"))))
def test_every_forget_subject_the_document_describes_is_a_subject_the_server_accepts(subject: str) -> None:
    if len(subject) <= 307:  # the kind, the colon and the 300 characters check_subject takes
        _accepted_where_described(SUBJECT_REGEX, subject, lambda s: check_subject(ForgetCreate(subject=s).subject))

