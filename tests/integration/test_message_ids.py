"""A message is named by its session and message_id: the same message again under a new event_id is a repeat; a
different message reusing the message_id is rejected naming both event ids, never silently dropped."""

from __future__ import annotations

import json

from domain.application.ingestion import Ingestor
from tests.kafka_support import create_tenants


def envelope(event_id: str, message_id: str, content: str, role: str = "user") -> bytes:
    return json.dumps({"event_id": event_id, "tenant": "acme", "type": "message.appended",
                       "payload": {"session_id": "s1", "message_id": message_id, "role": role,
                                   "content": content}}).encode()


def test_a_new_event_id_reusing_a_message_id_is_a_repeat_only_when_it_is_the_same_message(make_noumena):
    noumena = make_noumena("sqlite")
    create_tenants(noumena, ["acme"])
    ingestor = Ingestor(noumena.service)
    setup = [json.dumps({"event_id": "a", "tenant": "acme", "type": "entity.registered",
                         "payload": {"ref": "agent:bot", "label": "Bot"}}).encode(),
             json.dumps({"event_id": "s", "tenant": "acme", "type": "session.started",
                         "payload": {"session_id": "s1", "agent": "agent:bot"}}).encode()]
    assert not ingestor.ingest(setup).rejected

    first = ingestor.ingest([envelope("e1", "m1", "hello")])
    same_again = ingestor.ingest([envelope("e2", "m1", "hello")])  # e.g. a producer that re-sent it
    other = ingestor.ingest([envelope("e3", "m1", "something else")])
    other_role = ingestor.ingest([envelope("e4", "m1", "hello", role="assistant")])

    assert (first.accepted, first.stored_events) == (1, 1)
    assert (same_again.accepted, same_again.stored_events, same_again.duplicates) == (1, 0, 1)
    for result, event_id in ((other, "e3"), (other_role, "e4")):
        (rejected,) = result.rejected
        assert rejected.field == "payload.message_id"
        assert f"appended by event 'e1'; event '{event_id}' reuses it" in rejected.reason
    messages = [e for e in noumena.service.ontology("acme").sessions["s1"].message_ids.items()]
    assert [(m, ids[0]) for m, ids in messages] == [("m1", "e1")]
