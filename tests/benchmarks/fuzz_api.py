"""`make fuzz`: schemathesis against a real `noumena serve` at a volume CI cannot afford.

1. Every operation of the OpenAPI document: NOUMENA_FUZZ_EXAMPLES positive and as many negative cases each
   (default 100), derandomized.
2. Stateful: schemathesis's state machine over the document's links (a created fact leads to reading, correcting
   and invalidating it; a served perspective to explaining and deepening it; ...), NOUMENA_FUZZ_SCENARIOS scenarios
   (default 200) of up to 10 steps.

Every response is checked (no server error, a documented status, content type and schema); the run goes on past
a failed check and counts it. Printed: the number of cases, server errors, failed checks by kind, and the
"valid per schema but refused" findings (positive cases answered 4xx other than 401/403/404/409) by operation and
field: the rules the schema cannot express. Exits 1 if any server error was seen.
"""

from __future__ import annotations

import os
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

EXAMPLES = int(os.environ.get("NOUMENA_FUZZ_EXAMPLES", "100"))
SCENARIOS = int(os.environ.get("NOUMENA_FUZZ_SCENARIOS", "200"))
TIMEOUT = 60.0
"""Seconds a request may take (a loaded machine; the first search of a tenant loads the embedder)."""
EXPECTED_REFUSALS = {401, 403, 404, 409}
"""Refusals of a well-formed request that no schema can foresee: unknown key, another agent, absent, conflicting."""
ABOUT_STATE = ("is not registered", "is not known", "no fact", "beyond the end of the log", "was forgotten",
               "not current", "has ended", "no session", "is not after the recorded time")
"""A 422 whose detail says one of these depends on the tenant's data (a ref not registered, a session or fact not
known, a min_position beyond the log) or on the clock (a valid_to before now): no schema can say that either."""


class Tally:
    def __init__(self) -> None:
        self.cases = 0
        self.statuses: Counter[int] = Counter()
        self.failures: Counter[str] = Counter()
        self.refused: Counter[tuple[str, str, str]] = Counter()
        self.about_state: Counter[str] = Counter()
        self.unanswered: Counter[str] = Counter()
        self.examples: dict[str, str] = {}

    def record(self, label: str, positive: bool, response: Any, failure: BaseException | None) -> None:
        self.cases += 1
        self.statuses[response.status_code] += 1
        if failure is not None:
            for each in getattr(failure, "exceptions", [failure]):
                kind = f"{label}: {type(each).__name__}: {str(each).splitlines()[0][:120]}"
                self.failures[kind] += 1
        if positive and 400 <= response.status_code < 500 and response.status_code not in EXPECTED_REFUSALS:
            try:
                body = response.json()
                field, detail = str(body.get("field")), str(body.get("detail"))
            except ValueError:
                field, detail = "?", response.text
            if any(words in detail for words in ABOUT_STATE):
                self.about_state[label] += 1
                return
            self.refused[(label, str(response.status_code), field)] += 1
            self.examples.setdefault(f"{label} {field}", detail[:100])


def main() -> int:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # (so the served process is stopped too)
    import schemathesis
    from hypothesis import HealthCheck, given, settings
    from hypothesis.errors import Unsatisfiable
    from schemathesis import GenerationMode
    from schemathesis.checks import not_a_server_error
    from schemathesis.specs.openapi.checks import (
        content_type_conformance,
        response_schema_conformance,
        status_code_conformance,
    )

    from tests.api_support import ADMIN_KEY, register_story, start_server, stop_server

    checks = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
    server = start_server(Path(tempfile.mkdtemp(prefix="noumena-fuzz-")) / "home")
    tally = Tally()
    started = time.monotonic()
    try:
        tenant = server.tenant("fuzz")
        register_story(tenant, "fuzz")
        schema = schemathesis.openapi.from_url(server.url + "/v1/openapi.json")
        operations = [result.ok() for result in schema.get_all_operations()]

        def headers_for(path: str) -> dict[str, str]:
            return {"Authorization": f"Bearer {ADMIN_KEY if path.startswith('/v1/admin') else tenant.key}"}

        def fuzz(operation: Any, mode: GenerationMode) -> None:
            @given(case=operation.as_strategy(generation_mode=mode))
            @settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=None,
                      suppress_health_check=list(HealthCheck))
            def run(case: schemathesis.Case) -> None:
                try:
                    response = case.call(base_url=server.url, headers=headers_for(case.path), timeout=TIMEOUT)
                except OSError as error:  # requests' timeouts and dropped connections are OSErrors
                    tally.unanswered[f"{case.operation.label}: {type(error).__name__}"] += 1
                    return
                failure = None
                try:
                    case.validate_response(response, checks=checks)
                except Exception as error:
                    failure = error
                tally.record(case.operation.label, mode is GenerationMode.POSITIVE, response, failure)

            try:
                run()
            except Unsatisfiable:
                pass

        for operation in operations:
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
                fuzz(operation, mode)
        single = tally.cases
        print(f"per operation: {single} cases over {len(operations)} operations in {time.monotonic() - started:.0f} s",
              flush=True)

        machine = schema.as_state_machine()
        links = machine.schema.statistic.transitions.total if hasattr(machine.schema, "statistic") else "?"

        class Workflow(machine):  # type: ignore[misc, valid-type]
            def get_call_kwargs(self, case: schemathesis.Case) -> dict[str, Any]:
                return {"base_url": server.url, "headers": headers_for(case.path), "timeout": TIMEOUT}

            def validate_response(self, response: Any, case: schemathesis.Case, additional_checks: Any = None,
                                  **kwargs: Any) -> None:
                failure = None
                try:
                    case.validate_response(response, checks=checks)
                except Exception as error:
                    failure = error
                tally.record(f"stateful {case.operation.label}", False, response, failure)

        Workflow.run(settings=settings(max_examples=SCENARIOS, stateful_step_count=10, deadline=None,
                                       derandomize=True, database=None, suppress_health_check=list(HealthCheck)))
        print(f"stateful: {tally.cases - single} cases in {SCENARIOS} scenarios over {links} links", flush=True)
    finally:
        stop_server(server)
    errors = sum(n for status, n in tally.statuses.items() if status >= 500)
    print(f"\nschemathesis: {tally.cases} cases in {time.monotonic() - started:.0f} s; server errors: {errors};"
          f" statuses {dict(sorted(tally.statuses.items()))}")
    print(f"no answer within {TIMEOUT:g} s: {sum(tally.unanswered.values())} {dict(tally.unanswered)}")
    print(f"failed checks: {sum(tally.failures.values())}")
    for kind, n in tally.failures.most_common(20):
        print(f"  {n:5d}  {kind}")
    print(f"valid per schema but refused for what the tenant holds or the clock says (unregistered refs, unknown "
          f"sessions or facts, a min_position beyond the log, a valid_to before now): "
          f"{sum(tally.about_state.values())}")
    print(f"valid per schema but refused otherwise (positive cases answered 4xx other than "
          f"{sorted(EXPECTED_REFUSALS)}): {sum(tally.refused.values())}")
    for (label, status, field), n in tally.refused.most_common(30):
        print(f"  {n:5d}  {label} -> {status} {field}: {tally.examples.get(f'{label} {field}', '')}")
    return 1 if errors or tally.unanswered else 0


if __name__ == "__main__":
    sys.exit(main())
