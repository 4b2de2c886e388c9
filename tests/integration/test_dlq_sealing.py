"""Dead-lettered copies of a subject's events are sealed with the subject's keys, so a forget reaches them."""

from __future__ import annotations

import json

from consumers.dead_letters.sealing import seal, subject_key, unseal
from domain import commands as c
from infra.bootstrap import bootstrap
from infra.settings import Settings
from tests.conftest import TickingClock

T = "acme"


def _bad_message(session: str, marker: str) -> bytes:
    # role "robot" fails the schema: this envelope is dead-lettered, not stored
    return json.dumps({"event_id": "x1", "tenant": T, "type": "message.appended",
                       "payload": {"session_id": session, "message_id": "m9", "role": "robot",
                                   "content": marker}}).encode()


def test_a_dead_letter_of_a_forgotten_persons_session_becomes_unreadable(tmp_path):
    app = bootstrap(Settings(home=tmp_path, event_store="sqlite"), clock=TickingClock())
    app.service.execute(c.CreateTenant(tenant=T))
    app.service.execute(c.RegisterEntity(tenant=T, ref="person:zhao", label="Zhao"))
    app.service.execute(c.RegisterEntity(tenant=T, ref="agent:a", label="assistant"))
    app.service.execute(c.StartSession(tenant=T, session_id="s1", agent="agent:a", serving="person:zhao"))
    app.service.execute(c.AppendMessage(tenant=T, session_id="s1", message_id="m1", role="user", content="hi"))
    keys = app.log.keys
    assert keys is not None
    original = _bad_message("s1", "MARKER-IN-A-DEAD-LETTER")
    sealed = seal(keys, original, "events/0@17")
    assert b"MARKER" not in sealed  # type: ignore[operator]
    assert unseal(keys, sealed) == original  # `noumena dlq replay` gets the original bytes back
    app.application.forgetting.forget(T, "person:zhao")  # the session's key belongs to the person it serves
    assert unseal(keys, sealed) is None


def test_input_that_names_no_subject_is_kept_as_it_came(tmp_path):
    app = bootstrap(Settings(home=tmp_path, event_store="sqlite"), clock=TickingClock())
    keys = app.log.keys
    assert keys is not None
    for raw in (b"\xff\xfe not json", b'{"no": "tenant"}', b'{"tenant": "acme", "payload": {"x": 1}}'):
        assert subject_key(raw, "events/0@1") is None
        assert seal(keys, raw, "events/0@1") == raw
    fact = json.dumps({"tenant": T, "type": "fact.asserted",
                       "payload": {"subject": "person:li", "relation": "knows", "object": "thing:x"}}).encode()
    key = subject_key(fact, "events/1@5")
    assert key is not None and key.owners == {"person:li"}
