"""The sealed format in the log, as `infra/mapper.py` documents it: v2 written (the event's JSON without its content
fields, a NUL, the format byte, the key's name, one AES-256-GCM record per field), v1 still read, and a damaged
sealed part refused with an error that says what is wrong."""

from __future__ import annotations

import base64
import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from hypothesis import given, settings
from hypothesis import strategies as st

from domain import commands as c
from domain.entities import EntityRegistered
from domain.facts import FactAsserted
from domain.forgetting import FORGOTTEN, ContentKey
from domain.ports import Pending
from domain.sessions import MessageAppended
from infra.bootstrap import bootstrap
from infra.keys.derivation import derive
from infra.keys.memory import MemoryKeyStore
from infra.keys.sqlite import SQLiteKeyStore
from infra.mapper import EventMapper, SealedFieldCorrupted
from infra.settings import Settings
from tests.properties import examples

AT = datetime(2026, 11, 1, tzinfo=UTC)


def _entity(label: str = "Li 李总 MARKER", aliases: tuple[str, ...] = ("li", "“别名”")) -> Pending:
    event = EntityRegistered(tenant="t", recorded_at=AT, ref="person:li", label=label, aliases=aliases)
    return Pending("t", 1, event, ContentKey("t/entity/person:li", frozenset({"person:li"})))


def _records(state: bytes) -> tuple[dict[str, Any], str, dict[str, bytes]]:
    """Parse a v2 state by the documented layout, independently of the mapper: JSON, key name, records."""
    cut = state.index(b"\x00")
    head, rest = json.loads(state[:cut]), state[cut + 1:]
    assert rest[0] == 2
    size = int.from_bytes(rest[1:3], "big")
    name, at = rest[3:3 + size].decode(), 3 + size
    records = {}
    while at < len(rest):
        field = rest[at + 1:at + 1 + rest[at]].decode()
        at += 1 + rest[at]
        size = int.from_bytes(rest[at:at + 4], "big")
        records[field] = rest[at + 4:at + 4 + size]
        at += 4 + size
    assert at == len(rest)
    return head, name, records


def test_a_sealed_event_is_its_json_without_content_then_one_record_per_field() -> None:
    store = MemoryKeyStore()
    pending = _entity()
    state = EventMapper(store).to_stored_batch([pending])[0].state
    assert b"MARKER" not in state and "李".encode() not in state
    head, name, records = _records(state)
    assert head["ref"] == "person:li" and "label" not in head and "aliases" not in head
    assert name == "t/entity/person:li" and set(records) == {"label", "aliases"}
    cipher = AESGCM(store.get(name))  # type: ignore[arg-type]
    opened = {field: cipher.decrypt(r[:12], r[12:], f"{name}|{field}".encode()) for field, r in records.items()}
    assert opened == {"label": "sLi 李总 MARKER".encode(), "aliases": 'j["li","“别名”"]'.encode()}
    assert records["label"][:12] != records["aliases"][:12]  # a nonce of its own for every field


def test_a_facts_record_opens_with_the_key_derived_from_its_groups(tmp_path: Path) -> None:
    store = SQLiteKeyStore(tmp_path / "keys.sqlite")
    event = FactAsserted(tenant="t", recorded_at=AT, fact_id="f1", subject="person:li", relation="knows",
                         object="person:wang", scope="person:li", reason="MARKER why", confidence=0.8, provenance={})
    key = ContentKey("t/fact/f1", frozenset({"person:li"}), "t/facts/person:li")
    state = EventMapper(store).to_stored_batch([Pending("t", 1, event, key)])[0].state
    _head, name, records = _records(state)
    group, member = name.rsplit("/", 3)[0], "t/fact/f1"
    assert name == f"{group}/{member}"
    group_key = store.get(group)
    assert group_key is not None
    record = records["reason"]
    assert AESGCM(derive(group_key, member)).decrypt(record[:12], record[12:], f"{name}|reason".encode()) == \
        b"sMARKER why"
    store.close()


@settings(max_examples=examples(0.5))
@given(content=st.text(max_size=400), label=st.text(min_size=1, max_size=80),
       aliases=st.lists(st.text(max_size=20), max_size=4))
def test_any_text_round_trips_through_the_sealed_format(content: str, label: str, aliases: list[str]) -> None:
    """NULs, quotes, surrogate-free unicode: the JSON part never holds a raw NUL, so the first one is where the
    sealed part starts, whatever the ciphertext holds."""
    store = MemoryKeyStore()
    message = MessageAppended(tenant="t", recorded_at=AT, session_id="s\x00 1", message_id="m\x001", role="user",
                              content=content)
    pending = [Pending("t", 1, message, ContentKey("t/session/s", frozenset({"session:s"}))),
               _entity(label, tuple(aliases))]
    stored = EventMapper(store).to_stored_batch(pending)
    reader = EventMapper(store)
    assert [reader.to_event(s.topic, s.state) for s in stored] == [p.event for p in pending]
    for s, p in zip(stored, pending, strict=True):
        opened = json.loads(reader.unsealed_state(s.topic, s.state))
        assert opened == json.loads(p.event.__pydantic_serializer__.to_json(p.event))


def _v1(store: MemoryKeyStore, pending: Pending) -> bytes:
    """The event as format v1 wrote it: each content field a JSON string sealed:v1:<nonce>:<sealed>:<key id>."""
    key_id = pending.key.key_id  # type: ignore[union-attr]
    cipher = AESGCM(store.key_for(pending.key))  # type: ignore[arg-type]
    data = json.loads(pending.event.__pydantic_serializer__.to_json(pending.event))
    for field in type(pending.event).content_fields:
        value = data[field]
        plain = b"s" + value.encode() if isinstance(value, str) else b"j" + json.dumps(value).encode()
        nonce = os.urandom(12)
        sealed = cipher.encrypt(nonce, plain, f"{key_id}|{field}".encode())
        b64 = [base64.urlsafe_b64encode(x).rstrip(b"=").decode() for x in (nonce, sealed)]
        data[field] = f"sealed:v1:{b64[0]}:{b64[1]}:{key_id}"
    return json.dumps(data).encode()


def test_format_v1_is_still_read_and_still_forgotten() -> None:
    store = MemoryKeyStore()
    pending = _entity()
    state = _v1(store, pending)
    assert b"MARKER" not in state and b"sealed:v1:" in state
    topic = type(pending.event).stored_topic()
    assert EventMapper(store).to_event(topic, state) == pending.event
    assert json.loads(EventMapper(store).unsealed_state(topic, state))["label"] == "Li 李总 MARKER"
    store.forget("t", "person:li")
    forgotten = EventMapper(store).to_event(topic, state)
    assert (forgotten.label, forgotten.aliases) == (FORGOTTEN, ())  # type: ignore[attr-defined]


def test_a_damaged_sealed_part_is_refused_with_what_is_wrong() -> None:
    store = MemoryKeyStore()
    stored = EventMapper(store).to_stored_batch([_entity()])[0]
    reader = EventMapper(store)
    cut = stored.state.index(b"\x00")
    with pytest.raises(ValueError, match="cut short"):
        reader.to_event(stored.topic, stored.state[:-20])
    with pytest.raises(ValueError, match="cut short"):
        reader.to_event(stored.topic, stored.state[:cut + 6])
    with pytest.raises(ValueError, match="not sealed fields"):
        reader.unsealed_state(stored.topic, stored.state[:cut + 1] + b"\x07" + stored.state[cut + 2:])
    tampered = bytearray(stored.state)
    tampered[-1] ^= 1  # the last tag no longer matches, and the key exists: an integrity error, not forgetting
    with pytest.raises(SealedFieldCorrupted, match="'aliases'.*integrity"):
        reader.to_event(stored.topic, bytes(tampered))
    with pytest.raises(SealedFieldCorrupted, match="'aliases'"):
        reader.unsealed_state(stored.topic, bytes(tampered))


@pytest.mark.parametrize("encrypt", [True, False])
def test_a_text_that_looks_like_a_v1_field_reads_as_written(tmp_path: Path, encrypt: bool) -> None:
    """A text of a field that is not sealed (a `file:` entity's label; anything when nothing is sealed) may start
    with v1's marker: it reads back as written and never breaks reading the log."""
    texts = ["sealed:v1:oops", "sealed:v1:a:b:c", f"sealed:v1:{'A' * 16}:{'B' * 25}:t/x",  # (not base64)
             f"sealed:v1:{'A' * 16}:{'B' * 24}:no/such/key"]
    app = bootstrap(Settings(home=tmp_path, event_store="sqlite", encrypt_content=encrypt))
    app.service.execute(c.CreateTenant(tenant="t"))
    for i, text in enumerate(texts):
        app.service.execute(c.RegisterEntity(tenant="t", ref=f"file:f{i}", label=text))
    app.close()
    app = bootstrap(Settings(home=tmp_path, event_store="sqlite", encrypt_content=encrypt))
    entities = app.service.ontology("t").entities
    labels = [entities[f"file:f{i}"].label for i in range(len(texts))]
    app.close()
    assert labels[:3] == texts[:3]
    # the limit: a text shaped exactly like a v1 field is taken for one, whose key does not exist
    assert labels[3] == FORGOTTEN
