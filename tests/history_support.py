"""A generated history for one tenant, as `noumena import` reads it: an agent serving people over many
conversations (sessions with messages, facts asserted from them with provenance), in a JSON-lines file."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

AGENT = "agent:companion"


def history(tenant: str, events: int, seed: int = 1) -> list[dict[str, Any]]:
    """`events` envelopes: the agent, 20 people and 200 memories registered, then conversations of 20-200
    messages, about a third of them followed by a fact the message gave (scoped to the person or the org)."""
    rnd = random.Random(seed)
    out: list[dict[str, Any]] = []

    def add(kind: str, payload: dict[str, Any]) -> None:
        out.append({"event_id": f"h{len(out)}", "tenant": tenant, "type": kind, "payload": payload})

    add("entity.registered", {"ref": AGENT, "label": "Companion"})
    people = [f"person:p{i}" for i in range(20)]
    for person in people:
        add("entity.registered", {"ref": person, "label": f"Person {person[8:]}"})
    memories = [f"memory:m{i}" for i in range(200)]
    for memory in memories:
        add("entity.registered", {"ref": memory, "label": f"likes topic{memory[8:]} and word{rnd.randint(0, 500)}"})
    conversation = 0
    while len(out) < events:
        session, conversation = f"conv{conversation}", conversation + 1
        person = rnd.choice(people)
        add("session.started", {"session_id": session, "agent": AGENT, "serving": person, "kind": "main"})
        for m in range(rnd.randint(20, 200)):
            if len(out) >= events:
                break
            add("message.appended", {"session_id": session, "message_id": f"{session}-m{m}",
                                     "role": rnd.choice(["user", "assistant"]),
                                     "content": f"message {m} about word{rnd.randint(0, 500)}"})
            if rnd.random() < 0.3 and len(out) < events:
                add("fact.asserted", {"subject": person, "relation": rnd.choice(["likes", "knows", "mentions"]),
                                      "object": rnd.choice(memories), "reason": f"said in {session} message {m}",
                                      "scope": person if rnd.random() < 0.5 else "org",
                                      "source": {"session_id": session, "message_ids": [f"{session}-m{m}"]}})
    return out


def write_history(path: Path, tenant: str, events: int, seed: int = 1) -> Path:
    with path.open("w", encoding="utf-8") as out:
        for envelope in history(tenant, events, seed):
            out.write(json.dumps(envelope) + "\n")
    return path
