"""The compiled seal kernel (`infra/_seal_kernel.c`) writes exactly the bytes of the Python path, and what it
seals opens with the Python `_open`.

The kernel is built by `pip install -e .`; without it these tests fail (so CI cannot lose them silently), unless
`NOUMENA_SEAL_KERNEL=0` says to test the Python path alone: then tests/conftest.py leaves this file out of the
collection (nothing is skipped), as tests/test_perspective_reference.py leaves out the walk kernel's variants.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from hypothesis import given, settings
from hypothesis import strategies as st

from domain.entities import EntityRegistered
from domain.facts import FactAsserted
from domain.forgetting import FORGOTTEN, ContentKey
from domain.ports import Pending
from infra import mapper
from infra.keystore import MemoryKeyStore, derive
from infra.mapper import EventMapper, _seal_jobs_python


def _kernel() -> Any:
    if mapper._kernel is None:
        pytest.fail("the seal kernel is not built (pip install -e . builds it with a C compiler and the OpenSSL "
                    "headers): build it, or set NOUMENA_SEAL_KERNEL=0 to test the Python path alone")
    return mapper._kernel


@contextmanager
def _sealing(kernel: bool) -> Iterator[None]:
    """Sealing inside runs in the kernel, or in Python."""
    if kernel:
        _kernel()
    saved = mapper.use_kernel
    mapper.use_kernel = kernel
    try:
        yield
    finally:
        mapper.use_kernel = saved


def _python_seal(key: bytes, nonce: bytes, plain: bytes, ad: bytes) -> bytes:
    return nonce + AESGCM(key).encrypt(nonce, plain, ad)


keys = st.binary(min_size=32, max_size=32)
nonces = st.binary(min_size=12, max_size=12)


@settings(max_examples=300, deadline=None)
@given(key=keys, nonce=nonces, plain=st.binary(max_size=3000), ad=st.binary(max_size=200))
def test_the_kernel_seals_as_aesgcm(key: bytes, nonce: bytes, plain: bytes, ad: bytes) -> None:
    assert _kernel().seal(key, nonce, plain, ad) == _python_seal(key, nonce, plain, ad)


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.text(),
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
                           max_leaves=10)


def _job(key: bytes, member: str | None, value: Any, key_id: str, field: str, first: bool) -> tuple[Any, ...]:
    if not isinstance(value, str):
        value = b"j" + json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()
    if member is None:
        return key, None, value, mapper._extras(key_id, field)[0 if first else 1]
    return key, member.encode(), value, mapper._member_extras(key_id, field)[0 if first else 1]


jobs = st.lists(st.tuples(keys, st.none() | st.text(min_size=1, max_size=60), st.text(max_size=2000) | json_values,
                          st.text(min_size=1, max_size=80),
                          st.sampled_from(["reason", "label", "aliases", "content", "rejections"]), st.booleans()),
                  max_size=12)


@settings(max_examples=300, deadline=None)
@given(batch=jobs, data=st.data())
def test_a_kernel_batch_writes_the_python_paths_bytes(batch: list[tuple[Any, ...]], data: st.DataObject) -> None:
    """Every job of a batch, with a data key or a group's key and a member id (the key derived in C), sealed by
    the kernel as the Python path seals it (the same nonces)."""
    prepared = [_job(*job) for job in batch]
    nonce_block = data.draw(st.binary(min_size=12 * len(prepared), max_size=12 * len(prepared)))
    assert _kernel().seal_batch(nonce_block, prepared) == _seal_jobs_python(nonce_block, prepared)


def test_a_member_key_is_derived_in_the_kernel_as_in_python() -> None:
    group, nonce = os.urandom(32), os.urandom(12)
    member = "t/fact/f1"
    name = f"t/root/{'0' * 32}/{member}"
    by_member = _kernel().seal_batch(nonce, [(group, member.encode(), "why",
                                              mapper._member_extras(f"t/root/{'0' * 32}", "reason")[0])])[0]
    by_key = _kernel().seal_batch(nonce, [(derive(group, member), None, "why", mapper._extras(name, "reason")[0])])[0]
    assert by_member == by_key
    sealed = _python_seal(derive(group, member), nonce, b"swhy", f"{name}|reason".encode())
    head = b"\x00\x02" + len(name).to_bytes(2, "big") + name.encode() + b"\x06reason"
    assert by_member == head + len(sealed).to_bytes(4, "big") + sealed


def test_a_text_that_cannot_be_utf8_fails_both_ways_alike() -> None:
    job = [_job(os.urandom(32), None, "lone \udc80 surrogate", "k", "reason", True)]
    with pytest.raises(UnicodeEncodeError):
        _kernel().seal_batch(os.urandom(12), job)
    with pytest.raises(UnicodeEncodeError):
        _seal_jobs_python(os.urandom(12), job)


def test_the_kernel_refuses_what_it_cannot_seal() -> None:
    kernel = _kernel()
    with pytest.raises(ValueError):
        kernel.seal(b"k" * 16, b"n" * 12, b"p", b"")  # AES-256 only
    with pytest.raises(ValueError):
        kernel.seal(b"k" * 32, b"n" * 16, b"p", b"")
    with pytest.raises(TypeError):
        kernel.seal_batch(b"n" * 12, [(b"k" * 32, None, 3, (b"", b""))])
    with pytest.raises(TypeError):
        kernel.seal_batch(b"n" * 12, [(b"k" * 32, None, "v")])
    with pytest.raises(TypeError):
        kernel.seal_batch(b"n" * 12, [(b"k" * 32, None, "v", (b"", b"", b""))])
    with pytest.raises(ValueError):
        kernel.seal_batch(b"n" * 11, [(b"k" * 32, None, "v", (b"", b""))])
    with pytest.raises(ValueError):
        kernel.seal_batch(b"n" * 12, [(b"k" * 31, None, "v", (b"", b""))])
    with pytest.raises(TypeError):  # a member's extras are (group, field head, first)
        kernel.seal_batch(b"n" * 12, [(b"k" * 32, b"m", "v", (b"", b""))])
    with pytest.raises(TypeError):
        kernel.seal_batch(b"n" * 12, [(b"k" * 32, b"m", "v", (b"g/", b"\x01f", 1))])
    with pytest.raises(ValueError):
        kernel.seal_batch(b"n" * 12, [(b"k" * 32, b"m", "v", (b"g/", b"\x05f", True))])
    with pytest.raises(ValueError):
        kernel.seal_batch(b"n" * 12, [(b"k" * 32, b"m" * 70000, "v", (b"g/", b"\x01f", True))])


def _events() -> list[Pending]:
    at = datetime(2026, 10, 1, tzinfo=UTC)
    out = []
    for i in range(40):
        reason = ["said so", "王总说按月结 ✓", "quote \" and \\ backslash", "𝄞 " * 50][i % 4] + f" {i}"
        event: Any = FactAsserted(tenant="t", recorded_at=at, fact_id=f"f{i}", subject="person:li", relation="knows",
                                  object=f"person:p{i}", scope="org", reason=reason, confidence=0.8,
                                  provenance={})
        out.append(Pending("t", 2 * i + 1, event, ContentKey(f"t/fact/f{i}", frozenset({f"fact:f{i}", "person:li"}))))
        event = EntityRegistered(tenant="t", recorded_at=at, ref=f"person:p{i}", label=f"P {i} 李",
                                 aliases=(f"p{i}", "“别名”"))
        out.append(Pending("t", 2 * i + 2, event, ContentKey(f"t/person/p{i}", frozenset({f"person:p{i}"}))))
    return out


def test_fields_the_kernel_sealed_open_with_the_python_path() -> None:
    store = MemoryKeyStore()
    pending = _events()
    with _sealing(True):
        stored = EventMapper(store).to_stored_batch(pending)
    with _sealing(False):
        python_stored = EventMapper(store).to_stored_batch(pending)
    assert all(mapper.SEALED in s.state for s in stored)
    assert all(b"said so" not in s.state and "王".encode() not in s.state for s in stored)
    # the same layout as the Python path's (nonces differ: compared field by field without them)
    assert [len(s.state) for s in stored] == [len(s.state) for s in python_stored]
    reader = EventMapper(store)  # `_open` is the Python path, whatever sealed
    assert [reader.to_event(s.topic, s.state) for s in stored] == [p.event for p in pending]
    store.forget("t", "person:li")
    forgotten = EventMapper(store)
    assert {forgotten.to_event(s.topic, s.state).reason for s in stored[::2]} == {FORGOTTEN}
