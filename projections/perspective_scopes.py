"""Who may see what in a perspective index: the scopes facts are asserted in, and the sessions that give a
session scope its agent and the person it serves.

Per scope code: its kind (org / person / session), the person a person scope names, a session scope's agent and
the person that session serves. The rule (DESIGN.md, privacy by structure): org facts are seen by everyone; a
person's scope only while serving that person; a session's scope only by that session's agent, and only while
it serves the same person (or the session served no one).
"""

from __future__ import annotations

import numpy as np

from projections.perspective_columns import Column

SCOPE_ORG, SCOPE_PERSON, SCOPE_SESSION = 0, 1, 2


class Scopes:
    def __init__(self) -> None:
        self.names: list[str] = []
        self.codes: dict[str, int] = {}
        self.kind = Column(np.int8)
        self.person = Column(np.int32)
        """The person entity a person scope names (-1 for other kinds)."""
        self.agent = Column(np.int32)
        """A session scope's agent entity (-1 for other kinds, or a session not started yet)."""
        self.serving = Column(np.int32)
        """The person entity a session scope's session serves (-1: no one)."""
        self.sessions: dict[str, tuple[int, int]] = {}
        """session id -> (agent entity id, served entity id or -1): one entry per session, not per fact."""
        self._by_agent: dict[int, list[int]] = {}
        """agent entity id -> the session scope codes of its sessions (checked again at query time)."""
        self._by_person: dict[int, list[int]] = {}
        """person entity id -> the scope codes naming it (more than one after a merge)."""

    def code(self, name: str) -> int | None:
        return self.codes.get(name)

    def add(self, name: str, person: int = -1) -> int:
        """The code of scope `name`, registering it if new (`person`: the entity a person scope names)."""
        code = self.codes.get(name)
        if code is not None:
            return code
        code = self.codes[name] = len(self.names)
        self.names.append(name)
        kind, agent, serving = SCOPE_ORG, -1, -1
        if name.startswith("person:"):
            kind = SCOPE_PERSON
            self._by_person.setdefault(person, []).append(code)
        elif name.startswith("session:"):
            kind, person = SCOPE_SESSION, -1
            agent, serving = self.sessions.get(name.removeprefix("session:"), (-1, -1))
            self._by_agent.setdefault(agent, []).append(code)
        else:
            person = -1
        self.kind.append(kind)
        self.person.append(person)
        self.agent.append(agent)
        self.serving.append(serving)
        return code

    def session(self, session_id: str, agent: int, serving: int) -> None:
        """A session's agent and the person it serves (-1: no one); its scope, if facts named it already, too."""
        self.sessions[session_id] = (agent, serving)
        code = self.codes.get(f"session:{session_id}")
        if code is not None:
            self.agent.data[code], self.serving.data[code] = agent, serving
            self._by_agent.setdefault(agent, []).append(code)

    def merge(self, merged: int, into: int) -> None:
        """Entity `merged` is `into` from now on: in every scope and session naming it."""
        for column in (self.person, self.agent, self.serving):
            values = column.view
            values[values == merged] = into
        self.sessions = {sid: (into if a == merged else a, into if s == merged else s)
                         for sid, (a, s) in self.sessions.items()}
        for by in (self._by_agent, self._by_person):
            if merged in by:
                by.setdefault(into, []).extend(by.pop(merged))

    def visible(self, agent: int, serving: int) -> np.ndarray:
        """A bool per scope code: whether the viewer (an agent serving a person, -1 for none) may see it."""
        kind, person = self.kind.view, self.person.view
        session_agent, session_serving = self.agent.view, self.serving.view
        visible = kind == SCOPE_ORG
        if serving >= 0:
            visible |= (kind == SCOPE_PERSON) & (person == serving)
        if agent >= 0:
            visible |= (kind == SCOPE_SESSION) & (session_agent == agent) & (
                (session_serving == -1) | (session_serving == serving))
        return visible

    def visible_codes(self, agent: int, serving: int) -> np.ndarray:
        """The scope codes other than org that the viewer may see (few): the served person's scopes and the
        scopes of the agent's sessions that serve the same person or no one. Same rule as `visible`."""
        codes: list[int] = []
        if serving >= 0:
            codes.extend(self._by_person.get(serving, ()))
        for code in self._by_agent.get(agent, ()):
            if int(self.agent.data[code]) == agent and int(self.serving.data[code]) in (-1, serving):
                codes.append(code)
        return np.array(codes, dtype=np.int32)
