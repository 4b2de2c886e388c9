"""Agent-scoped keys: a key may name the agents it acts as. It then asks only as those agents, and
only about persons they serve: a person one of them has a main session with, or is the object of a current
`serves` fact whose subject is one of them. A key naming no agents is tenant-wide (for services).

Pure rules over the folded ontology; the HTTP routes and the MCP tools call `check_acts_as` before serving.
"""

from __future__ import annotations

from collections.abc import Collection

from domain.errors import NotPermitted
from domain.facts import FactStatus
from domain.ontology import Ontology
from domain.sessions import SessionKind

SERVES = "serves"


def persons_served(state: Ontology, agents: Collection[str]) -> set[str]:
    """Who `agents` serve: the persons of their main sessions and the objects of their current `serves` facts."""
    served = {s.serving for s in state.sessions.values()
              if s.agent in agents and s.kind == SessionKind.MAIN and s.serving is not None}
    served |= {f.object for f in state.facts.values()
               if f.relation == SERVES and f.subject in agents and f.status is FactStatus.CURRENT}
    return served


def check_acts_as(state: Ontology, agents: Collection[str], agent: str, serving: str | None = None,
                  session_id: str | None = None) -> None:
    """Raise NotPermitted (naming the field) unless a key scoped to `agents` may ask as `agent`, serving
    `serving`, in `session_id`. An empty `agents` is a tenant-wide key: everything is allowed."""
    if not agents:
        return
    if agent not in agents:
        raise NotPermitted(f"this key acts only as {', '.join(sorted(agents))}, not {agent}", field="agent")
    if session_id is not None:
        session = state.sessions.get(session_id)
        if session is None or session.agent not in agents:
            raise NotPermitted(f"session {session_id!r} is not a session of this key's agents",
                               field="session_id")
    if serving is not None and serving not in persons_served(state, agents):
        raise NotPermitted(f"{serving} is not served by this key's agents (no main session with them and no"
                           f" 'serves' fact)", field="serving")


def require_tenant_wide(agents: Collection[str], what: str) -> None:
    if agents:
        raise NotPermitted(f"{what} needs a tenant-wide key; this key acts only as {', '.join(sorted(agents))}",
                           field="Authorization")


def check_may_assert(agents: Collection[str], relation: str) -> None:
    """An agent-scoped key may remember facts, but not `serves` ones: those decide whom its agents serve, so
    writing one would widen the key's own reach. Tenant-wide keys (services) write them."""
    if agents and relation == SERVES:
        raise NotPermitted("a 'serves' fact decides whom an agent serves: write it with a tenant-wide key",
                           field="relation")
