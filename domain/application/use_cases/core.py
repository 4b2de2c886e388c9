"""What every feature service shares: the ontology service that runs commands into the log, the read model reads
follow, the application's settings; and the steps every use case takes: who may, read-your-writes, run and tell
the read model."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from domain import commands as c
from domain.access import Caller, as_caller, check_acts_as, require_tenant_wide
from domain.application.ontology_service import OntologyService
from domain.application.use_cases.errors import ProjectionBehind
from domain.application.use_cases.results import Written
from domain.errors import InvalidInput
from domain.ports import EventLog, ReadModel


@dataclass(frozen=True)
class ApplicationSettings:
    """The application's own settings (from infra/settings.py's Settings, by the composition root)."""

    read_wait_seconds: float = 5.0
    """How long a read naming `min_position` waits for the read model before giving up."""
    purge_wait_seconds: float = 60.0
    """How long a forget waits for this process's projector to purge the read model before it answers."""
    disuse_period_days: float = 30.0
    """Archive facts whose activation stayed below the threshold for every agent this long."""


class Core:
    """One per `Application`, shared by its feature services."""

    def __init__(self, service: OntologyService, log: EventLog, read_model: ReadModel | None,
                 settings: ApplicationSettings) -> None:
        self.service = service
        self.log = log
        self.read_model = read_model
        """None: this process runs no projector (the CLI, the MCP server); reads by query are unavailable."""
        self.settings = settings

    # ------------------------------------------------------------------ writes

    def run(self, command: c.Command) -> Written:
        return self.run_batch([command])[0]

    def run_batch(self, commands: Sequence[c.Command]) -> tuple[Written, list[Any]]:
        result = self.service.execute_batch(commands, all_or_nothing=True)
        for outcome in result.outcomes:
            if outcome.error is not None:
                raise outcome.error
        self.written(result.positions)
        events = [e for o in result.outcomes for e in o.events]
        return Written(position=result.last_position, events=len(events)), events

    def written(self, positions: Sequence[int]) -> None:
        """Tell the read model that this process wrote up to these positions."""
        if positions and self.read_model is not None:
            self.read_model.nudge()

    # ------------------------------------------------------------------ who may

    @staticmethod
    def tenant_wide(who: Caller | str, what: str) -> str:
        """The tenant, for a use case only a tenant-wide caller may use (NotPermitted for a scoped key)."""
        caller = as_caller(who)
        require_tenant_wide(caller.agents, what)
        return caller.tenant

    def acting_as(self, who: Caller | str, agent: str, serving: str | None = None, session_id: str | None = None
                  ) -> str:
        """The tenant, once the caller may ask as `agent`, serving `serving`, in `session_id`."""
        caller = as_caller(who)
        if caller.scoped:
            with self.service.reading(caller.tenant) as state:
                check_acts_as(state, caller.agents, agent, serving, session_id)
        return caller.tenant

    def tenant_exists(self, tenant: str) -> bool:
        with self.service.reading(tenant) as state:
            return state.exists

    # ------------------------------------------------------------------ reads

    def fresh(self, tenant: str, min_position: int | None = None) -> None:
        """Read-your-writes, before every read of `tenant` this process serves from its read side (the DuckDB read
        model and the perspective and search indexes that follow it): wait (bounded) until that side has applied
        this process's latest write in the tenant, and `min_position` when given (a position another replica's
        write returned). Every read use case calls it first, so no entry point can forget it; what a read finds
        in the folded state (`service.reading`) is current already (it reads the log's tail itself).

        A `min_position` beyond the end of the log is refused (no write returned it); a read side that does not
        get there within `read_wait_seconds` makes the read a ProjectionBehind (503, retry)."""
        if min_position is not None and min_position > 0:
            end = self.log.max_position()
            if min_position > end:
                raise InvalidInput(f"min_position {min_position} is beyond the end of the log ({end}): no write"
                                   " returned it", field="min_position")
        target = max(min_position or 0, self.service.written_position(tenant))
        read_model = self.read_model
        if read_model is None or target <= read_model.position:
            return  # (no read side of its own: the engines read the log to its end on each call)
        if not read_model.wait_for(target, self.settings.read_wait_seconds):
            raise ProjectionBehind(f"the read model reached position {read_model.position}, not {target},"
                                   f" within {self.settings.read_wait_seconds:g} s; retry")

    def require_read_model(self) -> ReadModel:
        if self.read_model is None:
            raise ProjectionBehind("this process runs no projector")
        return self.read_model
