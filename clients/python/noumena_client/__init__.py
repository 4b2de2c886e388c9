"""noumena's HTTP API from Python: `Noumena` (sync) and `AsyncNoumena` (async), one resource group per OpenAPI
tag (`memory.facts.assert_(...)`), typed answers (`models`), problems as exceptions (`errors`)."""

from noumena_client import errors, models
from noumena_client.aio import AsyncNoumena
from noumena_client.client import Noumena
from noumena_client.errors import (
    AmbiguousName,
    Conflict,
    Forbidden,
    InvalidInput,
    NotFound,
    NoumenaError,
    ProblemError,
    RateLimited,
    Unauthorized,
    Unavailable,
)

__all__ = ["AmbiguousName", "AsyncNoumena", "Conflict", "Forbidden", "InvalidInput", "NotFound", "Noumena",
           "NoumenaError", "ProblemError", "RateLimited", "Unauthorized", "Unavailable", "errors", "models"]
