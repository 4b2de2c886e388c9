"""`make lint`'s attribute check (tests/check_entry_points.py): entry points and consumers call use cases, never
`.service` or `.log` of the container or the application."""

from __future__ import annotations

from pathlib import Path

from tests.check_entry_points import findings


def test_no_entry_point_or_consumer_reads_the_service_or_the_log():
    assert findings() == []


def test_the_check_finds_a_route_that_walks_around_the_application(tmp_path: Path):
    routes = tmp_path / "api" / "routes"
    routes.mkdir(parents=True)
    (tmp_path / "consumers").mkdir()
    (routes / "sneaky.py").write_text("def read(memory):\n    with memory.service.reading('t') as state:\n"
                                      "        return state\n")
    (tmp_path / "consumers" / "tail.py").write_text("import logging\nlog = logging.getLogger(__name__)\n"
                                                    "def tail(noumena):\n    log.info('x')\n"
                                                    "    return noumena.log.max_position()\n")
    assert findings(tmp_path) == [
        "api/routes/sneaky.py:2: reads .service (call a use case of the application instead)",
        "consumers/tail.py:5: reads .log (call a use case of the application instead)",
    ]
