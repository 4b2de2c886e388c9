"""Maps domain events to eventsourcing's StoredEvent and back, as a pipeline of steps (the shape of
eventsourcing's own mapper: topic, transcoder, optional cipher):

1. the topic: the event class's stable topic and version (`event_json.topic_of`);
2. the transcoder: the event's JSON (`infra/adapters/event_json.py`);
3. the cipher, when a key store is configured and the event has content: its content fields are left out of the
   JSON and sealed together, as one record, with their subject's data key (`infra/adapters/sealing.py`), laid out as the
   sealed format says (`infra/adapters/sealed_format.py`: v3 written, v2 and v1 still read).

Reading runs the steps backwards. A field whose key has been deleted (the subject was forgotten) reads as
`[forgotten]` (a list as empty); a field whose key exists but does not open raises `SealedFieldCorrupted`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from eventsourcing.persistence import StoredEvent

from domain.events import DomainEvent, event_class_for
from domain.forgetting import SubjectForgotten
from domain.ports import KeyStore, Pending
from infra.adapters import event_json
from infra.adapters.sealed_format import (
    NONCE_BYTES,
    V1_MARKER,
    SealedRecord,
    associated_data,
    is_sealed,
    read_sealed,
    read_v1,
)
from infra.adapters.sealing import FieldCipher, SealedFieldCorrupted

__all__ = ["EventMapper", "SealedFieldCorrupted", "stream_id"]

_FORGOTTEN_TOPIC = SubjectForgotten.stored_topic()
_V1_BYTES = V1_MARKER.encode()


def stream_id(tenant: str) -> str:
    """Every tenant has exactly one stream: its ontology."""
    return f"tenant:{tenant}"


class EventMapper:
    def __init__(self, keys: KeyStore | None = None) -> None:
        self.keys = keys
        self.cipher = FieldCipher(keys) if keys is not None else None

    # ------------------------------------------------------------------ writing

    def to_stored(self, tenant: str, version: int, event: DomainEvent) -> StoredEvent:
        return self.to_stored_batch([Pending(tenant, version, event)])[0]

    def to_stored_batch(self, pending: Sequence[Pending]) -> list[StoredEvent]:
        """Serialize a batch; every data key it needs is created and committed before this returns."""
        stored, keys_ready = self.to_stored_pending(pending)
        if keys_ready is not None:
            keys_ready()()  # (nothing to hold forgets off for: these events are not written here)
        return stored

    def to_stored_pending(self, pending: Sequence[Pending]
                          ) -> tuple[list[StoredEvent], Callable[[], Callable[[], None]] | None]:
        """Serialize a batch, and `ready`, to call before committing it (None: nothing sealed): the new data keys
        it is sealed with may still be being committed; `ready` waits until they are (raising if they could not
        be), then holds off forgets until the function it returns is called, after the commit (see
        `KeyStore.keys_pending`). A key that is named but not given is an error, never plaintext."""
        keys: dict[str, Any] = {}
        ready = None
        if self.keys is not None:
            wanted = [p.key for p in pending if p.key is not None]
            if wanted:
                keys, ready = self.keys.keys_pending(wanted)
        stored = []
        cipher = self.cipher if keys else None
        if cipher is not None:
            cipher.refresh()  # (after the keys: a key store that dropped keys dropped them before handing these)
            nonces = os.urandom(NONCE_BYTES * len(pending))  # the batch's nonces, drawn at once
        for i, p in enumerate(pending):
            event = p.event
            if p.key is None or cipher is None:
                state = event_json.encode(event)
            else:
                state = cipher.seal_event(event, keys[p.key.key_id], nonces[i * NONCE_BYTES:(i + 1) * NONCE_BYTES])
            stored.append(StoredEvent(originator_id=stream_id(p.tenant), originator_version=p.version,
                                      topic=event_json.topic_of(event), state=state))
        return stored, ready

    # ------------------------------------------------------------------ reading

    def to_event(self, topic: str, state: bytes) -> DomainEvent:
        """The domain event a stored state holds, its content opened (or `[forgotten]`)."""
        if topic == _FORGOTTEN_TOPIC:
            self.evict()
        if not is_sealed(state) and _V1_BYTES not in state:
            return event_json.decode(topic, state)
        return event_json.decode_fields(topic, self._opened_fields(topic, state))

    def unsealed_state(self, topic: str, state: bytes) -> bytes:
        """The stored JSON with its content opened (or `[forgotten]`), for readers that parse JSON themselves."""
        if topic == _FORGOTTEN_TOPIC:
            self.evict()
        if not is_sealed(state) and _V1_BYTES not in state:
            return state
        return event_json.dump(self._opened_fields(topic, state))

    def _opened_fields(self, topic: str, state: bytes) -> dict[str, Any]:
        if is_sealed(state):
            parts = read_sealed(state)
            data = event_json.parse(parts.clear_json)
            for record in parts.records:
                data.update(self._open(parts.key_name, record))
            return data
        data = event_json.parse(state)
        for field in event_class_for(topic)[0].content_fields:  # format v1: a sealed field is a marked string
            found = read_v1(data.get(field))
            if found is not None:
                key_name, nonce, ciphertext = found
                data.update(self._open(key_name, SealedRecord((field,), nonce, ciphertext,
                                                              associated_data(key_name, field), False)))
        return data

    def _open(self, key_name: str, record: SealedRecord) -> dict[str, Any]:
        if self.cipher is None:  # a store that seals nothing has no keys: whatever was sealed is unreadable
            return {field: FieldCipher.forgotten(field) for field in record.fields}
        return self.cipher.open(key_name, record)

    def evict(self) -> None:
        """Drop every cached key: a subject was forgotten (perhaps by another process)."""
        if self.cipher is not None:
            self.cipher.drop_cached()
        if self.keys is not None:
            self.keys.evict_cache()  # type: ignore[attr-defined]
