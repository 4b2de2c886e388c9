"""The perspective index follows entity merges: what named the merged entity (refs, scopes, sessions, later facts)
stands for the entity it was merged into, in the follower, the fold and the bulk load alike."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import polars as pl

from domain.activation import DEFAULT_PARAMETERS as P
from domain.application.entities import merge_entities
from domain.commands import AssertFact, CreateTenant, RegisterEntity, StartSession
from projections.perspective_index import PerspectiveIndex, Viewpoint
from projections.perspective_load import from_frames
from projections.perspectives import Perspectives
from tests.conftest import TickingClock
from tests.perspective_support import Org


def _merged_org() -> tuple[Org, dict[str, str]]:
    org = Org()
    for ref in ("agent:a", "person:li", "person:li2", "thing:x", "thing:y", "thing:z"):
        org.entity(ref)
    org.session("s1", "agent:a", "person:li2")
    facts = {
        "moved": org.fact("person:li2", "prefers", "thing:x"),
        "scoped": org.fact("thing:y", "about", "thing:x", scope="person:li2"),  # li2's, not touching li2
        "session": org.fact("agent:a", "drafted", "thing:y", scope="session:s1"),  # a session that served li2
        "own": org.fact("person:li", "owns", "thing:z"),
    }
    org.advance(1)
    # what `merge_entities` writes: the merge, then each current fact of li2 ended and asserted on li
    org.record("entity.merged", merged_ref="person:li2", into_ref="person:li", reason="reviewed: same entity")
    org.invalidate(facts["moved"])
    facts["moved_again"] = org.fact("person:li", "prefers", "thing:x")
    org.advance(1)
    facts["later"] = org.fact("person:li2", "knows", "thing:y")  # named by the merged ref after the merge
    org.advance(1)
    return org, facts


def _seen(index: PerspectiveIndex, view: Viewpoint, now: float) -> dict[str, tuple[float, int, str, str]]:
    walked = index.walk(view, P, now)
    return {index.fact_ids.at(int(f)): (round(float(a), 9), int(h), index.refs[int(v)], index.refs[
        int(index.src.data[int(f)])]) for f, a, h, v in zip(walked.facts, walked.activation, walked.hops,
                                                             walked.via, strict=True)}


def _frames(index: PerspectiveIndex, merged: dict[str, str]) -> PerspectiveIndex:
    """The index as the DuckDB read model would hand it over: facts as asserted, entities with `merged_into`."""
    n = index.fact_count
    subjects = {index.fact_ids.at(k): index.refs[int(index.src.data[k])] for k in range(n)}
    facts = pl.DataFrame({
        "fact_id": [index.fact_ids.at(k) for k in range(n)],
        "subject": [subjects[index.fact_ids.at(k)] for k in range(n)], "relation": [index.rel_names[r] for r in
                                                                               index.rel.view],
        "object": [index.refs[o] for o in index.dst.view], "scope": [index.scopes.names[s] for s in index.scope.view],
        "reason": [None] * n, "confidence": index.conf.view.astype(float),
        "status": [["current", "invalidated", "archived"][s] for s in index.status.view],
        "asserted_at": index.asserted.view,
    })
    entities = pl.DataFrame({"ref": index.refs, "label": index.labels, "hub": index.hub.view.tolist(),
                             "merged_into": [merged.get(r) for r in index.refs]})
    sessions = pl.DataFrame({"session_id": ["s1"], "agent": ["agent:a"], "serving": ["person:li2"]})
    return from_frames("acme", entities, facts, sessions)


def test_a_merged_person_is_served_as_the_one_it_was_merged_into():
    org, f = _merged_org()
    now = org.now.timestamp()
    folded, incremental = org.index(), org.index(one_by_one=True)
    bulk = _frames(folded, {"person:li2": "person:li"})
    view = Viewpoint("agent:a", serving="person:li")
    seen = _seen(folded, view, now)
    # li2's scope and the session that served li2 are li's now; the moved fact is there once, on li
    assert {f["moved_again"], f["scoped"], f["session"], f["own"], f["later"]} <= set(seen)
    assert f["moved"] not in seen
    assert seen[f["later"]][3] == "person:li"  # a fact naming li2 after the merge hangs on li
    assert seen[f["later"]][1] == 1  # one hop from the person served
    # serving the merged ref is serving the survivor; the follower and the bulk load agree with the fold
    assert _seen(folded, Viewpoint("agent:a", serving="person:li2"), now) == seen
    assert _seen(incremental, view, now) == seen
    assert _seen(bulk, view, now) == seen


def test_before_the_merge_the_two_are_apart():
    org, f = _merged_org()
    merge_at = datetime.fromisoformat(next(d["recorded_at"] for _p, t, d in org.records if t == "entity.merged"))
    before = org.index(until=merge_at - timedelta(seconds=1))
    seen = _seen(before, Viewpoint("agent:a", serving="person:li"), merge_at.timestamp())
    assert not {f["scoped"], f["session"]} & set(seen)


def test_the_service_follows_a_merge_made_by_the_workflow(make_noumena, tmp_path):  # type: ignore[no-untyped-def]
    clock = TickingClock(datetime(2026, 3, 1, tzinfo=UTC), step=timedelta(minutes=1))
    noumena = make_noumena("sqlite", clock=clock)
    run = noumena.service.execute
    run(CreateTenant(tenant="acme"))
    for ref in ("agent:a", "person:li", "person:li2", "thing:x", "thing:y"):
        run(RegisterEntity(tenant="acme", ref=ref, label=ref))
    run(StartSession(tenant="acme", session_id="s1", agent="agent:a", serving="person:li2"))
    run(AssertFact(tenant="acme", subject="person:li2", relation="prefers", object="thing:x"))
    scoped = run(AssertFact(tenant="acme", subject="thing:y", relation="about", object="thing:x",
                            scope="person:li2")).events[-1].fact_id  # type: ignore[attr-defined]
    perspectives = Perspectives(noumena.log, clock)
    before = perspectives.perspective_for("acme", "agent:a", serving="person:li")
    assert not any(i.object == "thing:x" for i in before.items)
    assert merge_entities(noumena.service, "acme", "person:li2", "person:li") == 1
    after = perspectives.perspective_for("acme", "agent:a", serving="person:li")
    shown = {i.fact_id: i for i in after.items}
    assert any(i.subject == "person:li" and i.object == "thing:x" for i in shown.values())
    assert scoped in shown  # li2's own scope is li's now
    again = perspectives.perspective_for("acme", "agent:a", serving="person:li2")
    assert [i.fact_id for i in again.items] == [i.fact_id for i in after.items]
