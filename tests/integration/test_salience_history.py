"""An organization's year of history, imported and never read, keeps full views (docs/perspectives.md,
"Forgetting by tier"): every agent x person view with enough reachable facts shows 4 full and 7 gist, from the
index folded from the log and from the index a restart loads from the read model."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from domain.activation import DEFAULT_PARAMETERS
from domain.commands import CreateTenant
from projections.perspective_index import Viewpoint
from projections.perspective_load import from_duckdb
from projections.perspectives import Perspectives
from projections.projector import Projector
from tests.salience_support import check_views, dated_org


def test_a_year_of_imported_history_never_read_keeps_every_view_full_also_after_a_restart(make_noumena, tmp_path):
    now = datetime.now(UTC)
    org = dated_org(now, entities=240, facts=1_800)
    noumena = make_noumena("sqlite", clock=lambda: datetime.now(UTC))
    noumena.service.execute(CreateTenant(tenant=org.tenant))
    for at in range(0, len(org.envelopes), 500):
        result = noumena.application.ingestor.ingest(org.envelopes[at: at + 500])
        assert not result.rejected, result.rejected[:1]
    agents, persons = org.agents, org.persons[:40]

    index = Perspectives(noumena.log, lambda: datetime.now(UTC)).index(org.tenant)  # folded from the log
    moment = datetime.now(UTC).timestamp()
    folded = check_views(index, agents, persons, moment)
    assert folded.views >= 100
    assert folded.short == []
    # the same history by the calendar model: these views were empty of clear facts
    by_calendar = check_views(index, agents, persons, moment,
                              DEFAULT_PARAMETERS.model_copy(update={"salience": "calendar"}))
    assert len(by_calendar.short) == by_calendar.views

    with Projector(noumena.log, tmp_path / "read.duckdb") as projector:  # what a restart loads
        projector.catch_up()
        loaded = from_duckdb(projector.con, org.tenant)  # type: ignore[attr-defined]
    restarted = check_views(loaded, agents, persons, moment)
    assert restarted == folded
    for agent in agents[:4]:  # value for value: corroborations, sessions and mentions read from the read model
        for person in persons[:10]:
            view = Viewpoint(agent, serving=person)
            a, b = index.walk(view, DEFAULT_PARAMETERS, moment), loaded.walk(view, DEFAULT_PARAMETERS, moment)
            assert [index.fact_ids.at(int(f)) for f in a.facts] == [loaded.fact_ids.at(int(f)) for f in b.facts]
            assert b.activation == pytest.approx(a.activation, abs=1e-6)
