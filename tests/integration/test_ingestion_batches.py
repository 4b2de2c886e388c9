"""An all-or-nothing batch of wire envelopes with one bad envelope writes nothing, on every event store."""

from __future__ import annotations

from domain import commands as c
from domain.application.ingestion import Ingestor


def test_an_all_or_nothing_batch_with_a_bad_envelope_writes_nothing(make_noumena, backend):
    n = make_noumena(backend)
    n.service.execute(c.CreateTenant(tenant="acme"))
    before = n.log.max_position()
    result = Ingestor(n.service).ingest([
        {"event_id": "a", "tenant": "acme", "type": "entity.registered",
         "payload": {"ref": "person:li", "label": "Li"}},
        {"event_id": "b", "tenant": "acme", "type": "fact.asserted",
         "payload": {"subject": "person:li", "relation": "knows", "object": "person:nobody"}},
    ], all_or_nothing=True)
    assert [r.field for r in result.rejected] == ["payload.object"]
    assert n.log.max_position() == before
