"""A generated organization with a dated history, as wire envelopes (what `noumena import` reads), and the check
that its views keep a full budget: for the salience tests and bench_salience.py."""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import numpy as np

from domain.activation import DEFAULT_PARAMETERS, ActivationParameters
from projections.perspective_index import TIER_CODES, PerspectiveIndex, Viewpoint

REACHABLE_NEEDED = 11
"""A view with at least this many reachable facts must show a full budget (4 full, 7 gist)."""


@dataclass
class DatedOrg:
    tenant: str
    envelopes: list[dict[str, Any]]
    agents: list[str]
    persons: list[str]


def dated_org(now: datetime, tenant: str = "dated", entities: int = 800, facts: int = 6_000, days: float = 365.0,
              org_share: float = 0.8, seed: int = 27) -> DatedOrg:
    """An organization whose history spans the `days` before `now`, in the order it happened: agents serving
    persons, persons and things related (a few popular things), `org_share` of the facts org-scoped and the rest
    about one person (their scope), some facts said again later (corroborations), and each person's sessions over
    the period. Every envelope carries its `occurred_at`."""
    rng = random.Random(seed)
    n_agent, n_person = max(2, entities // 20), max(2, entities * 3 // 10)
    agents = [f"agent:a{k}" for k in range(n_agent)]
    persons = [f"person:p{k}" for k in range(n_person)]
    things = [f"thing:t{k}" for k in range(entities - n_agent - n_person)]
    popularity = [1.0 / (k + 1) ** 0.8 for k in range(len(things))]
    start = now - timedelta(days=days)
    events: list[tuple[datetime, str, dict[str, Any]]] = []

    def moment() -> datetime:
        return start + timedelta(seconds=rng.uniform(0, days * 86_400 - 60))

    for k, person in enumerate(persons):  # each agent serves a share of the persons
        events.append((moment(), "fact.asserted", {"subject": agents[k % n_agent], "relation": "serves",
                                                   "object": person, "reason": "assigned"}))
    asserted: list[dict[str, Any]] = []
    while len(asserted) + n_person < facts:
        person = rng.choice(persons)
        thing = rng.choices(things, popularity)[0]
        roll = rng.random()
        if roll < org_share * 0.5:
            payload = {"subject": person, "relation": rng.choice(["works_on", "owns", "asked_about"]),
                       "object": thing}
        elif roll < org_share:
            payload = {"subject": thing, "relation": rng.choice(["part_of", "depends_on", "priced_in"]),
                       "object": rng.choices(things, popularity)[0]}
        else:
            payload = {"subject": person, "relation": rng.choice(["prefers", "mentioned", "worried_about"]),
                       "object": thing, "scope": person}
        if payload["subject"] == payload["object"]:
            continue
        payload |= {"reason": f"said in conversation {len(asserted)}", "confidence": round(rng.uniform(0.5, 1), 2)}
        asserted.append(payload)
        events.append((moment(), "fact.asserted", payload))
    for payload in rng.sample(asserted, len(asserted) // 20):  # said again, later
        events.append((moment(), "fact.asserted", dict(payload)))
    for person in persons:
        for _ in range(rng.randint(0, 6)):
            events.append((moment(), "session.started", {"session_id": f"s{len(events)}",
                                                         "agent": rng.choice(agents), "serving": person}))
    events.sort(key=lambda e: e[0])
    envelopes = [{"event_id": f"{tenant}-e{k}", "tenant": tenant, "type": "entity.registered",
                  "payload": {"ref": ref, "label": ref.split(":")[1].upper()}}
                 for k, ref in enumerate(agents + persons + things)]
    for when, kind, payload in events:
        envelopes.append({"event_id": f"{tenant}-{len(envelopes)}", "tenant": tenant, "type": kind,
                          "occurred_at": when.isoformat(), "payload": payload})
    return DatedOrg(tenant, envelopes, agents, persons)


@dataclass
class ViewCheck:
    views: int
    """agent x person views with at least REACHABLE_NEEDED reachable facts"""
    short: list[tuple[str, str, int, int, int]]
    """(agent, person, reachable, full, gist) of those views without a full budget"""
    full_median: float
    gist_median: float
    marker_median: float


def check_views(index: PerspectiveIndex, agents: list[str], persons: list[str], now: float,
                p: ActivationParameters = DEFAULT_PARAMETERS) -> ViewCheck:
    """Every agent x person view: a fact is reachable when the walk reaches it (exhaustively) with a spread that
    puts it above tau with a single fresh use (A - B > tau); a view with at least REACHABLE_NEEDED of them must show
    4 full and 7 gist."""
    exhaustive = p.model_copy(update={"cut_off": False})
    short, fulls, gists, markers = [], [], [], []
    views = 0
    for agent in agents:
        for person in persons:
            viewpoint = Viewpoint(agent, serving=person)
            reach = index.walk(viewpoint, exhaustive, now)
            reachable = int(np.count_nonzero(reach.activation - reach.base > p.threshold))
            if reachable < REACHABLE_NEEDED:
                continue
            views += 1
            walked = index.walk(viewpoint, p, now)
            full = int(np.count_nonzero(walked.tiers == TIER_CODES["full"]))
            gist = int(np.count_nonzero(walked.tiers == TIER_CODES["gist"]))
            fulls.append(full)
            gists.append(gist)
            markers.append(int(np.count_nonzero(walked.tiers == TIER_CODES["marker"])))
            if full < p.full_capacity or gist < p.gist_capacity:
                short.append((agent, person, reachable, full, gist))
    return ViewCheck(views, short, _median(fulls), _median(gists), _median(markers))


def _median(values: list[int]) -> float:
    return float(np.median(values)) if values else 0.0
