"""Shared fixtures: the same stories run against every event store (POPO, SQLite file, PostgreSQL).

PostgreSQL comes from `infra/scripts/postgres.sh start` (run by `make test`); the settings are read from NOUMENA_PG_*.
A missing server fails the PostgreSQL tests loudly: they are never skipped.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import tests.properties  # noqa: F401  (loads the hypothesis profile before any test module is collected)
from infra.bootstrap import Noumena, bootstrap
from infra.settings import Settings

BACKENDS = ["popo", "sqlite", "postgres"]


GROUPS = ("unit", "integration", "e2e")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test carries the marker of its folder (`unit`, `integration`, `e2e`), so `-m unit` is the quick loop.
    A test run against the PostgreSQL event store (a parameter "postgres") carries the `postgres` marker, so
    `-m "not postgres"` selects exactly what runs without the server."""
    for item in items:
        group = item.path.parent.name
        if group in GROUPS and item.path.parent.parent.name == "tests":
            item.add_marker(getattr(pytest.mark, group))
        params = getattr(getattr(item, "callspec", None), "params", {})
        if "postgres" in params.values():
            item.add_marker(pytest.mark.postgres)


class TickingClock:
    """A test clock: starts at a fixed moment and moves forward one millisecond per reading."""

    def __init__(self, start: datetime | None = None, step: timedelta = timedelta(milliseconds=1)) -> None:
        self.now = start or datetime(2026, 10, 1, tzinfo=UTC)
        self.step = step

    def __call__(self) -> datetime:
        self.now += self.step
        return self.now


def postgres_settings(home: Path, schema: str | None = None) -> Settings:
    """Settings for a fresh, empty PostgreSQL schema (created here) on the server `make test` started."""
    import psycopg

    base = Settings(home=home, event_store="postgres")
    schema = schema or f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(host=base.pg_host, port=base.pg_port, user=base.pg_user,
                         password=base.pg_password.get_secret_value(), dbname=base.pg_dbname,
                         autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
    return base.model_copy(update={"pg_schema": schema})


@pytest.fixture
def noumena_for() -> Iterator[Callable[[Settings], Noumena]]:
    """Build a Noumena (ticking clock) from the test's settings; all are closed at the end."""
    built: list[Noumena] = []

    def build(settings: Settings) -> Noumena:
        built.append(bootstrap(settings, clock=TickingClock()))
        return built[-1]

    yield build
    for noumena in built:
        noumena.close()


@pytest.fixture
def make_noumena(tmp_path: Path) -> Iterator[Callable[..., Noumena]]:
    """Build a Noumena on a named backend; every one built is closed at the end of the test."""
    built: list[Noumena] = []
    schemas: dict[str, Settings] = {}

    def build(backend: str = "sqlite", clock: Callable[[], datetime] | None = None, home: Path | None = None
             ) -> Noumena:
        where = home or tmp_path / "home"
        if backend == "postgres":
            settings = schemas.get(str(where)) or postgres_settings(where)
            schemas[str(where)] = settings
        else:
            settings = Settings(home=where, event_store=backend)  # type: ignore[arg-type]
        noumena = bootstrap(settings, clock=clock or TickingClock())
        built.append(noumena)
        return noumena

    yield build
    for noumena in built:
        noumena.close()


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)
