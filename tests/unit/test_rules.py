"""The rules as specifications, with nothing but the domain: given an ontology (folded from events), when a
command is decided, then these events, or this error naming the field. No application, no store: milliseconds."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given as given_facts
from hypothesis import settings
from hypothesis import strategies as st

from domain import commands as c
from domain.errors import DomainError, UnknownEntity, UnknownTenant
from domain.events import DomainEvent
from domain.facts import FactAsserted, FactCorroborated, FactInvalidated, FactState, FactStatus
from domain.forgetting import linked_entities
from domain.ontology import Ontology
from domain.rules import decide

T = "acme"
NOW = datetime(2026, 10, 1, 9, 0, tzinfo=UTC)


def given(*commands: c.Command) -> Ontology:
    """An ontology that has accepted these commands, one second apart (each decided, its events applied)."""
    state = Ontology(tenant=T)
    for k, command in enumerate(commands):
        when(state, command, NOW + timedelta(seconds=k))
    return state


def when(state: Ontology, command: c.Command, now: datetime = NOW + timedelta(hours=1)) -> list[DomainEvent]:
    events = decide(state, command, now)
    for event in events:
        state.apply(event)
    return events


def people(*refs: str) -> list[c.Command]:
    return [c.CreateTenant(tenant=T)] + [c.RegisterEntity(tenant=T, ref=ref, label=ref.split(":")[1].title())
                                         for ref in refs]


def test_nothing_is_decided_for_a_tenant_that_was_never_created() -> None:
    with pytest.raises(UnknownTenant):
        when(Ontology(tenant=T), c.RegisterEntity(tenant=T, ref="person:li", label="Li"))


def test_a_fact_about_an_unknown_entity_is_rejected_naming_the_field() -> None:
    state = given(*people("person:li"))
    with pytest.raises(UnknownEntity) as rejected:
        when(state, c.AssertFact(tenant=T, subject="person:li", relation="knows", object="person:nobody"))
    assert rejected.value.field == "object"
    assert not state.facts


def test_asserting_a_fact_makes_it_current_with_its_reason() -> None:
    state = given(*people("person:li", "person:wang"))
    (asserted,) = when(state, c.AssertFact(tenant=T, subject="person:li", relation="knows", object="person:wang",
                                           reason="met at the fair"))
    assert isinstance(asserted, FactAsserted)
    fact = state.facts[asserted.fact_id]
    assert (fact.status, fact.reason, fact.subject, fact.object) == (FactStatus.CURRENT, "met at the fair",
                                                                     "person:li", "person:wang")


def test_asserting_a_current_fact_again_corroborates_it_and_raises_its_confidence() -> None:
    state = given(*people("person:li", "person:wang"),
                  c.AssertFact(tenant=T, subject="person:li", relation="knows", object="person:wang", confidence=0.6))
    (only,) = state.facts.values()
    (again,) = when(state, c.AssertFact(tenant=T, subject="person:li", relation="knows", object="person:wang",
                                        confidence=0.6))
    assert isinstance(again, FactCorroborated) and again.fact_id == only.fact_id
    assert state.facts[only.fact_id].confidence > 0.6
    assert len(state.facts) == 1


def test_a_new_object_of_a_functional_relation_supersedes_the_current_one() -> None:
    state = given(*people("person:li", "org:acme", "org:beta"),
                  c.AssertFact(tenant=T, subject="person:li", relation="works_for", object="org:acme"))
    (before,) = state.facts.values()
    ended, asserted = when(state, c.AssertFact(tenant=T, subject="person:li", relation="works_for",
                                                object="org:beta"))
    assert isinstance(ended, FactInvalidated) and ended.fact_id == before.fact_id
    assert isinstance(asserted, FactAsserted) and asserted.supersedes == before.fact_id
    assert [f.object for f in state.current_facts()] == ["org:beta"]


def test_a_relation_that_is_not_functional_keeps_every_object() -> None:
    state = given(*people("person:li", "person:wang", "person:zhao"),
                  c.AssertFact(tenant=T, subject="person:li", relation="knows", object="person:wang"))
    when(state, c.AssertFact(tenant=T, subject="person:li", relation="knows", object="person:zhao"))
    assert sorted(f.object for f in state.current_facts()) == ["person:wang", "person:zhao"]


def test_invalidating_a_fact_ends_it_and_keeps_it_in_history() -> None:
    state = given(*people("person:li", "person:wang"),
                  c.AssertFact(tenant=T, subject="person:li", relation="knows", object="person:wang"))
    (fact,) = state.facts.values()
    (ended,) = when(state, c.InvalidateFact(tenant=T, fact_id=fact.fact_id, reason="they never met"))
    assert isinstance(ended, FactInvalidated)
    assert state.facts[fact.fact_id].status is not FactStatus.CURRENT
    assert list(state.current_facts()) == []


def test_a_rejected_command_leaves_the_state_as_it_was() -> None:
    state = given(*people("person:li"))
    version = state.version
    with pytest.raises(DomainError):
        when(state, c.InvalidateFact(tenant=T, subject="person:li", relation="knows", object="person:li",
                                     reason="nothing to end"))
    assert state.version == version and not state.facts


def test_a_repeated_event_id_is_a_no_op() -> None:
    state = given(*people("person:li", "person:wang"),
                  c.AssertFact(tenant=T, event_id="e-1", subject="person:li", relation="knows", object="person:wang"))
    assert when(state, c.AssertFact(tenant=T, event_id="e-1", subject="person:li", relation="knows",
                                    object="person:wang", reason="the same input again")) == []


def test_a_messages_fingerprint_is_the_same_in_every_interpreter_whatever_its_hash_seed():
    """The folded state moves between processes in state snapshots (a restart, the snapshotter): a message sent
    again after a restart must still be known as the same message, not refused as a conflict."""
    import os
    import subprocess
    import sys

    from domain.sessions import message_fingerprint

    script = ("from domain.sessions import message_fingerprint as f\n"
              "print(f('user', 'tea? \\u00e9'), f('assistant', ''))")
    printed = [subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                              env={**os.environ, "PYTHONHASHSEED": seed}).stdout.split()
               for seed in ("1", "2", "random")]
    fingerprints = [str(message_fingerprint("user", "tea? \u00e9")), str(message_fingerprint("assistant", ""))]
    assert printed == [fingerprints] * 3
    assert fingerprints[0] != str(message_fingerprint("assistant", "tea? \u00e9"))


REFS = ["person:li", "person:wang", "memory:tea", "memory:fair", "thing:cup"]


@settings(max_examples=60, deadline=None)
@given_facts(st.lists(st.tuples(st.sampled_from(REFS), st.sampled_from(REFS),
                                st.sampled_from(["org", "person:li", "person:wang", "session:s1"]),
                                st.sampled_from(["knows", "prefers", "mentions"])), max_size=25))
def test_the_entities_a_person_takes_along_are_those_a_scan_of_every_fact_finds(facts) -> None:
    """`linked_entities` reads the ontology's `entity_links` and `linked_people`, kept as facts are asserted,
    instead of a pass over every fact (a forget held the write lock for it: seconds at 1M facts read from a
    snapshot). The reference: every memory a fact links to the person, and every other entity with a label of
    its own that facts link to them and to no one else (a fact scoped to session s1 links to person:wang, whom
    it serves)."""
    state = given(*people(*REFS), c.StartSession(tenant=T, session_id="s1", agent="person:li", serving="person:wang"))
    for subject, obj, scope, relation in facts:
        if subject != obj:
            when(state, c.AssertFact(tenant=T, subject=subject, relation=relation, object=obj, scope=scope,
                                     reason="r"))

    def linked(fact: FactState) -> set[str]:
        ends = {fact.subject, fact.object, "person:wang" if fact.scope == "session:s1" else fact.scope}
        return {ref for ref in ends if ref.startswith("person:")}

    for person in ("person:li", "person:wang", "memory:tea"):
        scanned = sorted({f"{T}/entity/{ref}" for fact in state.facts.values() for ref in (fact.subject, fact.object)
                          if person.startswith("person:") and not ref.startswith("person:")
                          and person in linked(fact)
                          and (ref.startswith("memory:") or all(linked(other) <= {person}
                                                                for other in state.facts.values()
                                                                if ref in (other.subject, other.object)))})
        assert linked_entities(state, person) == scanned


def test_every_event_type_changes_the_folded_state_by_a_function_of_its_own_and_an_unknown_one_is_refused() -> None:
    import domain.event_catalog  # noqa: F401  (every event class registers its topic)
    from domain.events import EVENT_TYPES
    from domain.ontology import evolve

    assert sorted(topic for topic, cls in EVENT_TYPES.items() if not evolve.handles(cls)) == []

    class Unfolded(DomainEvent):  # (no topic: not registered in the catalogue)
        pass

    with pytest.raises(TypeError, match="no rule to apply Unfolded"):
        Ontology(tenant=T).apply(Unfolded(tenant=T, recorded_at=NOW))
