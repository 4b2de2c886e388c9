"""The explorer's browser tests: a real `noumena serve` holding the seed's story (recorded at its story times, so
"believed at" has story-sized gaps) and a generated organization (through the public API), and Debian's headless
Chromium driven by Playwright (it cannot download its own browsers here)."""

from __future__ import annotations

import random
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from demo.story import TENANT
from infra.adapters.api_keys import ApiKeyStore
from infra.settings import Settings
from tests.api_support import Server, Tenant

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "tests" / "artifacts" / "explorer"
"""Screenshots of each step (git-ignored)."""

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]
"""What Chromium needs on these machines: without the background-networking flags its connections to the
closed network are refused many at a time. Playwright gives every launch a fresh --user-data-dir."""


def build_story_home(home: Path) -> str:
    """The seed's story (with the perspectives served and the briefing used at their moments) in a SQLite home,
    and an API key for its tenant. Returns the key."""
    from demo.perspective_story import serve_story

    story = serve_story(home)
    story.close()
    return ApiKeyStore(Settings(home=home).api_keys_path()).create(TENANT, "explorer tests").key


@dataclass
class GeneratedOrg:
    tenant: Tenant
    customers: list[str]
    private: dict[str, set[str]] = field(default_factory=dict)
    """customer -> the refs only their person-scoped facts touch (tickets, addresses)."""
    busy_product: str = ""
    facts: int = 0


HELD_SINCE = "2025-12-01T00:00:00+00:00"
"""When the generated organization's facts began to hold, before every moment the tests look at. (Without a
valid_from a fact holds from its source's occurred_at or its recorded time on, docs/timelines.md; an old
occurred_at would also make it an old memory, weak in the perspective, which these facts are not meant to be.)"""


def _tail(ref: str) -> str:
    return ref.split(":", 1)[1]


def generate_org(server: Server, name: str = "generated", seed: int = 21, customers: int = 30, staff_size: int = 12,
                 projects_size: int = 20, products_size: int = 40) -> GeneratedOrg:
    """An organization made through POST /v1/events: a sales agent, a customer-service agent (a hub, like the
    story's) serving every customer, staff, projects and products linked at random (org scope), and for each
    customer private facts (scope person:<customer>): their tickets, what the tickets are about, their address.
    About 4 facts per customer, 4 per staff member, 4 per project and 3 per product."""
    rng = random.Random(seed)
    tenant = server.tenant(name)
    digits = 2 if max(customers, staff_size, projects_size, products_size) <= 100 else 4
    staff = [f"person:s{k:0{digits}d}" for k in range(staff_size)]
    people = [f"person:c{k:0{digits}d}" for k in range(customers)]
    products = [f"product:p{k:0{digits}d}" for k in range(products_size)]
    projects = [f"project:j{k:0{digits}d}" for k in range(projects_size)]
    entities: list[tuple[str, str, bool]] = [("agent:sales", "the sales agent", False),
                                             ("agent:cs", "the customer-service agent", True)]
    entities += [(ref, f"staff {_tail(ref)}", False) for ref in staff]
    entities += [(ref, f"customer {_tail(ref)}", False) for ref in people]
    entities += [(ref, f"product {_tail(ref)}", False) for ref in products]
    entities += [(ref, f"project {_tail(ref)}", False) for ref in projects]
    events: list[dict[str, Any]] = [
        {"event_id": f"{name}-entity-{ref}", "tenant": name, "type": "entity.registered",
         "payload": {"ref": ref, "label": label, "hub": hub}} for ref, label, hub in entities]
    facts: list[dict[str, Any]] = []

    def fact(subject: str, relation: str, obj: str, scope: str = "org", reason: str | None = None) -> None:
        payload: dict[str, Any] = {"subject": subject, "relation": relation, "object": obj, "scope": scope,
                                   "confidence": round(rng.uniform(0.5, 1.0), 2), "valid_from": HELD_SINCE}
        if reason:
            payload["reason"] = reason
        facts.append(payload)

    org = GeneratedOrg(tenant, people, busy_product=products[0])
    for person in staff:
        fact("agent:sales", "works_with", person, reason="same team")
    # valid time given by the source: a cover that held for a month, a reporting line from February on
    facts.append({"subject": "agent:sales", "relation": "covered_for", "object": staff[0], "scope": "org",
                  "reason": "holiday cover", "valid_from": "2026-01-05T00:00:00+00:00",
                  "valid_to": "2026-02-05T00:00:00+00:00"})
    facts.append({"subject": "agent:sales", "relation": "reports_to", "object": staff[1], "scope": "org",
                  "reason": "new reporting line", "valid_from": "2026-02-01T00:00:00+00:00"})
    for person in staff:
        for project in rng.sample(projects, 3):
            fact(person, "works_on", project, reason=f"{_tail(person)} staffed on {_tail(project)}")
    for project in projects:
        for product in rng.sample(products, 4):
            fact(project, "uses", product, reason=f"{_tail(project)} builds on {_tail(product)}")
    for k, product in enumerate(products):
        for other in rng.sample(products, 3):
            if other != product:
                fact(product, "related_to", other)
        if k < 10:
            fact(products[0], "bundles", product, reason="the flagship bundle")
    for k, person in enumerate(people):
        fact("agent:cs", "serves", person, reason="customer service for all customers")
        ticket, address = f"ticket:t{k:0{digits}d}", f"address:a{k:0{digits}d}"
        events += [{"event_id": f"{name}-entity-{ref}", "tenant": name, "type": "entity.registered",
                    "payload": {"ref": ref, "label": label}}
                   for ref, label in ((ticket, f"ticket of {_tail(person)}"), (address, f"home of {_tail(person)}"))]
        scope = person
        fact(person, "reported", ticket, scope=scope, reason="a complaint")
        fact(person, "lives_at", address, scope=scope, reason="private address")
        fact(ticket, "about", rng.choice(products), scope=scope)
        org.private[person] = {ticket, address}
    events += [{"event_id": f"{name}-fact-{n}", "tenant": name, "type": "fact.asserted", "payload": payload}
               for n, payload in enumerate(facts)]
    org.facts = len(facts)
    for start in range(0, len(events), 1000):
        written = tenant.client.post("/v1/events", json={"events": events[start:start + 1000]})
        assert written.status_code == 200, written.text
    position = written.json()["position"]
    assert tenant.client.get("/v1/graph", params={"min_position": position, "limit": 1}).status_code == 200
    return org


def page_state(page: Any) -> str:
    """What a test that timed out needs to tell a slow server from a page that never asked: the problem the page
    shows, whether it is busy, its renders, the requests not yet answered (and for how long), the focused element."""
    return str(page.evaluate("""(() => { const x = window.__explorer; if (!x) return 'no explorer on the page';
        return {problem: x.problem, busy: x.busy, renders: x.renders, waiting: x.waiting && x.waiting(),
                timings: x.timings.slice(-3), focused: document.activeElement && document.activeElement.id}; })()"""))


def wait_until(page: Any, expression: str, timeout: float = 20.0) -> Any:
    """Poll a page expression until it is truthy (the page's policy forbids eval, which Playwright's own
    wait_for_function needs; page.evaluate goes through the debugging protocol). Fails with the page's state
    (`page_state`)."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        value = page.evaluate(expression)
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {expression!r}; {page_state(page)}")
        page.wait_for_timeout(50)
