"""The sealed format in the log, as `infra/adapters/sealed_format.py` documents it: v3 written (the event's JSON without
its content fields, a NUL, the format byte, the key's name, the sealed fields' names, then one AES-256-GCM record of
all of them, whose tag covers the whole stored event), v2 and v1 still read, and a damaged sealed part refused with
an error that says what is wrong."""

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
from infra.adapters.keys.derivation import derive
from infra.adapters.keys.memory import MemoryKeyStore
from infra.adapters.keys.sqlite import SQLiteKeyStore
from infra.adapters.mapper import EventMapper, SealedFieldCorrupted
from infra.bootstrap import bootstrap
from infra.settings import Settings
from tests.properties import examples

AT = datetime(2026, 11, 1, tzinfo=UTC)


def _entity(label: str = "Li 李总 MARKER", aliases: tuple[str, ...] = ("li", "“别名”")) -> Pending:
    event = EntityRegistered(tenant="t", recorded_at=AT, ref="person:li", label=label, aliases=aliases)
    return Pending("t", 1, event, ContentKey("t/entity/person:li", frozenset({"person:li"})))


def _sealed_v3(state: bytes) -> tuple[dict[str, Any], str, list[str], bytes, bytes, bytes]:
    """Parse a v3 state by the documented layout, independently of the mapper: the JSON in the clear, the key's
    name, the sealed fields, the nonce, the ciphertext with its tag, and the associated data (all before the
    nonce)."""
    cut = state.index(b"\x00")
    head = json.loads(state[:cut])
    assert state[cut + 1] == 3
    size = int.from_bytes(state[cut + 2:cut + 4], "big")
    name, at = state[cut + 4:cut + 4 + size].decode(), cut + 4 + size
    fields = []
    for _ in range(state[at]):
        fields.append(state[at + 2:at + 2 + state[at + 1]].decode())
        at += 1 + state[at + 1]
    at += 1
    return head, name, fields, state[at:at + 12], state[at + 12:], state[:at]


def test_a_sealed_event_is_its_json_without_content_then_one_record_of_every_sealed_field() -> None:
    store = MemoryKeyStore()
    pending = _entity()
    state = EventMapper(store).to_stored_batch([pending])[0].state
    assert b"MARKER" not in state and "李".encode() not in state
    head, name, fields, nonce, sealed, header = _sealed_v3(state)
    assert head["ref"] == "person:li" and "label" not in head and "aliases" not in head
    assert name == "t/entity/person:li" and fields == ["label", "aliases"]
    plain = AESGCM(store.get(name)).decrypt(nonce, sealed, header)  # type: ignore[arg-type]
    assert plain[:1] == b"j" and json.loads(plain[1:]) == {"label": "Li 李总 MARKER", "aliases": ["li", "“别名”"]}
    again = EventMapper(store).to_stored_batch([pending])[0].state
    assert _sealed_v3(again)[3] != nonce  # a nonce of its own for every record


def test_a_facts_record_opens_with_the_key_derived_from_its_groups(tmp_path: Path) -> None:
    store = SQLiteKeyStore(tmp_path / "keys.sqlite")
    event = FactAsserted(tenant="t", recorded_at=AT, fact_id="f1", subject="person:li", relation="knows",
                         object="person:wang", scope="person:li", reason="MARKER why", confidence=0.8, provenance={})
    key = ContentKey("t/fact/f1", frozenset({"person:li"}), "t/facts/person:li")
    state = EventMapper(store).to_stored_batch([Pending("t", 1, event, key)])[0].state
    _head, name, fields, nonce, sealed, header = _sealed_v3(state)
    group, member = name.rsplit("/", 3)[0], "t/fact/f1"
    assert name == f"{group}/{member}" and fields == ["reason"]
    group_key = store.get(group)
    assert group_key is not None
    assert AESGCM(derive(group_key, member)).decrypt(nonce, sealed, header) == b"sMARKER why"  # one text: its UTF-8
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


def _v2(store: MemoryKeyStore, pending: Pending) -> bytes:
    """The event as format v2 wrote it: its JSON without the content fields, NUL, 2, the key's name, then per field
    its name, the length of the rest, a nonce and the ciphertext of s + text or j + JSON, `<key>|<field>` bound."""
    key_id = pending.key.key_id  # type: ignore[union-attr]
    cipher = AESGCM(store.key_for(pending.key))  # type: ignore[arg-type]
    data = json.loads(pending.event.__pydantic_serializer__.to_json(pending.event))
    fields = type(pending.event).content_fields
    out = json.dumps({k: v for k, v in data.items() if k not in fields}).encode()
    out += b"\x00\x02" + len(key_id).to_bytes(2, "big") + key_id.encode()
    for field in fields:
        value = data[field]
        plain = b"s" + value.encode() if isinstance(value, str) else b"j" + json.dumps(value).encode()
        nonce = os.urandom(12)
        record = nonce + cipher.encrypt(nonce, plain, f"{key_id}|{field}".encode())
        out += bytes((len(field),)) + field.encode() + len(record).to_bytes(4, "big") + record
    return out


def test_format_v2_is_still_read_still_forgotten_and_still_checked() -> None:
    store = MemoryKeyStore()
    pending = _entity()
    state = _v2(store, pending)
    assert b"MARKER" not in state
    topic = type(pending.event).stored_topic()
    assert EventMapper(store).to_event(topic, state) == pending.event
    assert json.loads(EventMapper(store).unsealed_state(topic, state))["aliases"] == ["li", "“别名”"]
    tampered = bytearray(state)
    tampered[-1] ^= 1  # the last record's tag (aliases): its key exists, so an integrity error
    with pytest.raises(SealedFieldCorrupted, match="'aliases'.*integrity"):
        EventMapper(store).to_event(topic, bytes(tampered))
    with pytest.raises(ValueError, match="cut short"):
        EventMapper(store).to_event(topic, state[:-20])
    store.forget("t", "person:li")
    forgotten = EventMapper(store).to_event(topic, state)
    assert (forgotten.label, forgotten.aliases) == (FORGOTTEN, ())  # type: ignore[attr-defined]


def test_a_damaged_sealed_part_is_refused_with_what_is_wrong() -> None:
    store = MemoryKeyStore()
    stored = EventMapper(store).to_stored_batch([_entity()])[0]
    reader = EventMapper(store)
    cut = stored.state.index(b"\x00")
    nonce_at = len(_sealed_v3(stored.state)[5])
    with pytest.raises(ValueError, match="cut short"):
        reader.to_event(stored.topic, stored.state[:nonce_at + 27])  # (a nonce and a tag need 28 bytes)
    with pytest.raises(ValueError, match="cut short"):
        reader.to_event(stored.topic, stored.state[:cut + 6])
    with pytest.raises(ValueError, match="cut short"):
        reader.to_event(stored.topic, stored.state[:nonce_at - 3])  # (in the field list)
    with pytest.raises(ValueError, match="not sealed fields"):
        reader.unsealed_state(stored.topic, stored.state[:cut + 1] + b"\x07" + stored.state[cut + 2:])
    tampered = bytearray(stored.state)
    tampered[-1] ^= 1  # the tag no longer matches, and the key exists: an integrity error, not forgetting
    with pytest.raises(SealedFieldCorrupted, match="'label,aliases'.*integrity"):
        reader.to_event(stored.topic, bytes(tampered))
    with pytest.raises(SealedFieldCorrupted, match="'label,aliases'"):
        reader.unsealed_state(stored.topic, bytes(tampered))


def test_the_tag_of_a_v3_record_covers_the_json_in_the_clear_too() -> None:
    """A changed byte anywhere in a sealed event, the ids and refs in the clear included, is an integrity error:
    a record cannot be moved onto another event sealed with the same key, nor its event's refs changed."""
    store = MemoryKeyStore()
    stored = EventMapper(store).to_stored_batch([_entity()])[0]
    at = stored.state.index(b"person:li") + len("person:")
    tampered = stored.state[:at] + b"L" + stored.state[at + 1:]  # person:Li
    with pytest.raises(SealedFieldCorrupted, match="integrity"):
        EventMapper(store).to_event(stored.topic, tampered)
    event = EntityRegistered(tenant="t", recorded_at=AT, ref="person:li", label="Other", event_id="e2")
    other = EventMapper(store).to_stored_batch([Pending("t", 2, event, _entity().key)])[0].state
    moved = _sealed_v3(other)[5] + stored.state[len(_sealed_v3(stored.state)[5]):]  # this record, that header
    assert _sealed_v3(moved)[1] == "t/entity/person:li"  # (the same key: only the tag tells them apart)
    with pytest.raises(SealedFieldCorrupted, match="integrity"):
        EventMapper(store).to_event(stored.topic, moved)


@pytest.mark.parametrize("encrypt", [True, False])
def test_a_text_that_looks_like_a_v1_field_reads_as_written(tmp_path: Path, encrypt: bool) -> None:
    """A text of a field that is not sealed (an `agent:` entity's label; anything when nothing is sealed) may start
    with v1's marker: it reads back as written and never breaks reading the log."""
    texts = ["sealed:v1:oops", "sealed:v1:a:b:c", f"sealed:v1:{'A' * 16}:{'B' * 25}:t/x",  # (not base64)
             f"sealed:v1:{'A' * 16}:{'B' * 24}:no/such/key"]
    app = bootstrap(Settings(home=tmp_path, event_store="sqlite", encrypt_content=encrypt))
    app.service.execute(c.CreateTenant(tenant="t"))
    for i, text in enumerate(texts):
        app.service.execute(c.RegisterEntity(tenant="t", ref=f"agent:f{i}", label=text))
    app.close()
    app = bootstrap(Settings(home=tmp_path, event_store="sqlite", encrypt_content=encrypt))
    entities = app.service.ontology("t").entities
    labels = [entities[f"agent:f{i}"].label for i in range(len(texts))]
    app.close()
    assert labels[:3] == texts[:3]
    # the limit: a text shaped exactly like a v1 field is taken for one, whose key does not exist
    assert labels[3] == FORGOTTEN


def test_a_mapper_that_opened_an_event_seals_the_next_one_with_the_same_key() -> None:
    """Opening and sealing share the mapper's ciphers by key name: a key first met when reading (a process that
    folded the log) seals the next write of the same subject."""
    store = MemoryKeyStore()
    first = EventMapper(store).to_stored_batch([_entity()])[0]
    mapper = EventMapper(store)
    assert mapper.to_event(first.topic, first.state) == _entity().event
    updated = _entity(label="Li again")
    again = mapper.to_stored_batch([updated])[0]
    assert mapper.to_event(again.topic, again.state) == updated.event
