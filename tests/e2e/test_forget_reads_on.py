"""Forgetting without an outage: on a real `noumena serve`, while a tenant forgets a person behind thousands of facts
(the live read model is cleaned of them, then rebuilt from the log behind it), that tenant's own reads go on: they
answer 200, and none shows the forgotten person's words once one did not. The forget answers once the live read
model is cleaned, before the rebuilt file is in (`/readyz` lists the tenant under `purging` until then).

What is asserted is what a reader sees, not a latency: every read answered 200, none showed a marker of the
forgotten person after the forget answered, each kind of read was answered while the rebuild ran (seen by the
reader itself: the tenant `purging` just before and just after the read), and what was not forgotten (another
person's name and facts) is served as it was."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx

from tests.api_support import Server, Tenant, start_server, stop_server

FACTS = 3_000
SECRET = "LI-SECRET"


def _fill(tenant: Tenant) -> list[str]:
    """`person:li` knows FACTS people (their names are theirs; the reasons are Li's) and likes tea; `person:wu`
    prefers tea. Returns the ids of the two tea facts (Li's, Wu's)."""
    name = tenant.name
    events = [{"event_id": f"{name}-li", "tenant": name, "type": "entity.registered",
               "payload": {"ref": "person:li", "label": f"Li {SECRET}", "aliases": [f"Lili {SECRET}"]}},
              {"event_id": f"{name}-wu", "tenant": name, "type": "entity.registered",
               "payload": {"ref": "person:wu", "label": "Wu KEEP-WU"}},
              {"event_id": f"{name}-tea", "tenant": name, "type": "entity.registered",
               "payload": {"ref": "memory:tea", "label": "green tea"}}]
    events += [{"event_id": f"{name}-p{i}", "tenant": name, "type": "entity.registered",
                "payload": {"ref": f"person:p{i}", "label": f"person {i}"}} for i in range(FACTS)]
    events += [{"event_id": f"{name}-f{i}", "tenant": name, "type": "fact.asserted",
                "payload": {"subject": "person:li", "relation": "knows", "object": f"person:p{i}",
                            "reason": f"Li met them at fair {i} {SECRET}"}} for i in range(FACTS)]
    for start in range(0, len(events), 1000):
        written = tenant.client.post("/v1/events", json={"events": events[start:start + 1000]}, timeout=300)
        assert written.status_code == 200, written.text
    fact_ids = []
    for fact in ({"subject": "person:li", "relation": "likes", "object": "memory:tea", "reason": f"Li said {SECRET}"},
                 {"subject": "person:wu", "relation": "prefers", "object": "memory:tea",
                  "reason": "Wu said so KEEP-WU-REASON", "scope": "person:wu"}):
        written = tenant.client.post("/v1/facts", json=fact)
        assert written.status_code == 200, written.text
        fact_ids.append(written.json()["fact_id"])
    return fact_ids


def test_a_tenant_forgetting_a_person_reads_on_without_ever_showing_them(tmp_path: Path) -> None:
    server: Server = start_server(tmp_path / "home")
    try:
        alpha = server.tenant("alpha")
        fact_ids = _fill(alpha)
        li_fact, wu_fact = fact_ids
        at = {"min_position": alpha.client.get("/readyz").json()["log_position"]}
        before = alpha.client.get(f"/v1/facts/{li_fact}", params=at)
        assert before.status_code == 200 and SECRET in before.text, before.text

        reads = {"li": "/v1/entities/person:li", "wu": "/v1/entities/person:wu", "li-fact": f"/v1/facts/{li_fact}",
                 "wu-fact": f"/v1/facts/{wu_fact}", "graph": "/v1/graph?limit=20", "find": "/v1/entities?q=Li"}
        answers: list[tuple[float, str, int, str, bool]] = []  # (answered at, read, status, body, while rebuilding)
        stop = threading.Event()

        def purging(client: httpx.Client) -> bool:
            return alpha.name in client.get("/readyz").json()["purging"]

        def read_alpha() -> None:
            with httpx.Client(base_url=server.url, timeout=120,
                              headers={"Authorization": f"Bearer {alpha.key}"}) as client:
                while not stop.is_set():
                    for name, path in reads.items():
                        before = purging(client)
                        answer = client.get(path)
                        answers.append((time.monotonic(), name, answer.status_code, answer.text,
                                        before and purging(client)))
                    time.sleep(0.02)

        reader = threading.Thread(target=read_alpha)
        reader.start()
        time.sleep(0.5)
        started = time.monotonic()
        forget = alpha.client.post("/v1/forget", json={"subject": "person:li"}, timeout=300)
        ended = time.monotonic()
        rebuilding_when_answered = purging(alpha.client)
        deadline = time.monotonic() + 300
        while purging(alpha.client) and time.monotonic() < deadline:
            time.sleep(0.1)
        rebuilt = time.monotonic()
        time.sleep(0.5)
        stop.set()
        reader.join(180)

        assert forget.status_code == 200, forget.text
        assert any(line.startswith("projections: cleaned in the live read model")
                   for line in forget.json()["files_rewritten"]), forget.json()["files_rewritten"]
        assert rebuilding_when_answered, "the forget waited for the rebuilt read model"
        assert rebuilt < deadline, "the rebuilt read model never came in"
        print(f"\nforget of {FACTS:,} facts: the call {ended - started:.2f} s, the rebuilt file in "
              f"{rebuilt - started:.2f} s; {len(answers)} reads of the tenant, "
              f"{sum(1 for a in answers if a[4])} of them while the rebuild ran")
        assert [(name, status, round(when - started, 2)) for when, name, status, _, _ in answers if status != 200] == []
        # a read may show Li until the forget reaches the read model; from the first one that does not, none does
        for name in reads:
            shown = [SECRET in body for _, read, _, body, _ in answers if read == name]
            assert True not in shown[shown.index(False) if False in shown else len(shown):], (name, shown)
        assert all(SECRET not in body for when, _, _, body, _ in answers if when > ended)
        # every kind of read answered while the rebuild ran, none of them showing Li
        rebuilding = [a for a in answers if a[4]]
        assert {name for _, name, _, _, _ in rebuilding} == set(reads), (ended - started, rebuilt - started)
        assert all(SECRET not in body for _, _, _, body, _ in rebuilding)
        last = {name: body for _, name, _, body, _ in answers}
        assert "KEEP-WU" in last["wu"] and "KEEP-WU-REASON" in last["wu-fact"] and "[forgotten]" in last["li"]
    finally:
        stop_server(server)
