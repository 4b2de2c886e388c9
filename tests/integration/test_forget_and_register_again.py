"""A subject forgotten and then registered (or started) again gets a key under a new name (`<id>~<n>`) on every
key store: the forgotten generation's events keep reading `[forgotten]`, the new ones read back, and a fresh fold
of the tenant over the same home (a restart) succeeds."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from domain import commands as c
from domain.forgetting import FORGOTTEN
from infra.bootstrap import bootstrap
from infra.settings import Settings
from tests.conftest import TickingClock, postgres_settings
from tests.properties import examples

T = "acme"


def _settings(store: str, home: Path) -> Settings:
    return postgres_settings(home) if store == "postgres" else Settings(home=home, event_store="sqlite")


class Story:
    """Xu (a person with a fact about a file), a memory and Xu's session, each registered (or started) again
    after it is forgotten; what a fold must show is worked out alongside."""

    def __init__(self, app) -> None:
        self.app = app
        self.lives = {"person:xu": 0, "memory:xu-tea": 0, "session:s-xu": 0}
        self.reasons: list[tuple[str, bool]] = []
        """Every fact's reason, and whether it is forgotten."""
        self.turns: list[tuple[str, bool]] = []
        run = app.service.execute
        run(c.CreateTenant(tenant=T))
        run(c.RegisterEntity(tenant=T, ref="agent:assistant", label="the assistant"))
        for subject in self.lives:
            self.register(subject)

    def register(self, subject: str) -> None:
        run = self.app.service.execute
        life = self.lives[subject] = self.lives[subject] + 1
        if subject == "person:xu":
            run(c.RegisterEntity(tenant=T, ref="person:xu", label=f"Xu life {life}"))
            run(c.RegisterEntity(tenant=T, ref=f"file:menu-{life}", label=f"menu {life}"))
            run(c.AssertFact(tenant=T, subject="person:xu", relation="reads", object=f"file:menu-{life}",
                             reason=f"reason life {life}", scope="person:xu"))
            self.reasons.append((f"reason life {life}", False))
        elif subject == "memory:xu-tea":
            run(c.RegisterEntity(tenant=T, ref="memory:xu-tea", label=f"tea memory life {life}"))
        else:
            run(c.StartSession(tenant=T, session_id="s-xu", agent="agent:assistant", serving="person:xu"))
            run(c.AppendMessage(tenant=T, session_id="s-xu", message_id=f"m{life}", role="user",
                                content=f"message life {life}"))
            self.turns.append((f"message life {life}", False))

    def forget_and_register_again(self, subject: str) -> None:
        self.app.application.forgetting.forget(T, subject)
        if subject == "person:xu":
            self.reasons = [(reason, True) for reason, _ in self.reasons]
        if subject in ("person:xu", "session:s-xu"):  # Xu's session's turns are Xu's too
            self.turns = [(turn, True) for turn, _ in self.turns]
        self.register(subject)

    def check(self, state) -> None:
        assert state.entities["person:xu"].label == f"Xu life {self.lives['person:xu']}"
        assert state.entities["memory:xu-tea"].label == f"tea memory life {self.lives['memory:xu-tea']}"
        shown = sorted(f.reason for f in state.facts.values() if f.subject == "person:xu")
        assert shown == sorted(FORGOTTEN if gone else reason for reason, gone in self.reasons)
        assert [content for _, _, content in state.sessions["s-xu"].turns] == \
            [FORGOTTEN if gone else turn for turn, gone in self.turns]


def _story(store: str, home: Path, forgets: list[str]) -> None:
    """Register everything, then for each entry of `forgets` forget that subject and register it again; the
    tenant folds to the same state in this process and, afresh, in a new bootstrap over the same home."""
    settings = _settings(store, home)
    app = bootstrap(settings, clock=TickingClock())
    try:
        story = Story(app)
        for subject in forgets:
            story.forget_and_register_again(subject)
        story.check(app.service.ontology(T))
    finally:
        app.close()
    again = bootstrap(settings, clock=TickingClock())  # a restart: every event read and opened afresh
    try:
        story.check(again.service.ontology(T))
    finally:
        again.close()


def test_a_person_memory_and_session_forgotten_and_registered_again_on_sqlite_fold_afresh_after_a_restart(tmp_path):
    _story("sqlite", tmp_path / "home", ["person:xu", "memory:xu-tea", "session:s-xu"])


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
@settings(max_examples=examples(0.05))
@given(forgets=st.lists(st.sampled_from(["person:xu", "memory:xu-tea", "session:s-xu"]), min_size=1, max_size=3))
def test_any_sequence_of_forgets_and_registrations_again_refolds_on_every_durable_key_store(store, forgets):
    with tempfile.TemporaryDirectory() as where:
        _story(store, Path(where) / "home", forgets)
