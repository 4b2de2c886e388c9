"""Forgetting by tier, not by calendar (docs/perspectives.md): an org fact does not fade with time alone, a
person's fact fades with that person's own activity, and what a fact last got is said in words."""

from __future__ import annotations

import math
from datetime import timedelta

from domain.activation import DEFAULT_PARAMETERS, Tier
from projections.perspective_index import TIERS_BY_CODE, PerspectiveIndex, Viewpoint, Walked
from projections.perspective_salience import salience_note, salience_notes
from tests.perspective_support import Org

CALENDAR = DEFAULT_PARAMETERS.model_copy(update={"salience": "calendar"})


def _view(org: Org, view: Viewpoint, p=DEFAULT_PARAMETERS) -> tuple[PerspectiveIndex, Walked, dict[str, tuple]]:
    index = org.index()
    walked = index.walk(view, p, org.now.timestamp())
    rows = {index.fact_ids.at(int(f)): (TIERS_BY_CODE[int(t)], float(b), k)
            for k, (f, t, b) in enumerate(zip(walked.facts, walked.tiers, walked.base, strict=True))}
    return index, walked, rows


def _clinic() -> tuple[Org, str]:
    """A clinic assistant serving Dr Zhou; Zhou treats Li; Li's penicillin allergy (org scope, two hops away)
    was recorded three months ago and nobody has asked for it since; newer facts came in every week."""
    org = Org()
    for ref in ("agent:clinic", "person:zhou", "person:li", "drug:penicillin", "room:3", "shift:night"):
        org.entity(ref)
    org.fact("agent:clinic", "serves", "person:zhou")
    org.fact("person:zhou", "treats", "person:li")
    allergy = org.fact("person:li", "allergic_to", "drug:penicillin", confidence=0.95,
                       reason="anaphylaxis in 2019, hospital record")
    for week in range(13):
        org.advance(7)
        if week == 0:
            org.fact("person:zhou", "works_in", "room:3")
        org.fact("agent:clinic", "covers", f"shift:{week}")
    return org, allergy


def test_an_org_fact_two_hops_away_and_three_months_old_never_used_stays_in_view():
    org, allergy = _clinic()
    _index, _walked, rows = _view(org, Viewpoint("agent:clinic", serving="person:zhou"))
    assert rows[allergy][0] is Tier.GIST  # in view: 10th of what the walk reaches, past the 4 full, among the 7 gist
    assert rows[allergy][1] == 0.0  # its assertion weighs 1 at any age: B = ln 1
    # the calendar model (weeks since the assertion) had forgotten it
    _index, _walked, by_calendar = _view(org, Viewpoint("agent:clinic", serving="person:zhou"), CALENDAR)
    assert by_calendar[allergy][0] is Tier.FORGOTTEN


def _regular(later_sessions: int, silent_days: float) -> tuple[Org, str]:
    """Li told the assistant she likes jazz; then `later_sessions` sessions with Li (other topics), or none and
    `silent_days` of silence."""
    org = Org()
    for ref in ("agent:a", "person:li", "thing:jazz", "thing:tea", "thing:topic"):
        org.entity(ref, label="Li" if ref == "person:li" else None)
    org.session("first", "agent:a", "person:li")
    jazz = org.fact("person:li", "likes", "thing:jazz", scope="person:li")
    org.fact("person:li", "drinks", "thing:tea", scope="person:li")
    for k in range(later_sessions):
        org.advance(1)
        org.session(f"later-{k}", "agent:a", "person:li")
        org.fact("agent:a", "discussed", "thing:topic", scope=f"session:later-{k}")  # another topic
    org.advance(silent_days)
    return org, jazz


def test_a_persons_fact_fades_with_thirty_later_sessions_of_that_person_on_other_topics():
    org, jazz = _regular(30, 0)
    index, walked, rows = _view(org, Viewpoint("agent:a", serving="person:li"))
    tier, base, k = rows[jazz]
    assert base == math.log(31 ** -0.5)  # 30 episodes of Li's since its only use
    assert tier is Tier.FORGOTTEN
    note = salience_note(index, int(walked.facts[k]), agent=index.entity_ids["agent:a"],
                         serving=index.entity_ids["person:li"], now=org.now.timestamp(), p=DEFAULT_PARAMETERS,
                         rank=k, activation=float(walked.activation[k]), forgotten=True)
    assert note.startswith("episodic (Li's): last used 30 sessions of Li's ago (asserted ")
    assert "below the threshold" in note


def test_a_persons_fact_does_not_fade_while_that_person_is_silent_for_three_months():
    org, jazz = _regular(0, 91)
    _index, _walked, rows = _view(org, Viewpoint("agent:a", serving="person:li"))
    assert rows[jazz][1] == 0.0
    assert rows[jazz][0] is Tier.FULL
    fresh, _ = _regular(0, 0)
    assert _view(fresh, Viewpoint("agent:a", serving="person:li"))[2][jazz][:2] == rows[jazz][:2]  # the same view
    _index, _walked, by_calendar = _view(org, Viewpoint("agent:a", serving="person:li"), CALENDAR)
    assert by_calendar[jazz][1] < -1  # the calendar model: 13 weeks took 1.28 off


def test_a_later_mention_of_the_facts_thing_is_a_use_and_a_mention_of_the_person_is_not():
    org, jazz = _regular(30, 0)
    org.fact("person:li", "asked_about", "thing:tea", scope="person:li")  # names Li, not jazz
    _index, _walked, rows = _view(org, Viewpoint("agent:a", serving="person:li"))
    assert rows[jazz][1] == math.log(31 ** -0.5)
    org.advance(1)
    org.session("again", "agent:a", "person:li")
    org.fact("thing:jazz", "played_at", "thing:topic")  # a later fact names jazz: a use, then one episode
    _index, _walked, rows = _view(org, Viewpoint("agent:a", serving="person:li"))
    assert rows[jazz][1] == math.log(32 ** -0.5 + 1)


def test_corroborations_and_corrections_count_as_uses_dated_where_they_happened():
    org = Org()
    for ref in ("agent:a", "thing:x", "thing:y"):
        org.entity(ref)
    plain = org.fact("agent:a", "knows", "thing:x")
    backed = org.fact("agent:a", "knows", "thing:y")
    org.advance(30)
    org.corroborate(backed, confidence=0.8, occurred=org.now - timedelta(days=10))
    org.correct(backed)
    index, walked, rows = _view(org, Viewpoint("agent:a"))
    assert rows[plain][1] == 0.0 and rows[backed][1] == math.log(3)  # org: the log's uses never age
    assert rows[backed][2] < rows[plain][2]
    k = rows[plain][2]
    note = salience_note(index, int(walked.facts[k]), agent=index.entity_ids["agent:a"], serving=-1,
                         now=org.now.timestamp(), p=DEFAULT_PARAMETERS, rank=k,
                         activation=float(walked.activation[k]), forgotten=False)
    assert note.startswith("semantic (org): does not fade with time; last used 2026-01-01 (asserted) · 1 use")
    assert note.endswith("out-ranked by 1")


def test_stored_parameters_without_a_salience_model_read_back_as_the_calendar_model():
    stored = DEFAULT_PARAMETERS.model_dump(exclude={"salience"})
    assert type(DEFAULT_PARAMETERS).model_validate(stored).salience == "calendar"
    assert type(DEFAULT_PARAMETERS).model_validate(DEFAULT_PARAMETERS.model_dump()).salience == "tiers"


def test_a_session_fact_fades_in_days_and_says_so_beside_an_org_and_a_person_fact():
    org = Org()
    for ref in ("agent:a", "person:li", "thing:x", "thing:y", "thing:z"):
        org.entity(ref, label="Li" if ref == "person:li" else None)
    org.session("s", "agent:a", "person:li")
    in_session = org.fact("agent:a", "drafts", "thing:x", scope="session:s")
    about_li = org.fact("person:li", "likes", "thing:y", scope="person:li")
    shared = org.fact("agent:a", "knows", "thing:z")
    org.advance(2)
    index, walked, rows = _view(org, Viewpoint("agent:a", serving="person:li"))
    assert rows[in_session][1] == math.log(3 ** -0.5)  # two days: (1 + 2)^-0.5
    assert rows[about_li][1] == 0.0 and rows[shared][1] == 0.0
    at = [rows[f][2] for f in (in_session, about_li, shared)]
    notes = salience_notes(index, walked.facts[at].astype("int64"), agent=index.entity_ids["agent:a"],
                           serving=index.entity_ids["person:li"], now=org.now.timestamp(), p=DEFAULT_PARAMETERS,
                           ranks=walked.facts[at] * 0, activations=walked.activation[at],
                           forgotten=walked.facts[at] < 0)
    assert notes == ["session memory: last used 2.0 days ago (asserted 2026-01-01); ends with its session · 1 use",
                     "episodic (Li's): last used 0 sessions of Li's ago (asserted 2026-01-01) · 1 use",
                     "semantic (org): does not fade with time; last used 2026-01-01 (asserted) · 1 use"]
