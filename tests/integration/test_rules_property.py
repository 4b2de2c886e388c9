"""Property: for random command sequences, the state rebuilt from the log equals a plain reference model,
and no rule is ever broken."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from domain import commands as c
from domain.application.ontology_service import OntologyService
from domain.errors import DomainError, FactNotCurrent, UnknownEntity, UnknownFact
from domain.facts import FactStatus
from domain.relations import BUILTIN_RELATIONS
from domain.values import DEFAULT_CONFIDENCE, corroborated_confidence
from infra.bootstrap import bootstrap
from infra.settings import Settings
from tests.conftest import TickingClock
from tests.properties import examples

T = "prop"
REFS = ["person:a", "person:b", "thing:x", "thing:y", "memory:m"]
RELATIONS = ["stage", "knows", "likes"]  # functional, symmetric, plain
SCOPES = ["org", "person:a"]


@dataclass
class Reference:
    """The rules written as plainly as possible, with no events: the model the log must agree with."""

    entities: set[str] = field(default_factory=set)
    current: dict[tuple[str, str, str, str], float] = field(default_factory=dict)
    ever: set[tuple[str, str, str, str]] = field(default_factory=set)

    def key(self, s: str, r: str, o: str, scope: str) -> tuple[str, str, str, str]:
        if BUILTIN_RELATIONS.get(r) and BUILTIN_RELATIONS[r].symmetric and o < s:
            s, o = o, s
        return (s, r, o, scope)

    def run(self, cmd: c.Command) -> type[DomainError] | None:
        if isinstance(cmd, c.RegisterEntity):
            self.entities.add(cmd.ref)
            return None
        if isinstance(cmd, c.AssertFact):
            for ref in (cmd.subject, cmd.object):
                if ref not in self.entities:
                    return UnknownEntity
            if cmd.scope != "org" and cmd.scope not in self.entities:
                return UnknownEntity
            key = self.key(cmd.subject, cmd.relation, cmd.object, cmd.scope)
            incoming = DEFAULT_CONFIDENCE if cmd.confidence is None else cmd.confidence
            if key in self.current:
                self.current[key] = corroborated_confidence(self.current[key], incoming)
                return None
            if cmd.relation == "stage":
                for other in [k for k in self.current if (k[0], k[1], k[3]) == (cmd.subject, "stage", cmd.scope)]:
                    del self.current[other]
            self.current[key] = incoming
            self.ever.add(key)
            return None
        if isinstance(cmd, c.InvalidateFact):
            assert cmd.subject and cmd.relation and cmd.object
            key = self.key(cmd.subject, cmd.relation, cmd.object, cmd.scope)
            if key in self.current:
                del self.current[key]
                return None
            return FactNotCurrent if key in self.ever else UnknownFact
        raise AssertionError(cmd)


refs = st.sampled_from(REFS)
commands = st.one_of(
    st.builds(lambda r: c.RegisterEntity(tenant=T, ref=r, label=r.upper()), refs),
    st.builds(lambda s, r, o, sc, conf: c.AssertFact(tenant=T, subject=s, relation=r, object=o, scope=sc,
                                                      confidence=conf),
              refs, st.sampled_from(RELATIONS), refs, st.sampled_from(SCOPES),
              st.none() | st.floats(0, 1)),
    st.builds(lambda s, r, o, sc: c.InvalidateFact(tenant=T, subject=s, relation=r, object=o, scope=sc,
                                                   reason="no longer true"),
              refs, st.sampled_from(RELATIONS), refs, st.sampled_from(SCOPES)),
)


def _check(service: OntologyService, reference: Reference) -> None:
    state = service.ontology(T)
    current = {state.key_for(*f.key): f.confidence for f in state.current_facts()}
    assert current.keys() == reference.current.keys()
    for key, confidence in current.items():
        assert abs(confidence - reference.current[key]) < 1e-5
    assert state.entities.keys() == reference.entities
    functional = [(f.subject, f.relation, f.scope) for f in state.current_facts() if f.relation == "stage"]
    assert len(functional) == len(set(functional)), "two current objects for a functional relation"
    for fact in state.facts.values():
        assert fact.subject in state.entities and fact.object in state.entities
        assert 0.0 <= fact.confidence <= 1.0
        if fact.status is FactStatus.INVALIDATED and fact.superseded_by:
            assert state.facts[fact.superseded_by].supersedes == fact.fact_id


def _story(backend: str, home, script: list[c.Command]) -> None:  # type: ignore[no-untyped-def]
    settings_ = Settings(home=home, event_store=backend)  # type: ignore[arg-type]
    app = bootstrap(settings_, clock=TickingClock())
    try:
        app.service.execute(c.CreateTenant(tenant=T))
        reference = Reference()
        for cmd in script:
            expected = reference.run(cmd)
            try:
                app.service.execute(cmd)
                error = None
            except DomainError as raised:
                error = type(raised)
            assert error is expected, f"{cmd!r}: got {error}, reference says {expected}"
        _check(app.service, reference)
        _check(OntologyService(app.log, clock=lambda: datetime.now(UTC)), reference)  # rebuilt from the log
    finally:
        app.close()


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(script=st.lists(commands, max_size=40))
def test_popo_log_agrees_with_the_reference_model(script, tmp_path_factory):
    _story("popo", tmp_path_factory.mktemp("p"), script)


@settings(max_examples=examples(0.15), suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(script=st.lists(commands, max_size=40))
def test_sqlite_log_agrees_with_the_reference_model(script, tmp_path_factory):
    _story("sqlite", tmp_path_factory.mktemp("s"), script)
