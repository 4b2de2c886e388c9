"""The errors the use cases raise besides the model's (domain/errors.py); api/problems.py maps them to problems."""

from __future__ import annotations

from dataclasses import dataclass

from domain.errors import DomainError, InfrastructureError


class TenantMismatch(DomainError):
    """An envelope names a tenant other than the caller's."""

    def __init__(self, index: int) -> None:
        super().__init__(f"events[{index}].tenant: an envelope may only name your own tenant",
                         field=f"events[{index}].tenant")
        self.index = index


@dataclass(frozen=True)
class Rejection:
    index: int
    field: str
    detail: str


class BatchRejected(DomainError):
    """At least one envelope was rejected, so none was written."""

    def __init__(self, rejections: list[Rejection]) -> None:
        first = rejections[0]
        more = f" (and {len(rejections) - 1} more)" if len(rejections) > 1 else ""
        super().__init__(f"events[{first.index}]: {first.detail}{more}; nothing was written", field=first.field)
        self.rejections = rejections


class ProjectionBehind(InfrastructureError):
    """A read named a log position the read model did not reach in time."""


class UnknownEntityFact(DomainError):
    """A fact id named in a request is not a fact of the caller's tenant."""

    def __init__(self, fact_id: str, field: str) -> None:
        super().__init__(f"no fact {fact_id!r} in your tenant", field=field)
