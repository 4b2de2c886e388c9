"""`make lint`'s attribute check (tests/check_entry_points.py): nothing outside the application and the composition
root reads `.service` or `.log` of the container or the application; they call use cases."""

from __future__ import annotations

from pathlib import Path

from tests.check_entry_points import findings


def test_nothing_outside_the_application_reads_the_service_or_the_log():
    assert findings() == []


def _write(root: Path, where: str, code: str) -> None:
    path = root / where
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(code)


def test_the_check_finds_any_module_that_walks_around_the_application(tmp_path: Path):
    _write(tmp_path, "api/routes/sneaky.py", "def read(memory):\n    with memory.service.reading('t') as state:\n"
                                             "        return state\n")
    _write(tmp_path, "consumers/tail.py", "import logging\nlog = logging.getLogger(__name__)\n"
                                          "def tail(noumena):\n    log.info('x')\n"
                                          "    return noumena.log.max_position()\n")
    _write(tmp_path, "projections/peek.py", "def peek(noumena):\n    return noumena.application.service\n")
    _write(tmp_path, "infra/runtime/warm.py", "def warm(application):\n    return application.log\n")
    assert findings(tmp_path) == [
        "api/routes/sneaky.py:2: reads .service (call a use case of the application instead)",
        "consumers/tail.py:5: reads .log (call a use case of the application instead)",
        "infra/runtime/warm.py:2: reads .log (call a use case of the application instead)",
        "projections/peek.py:2: reads .service (call a use case of the application instead)",
    ]


def test_the_application_the_composition_root_own_attributes_and_modules_are_not_reported(tmp_path: Path):
    _write(tmp_path, "domain/application/use_cases/facts.py", "def f(core):\n    return core.service\n")
    _write(tmp_path, "infra/bootstrap.py", "def consumer_ports(noumena):\n    return noumena.log\n")
    _write(tmp_path, "projections/walk.py", "import math\nimport numpy as np\n"
                                            "def score(x):\n    return math.log(x) + np.log(x)\n")
    _write(tmp_path, "projections/projector.py", "class Projector:\n    def end(self):\n"
                                                 "        return self.log.max_position()\n")
    assert findings(tmp_path) == []
