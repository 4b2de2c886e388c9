"""One tenant's forget never stalls the others: a real `noumena serve` process, a tenant forgetting a
person behind thousands of facts (the read model is rebuilt without them), and meanwhile `/healthz` polled, a
large body pushed and refused, and another tenant's perspective and entity reads asked in a loop.

Watched from the forget's request until the rebuilt read model is in (`/readyz` lists the tenant under `purging`
until then). Latencies are printed; what is asserted is responsiveness with margins for a loaded 2-core machine:
every request answered, no `/healthz` above 1 s or, on a machine so loaded that /healthz already took longer
before the forget, above twice the longest seen then, and the other tenant answered all along (no gap in its
answers as long as half the forget). Before the purge ran in the background, the other tenant's reads waited for
the whole rebuild (about the forget's length). The 100 ms goal is measured by
tests/benchmarks/bench_forget_isolation.py, not asserted here."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from tests.api_support import Server, Tenant, start_server, stop_server

FACTS = 8_000
HEALTHZ_LIMIT_SECONDS = 1.0


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def _fill(tenant: Tenant, facts: int) -> None:
    """`person:li` knows `facts` people: forgetting Li deletes a key per fact and rebuilds the read model."""
    name = tenant.name
    people = [{"event_id": f"{name}-li", "tenant": name, "type": "entity.registered",
               "payload": {"ref": "person:li", "label": "Li LI-SECRET"}}]
    people += [{"event_id": f"{name}-p{i}", "tenant": name, "type": "entity.registered",
                "payload": {"ref": f"person:p{i}", "label": f"person {i}"}} for i in range(facts)]
    knows = [{"event_id": f"{name}-f{i}", "tenant": name, "type": "fact.asserted",
              "payload": {"subject": "person:li", "relation": "knows", "object": f"person:p{i}",
                          "reason": f"Li met them at fair {i} LI-SECRET"}} for i in range(facts)]
    for batch in (people, knows):
        for start in range(0, len(batch), 1000):
            written = tenant.client.post("/v1/events", json={"events": batch[start:start + 1000]}, timeout=300)
            assert written.status_code == 200, written.text


def _huge_body() -> Iterator[bytes]:
    chunk = b"x" * (1 << 20)
    for _ in range(64):  # 64 MiB, chunked (no Content-Length): counted as it comes, refused beyond the limit
        yield chunk


def test_a_tenant_forgetting_thousands_of_facts_never_stalls_healthz_or_another_tenant(tmp_path: Path) -> None:
    server: Server = start_server(tmp_path / "home")
    try:
        alpha, beta = server.tenant("alpha"), server.tenant("beta")
        _fill(alpha, FACTS)
        for ref, label in (("agent:assistant", "the assistant"), ("person:wu", "Wu"), ("memory:cny", "in CNY")):
            assert beta.client.post("/v1/entities", json={"ref": ref, "label": label}).status_code == 200
        written = beta.client.post("/v1/facts", json={"subject": "person:wu", "relation": "prefers",
                                                      "object": "memory:cny", "reason": "said so"}).json()
        view = {"agent": "agent:assistant", "focus": "person:wu"}
        warm = beta.client.get("/v1/perspectives", params=view | {"min_position": written["position"]})
        assert warm.status_code == 200 and warm.json()["recall"]["fact_ids"] == [written["fact_id"]], warm.text
        li = alpha.client.get("/v1/entities/person:li", params={"min_position": alpha.client.get(
            "/readyz").json()["log_position"]})
        assert li.status_code == 200 and "LI-SECRET" in li.text, li.text

        stop = threading.Event()
        healthz: list[tuple[float, float, int]] = []  # (sent at, seconds, status)
        answers: list[tuple[float, float, int, int]] = []  # beta: (answered at, perspective seconds, statuses)
        refused: list[int] = []

        def poll_healthz() -> None:
            with httpx.Client(base_url=server.url, timeout=30) as client:
                while not stop.is_set():
                    sent = time.monotonic()
                    status = client.get("/healthz").status_code
                    healthz.append((sent, time.monotonic() - sent, status))
                    time.sleep(0.01)

        def read_beta() -> None:
            with httpx.Client(base_url=server.url, timeout=60,
                              headers={"Authorization": f"Bearer {beta.key}"}) as client:
                while not stop.is_set():
                    sent = time.monotonic()
                    perspective = client.get("/v1/perspectives", params=view)
                    seconds = time.monotonic() - sent
                    entity = client.get("/v1/entities/person:wu")
                    answers.append((time.monotonic(), seconds, perspective.status_code, entity.status_code))
                    time.sleep(0.02)

        def push_huge_bodies() -> None:
            with httpx.Client(base_url=server.url, timeout=60,
                              headers={"Authorization": f"Bearer {beta.key}"}) as client:
                while not stop.is_set():
                    try:
                        refused.append(client.post("/v1/events", content=_huge_body(),
                                                   headers={"Content-Type": "application/json"}).status_code)
                    except httpx.HTTPError:  # the server may close the connection once it refused the body
                        refused.append(413)

        threads = [threading.Thread(target=f) for f in (poll_healthz, read_beta, push_huge_bodies)]
        for thread in threads:
            thread.start()
        time.sleep(1.0)
        forget: dict[str, object] = {}

        def run_forget() -> None:
            forget["response"] = alpha.client.post("/v1/forget", json={"subject": "person:li"}, timeout=300)

        started = time.monotonic()
        first = threading.Thread(target=run_forget)
        first.start()
        time.sleep(0.1)  # (the forget answers once the live file is redacted: a second or less when quiet)
        second = alpha.client.post("/v1/forget", json={"subject": "person:p1"})
        second_while_running = first.is_alive()
        first.join(300)
        answered = time.monotonic()
        deadline = answered + 300
        while "alpha" in alpha.client.get("/readyz", timeout=120).json()["purging"] and time.monotonic() < deadline:
            time.sleep(0.1)
        ended = time.monotonic()
        time.sleep(0.5)
        stop.set()
        for thread in threads:
            thread.join(120)

        response = forget["response"]
        assert isinstance(response, httpx.Response) and response.status_code == 200, response
        receipt = response.json()
        assert receipt["keys_deleted"] >= FACTS and receipt["receipt_id"].startswith("fgt-")
        assert any(line.startswith("projections: cleaned in the live read model")
                   for line in receipt["files_rewritten"]), receipt["files_rewritten"]
        assert ended < deadline, "the rebuilt read model never came in"
        assert second_while_running, "the first forget ended within 0.1 s: the second proves nothing"
        assert second.status_code == 409, second.text
        assert "person:li" in second.json()["detail"] and second.json()["field"] == "subject"
        after = alpha.client.get("/v1/entities/person:li")
        assert after.status_code == 200 and "LI-SECRET" not in after.text, after.text

        during = [(seconds, status) for sent, seconds, status in healthz if started <= sent <= ended]
        latencies = [seconds for seconds, _ in during]
        beta_during = [a for a in answers if started <= a[0] <= ended]
        gaps = [b[0] - a[0] for a, b in zip(answers, answers[1:], strict=False) if b[0] >= started and a[0] <= ended]
        before = [seconds for sent, seconds, _ in healthz if sent < started]
        limit = max(HEALTHZ_LIMIT_SECONDS, 2 * max(before, default=0.0))
        print(f"\nforget of {FACTS:,} facts: the call {answered - started:.2f} s, the rebuilt file in"
              f" {ended - started:.2f} s; /healthz before: {len(before)}, max {max(before, default=0) * 1000:.0f} ms;"
              f" meanwhile: {len(latencies)} answers, "
              f"p50 {_p(latencies, 50) * 1000:.0f} ms, p99 {_p(latencies, 99) * 1000:.0f} ms, "
              f"max {max(latencies) * 1000:.0f} ms; other tenant: {len(beta_during)} perspectives and entity "
              f"reads, perspective p50 {_p([a[1] for a in beta_during], 50) * 1000:.0f} ms, longest gap between "
              f"answers {max(gaps):.2f} s; huge bodies refused: {len(refused)}")
        assert all(status == 200 for _, status in during)
        assert len(during) >= 10 and max(latencies) < limit, (max(latencies), limit)
        assert refused and set(refused) == {413}, refused
        assert beta_during and all(p == 200 and e == 200 for _, _, p, e in beta_during), beta_during
        assert max(gaps) < max(1.0, (ended - started) / 2), (max(gaps), ended - started)
    finally:
        stop_server(server)
