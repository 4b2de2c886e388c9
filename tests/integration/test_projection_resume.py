"""A projector stopped at any positions and started again (a new Projector on the same file: what a restarted
process does) ends with exactly the tables of a clean rebuild from the log, whatever its batch sizes."""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from pathlib import Path

import duckdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infra.bootstrap import Noumena, bootstrap
from infra.settings import Settings
from projections.projector import Projector
from projections.replay import replay
from tests.conftest import TickingClock
from tests.projection_support import Workload, content_hashes, table_differences
from tests.properties import examples

COMMANDS = 500


class LogUntil:
    """The real log as it stood when it ended at `position` (a projector that follows it stops there)."""

    def __init__(self, log: Noumena, position: int) -> None:
        self._log, self._position = log.log, position

    def read_raw(self, after_position: int, limit: int) -> Sequence[tuple[int, str, bytes]]:
        return [r for r in self._log.read_raw(after_position, limit) if r[0] <= self._position]

    def max_position(self) -> int:
        return min(self._position, self._log.max_position())


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Noumena, Path, Path, dict]]:
    """A log of the crash test's workload (every kind of fact change, sessions, workers, recalls), with its clean
    rebuild."""
    home = tmp_path_factory.mktemp("resume")
    app = bootstrap(Settings(home=home / "home", event_store="sqlite"), clock=TickingClock())
    workload = Workload(random.Random(3))
    for command in workload.setup():
        workload.run(app.service, command)
    for _ in range(COMMANDS):
        workload.run(app.service, workload.next())
    clean = replay(app.log, home / "clean.duckdb")
    with duckdb.connect(str(clean.path), read_only=True) as con:
        hashes = content_hashes(con)
    yield app, clean.path, home, hashes
    app.close()


@settings(max_examples=examples(0.03))
@given(stops=st.lists(st.integers(1, 2_000), min_size=1, max_size=8),
       sizes=st.lists(st.sampled_from([1, 2, 3, 7, 40, 300, 2_000]), min_size=1, max_size=9))
def test_a_projector_stopped_at_any_positions_and_resumed_ends_equal_to_a_clean_rebuild(
        written: tuple[Noumena, Path, Path, dict], stops: list[int], sizes: list[int]) -> None:
    app, clean, home, hashes = written
    last = app.log.max_position()
    live = home / f"live-{random.randrange(2**32)}.duckdb"
    for i, stop in enumerate([*sorted(s % last + 1 for s in stops), last]):
        with Projector(LogUntil(app, stop), live, batch_size=sizes[i % len(sizes)]) as projector:
            projector.catch_up()
            assert projector.position == stop
    with Projector(app.log, live) as projector:
        assert projector.position == last
        assert content_hashes(projector.con) == hashes, table_differences(projector.con, clean)
    for file in (live, live.with_name(live.name + ".wal")):
        file.unlink(missing_ok=True)
