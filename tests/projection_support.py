"""Helpers shared by the projection tests: random workloads written through the real service, fact rows from
the log fold (projections.ontology_as_of) in the projection's shape, and content hashes of DuckDB tables."""

from __future__ import annotations

import random
import select
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb

from domain import commands as c
from domain.application.ontology_service import OntologyService
from domain.errors import DomainError
from domain.facts import FactStatus
from domain.ontology import Ontology
from domain.recalls import RecallMode
from domain.sessions import WorkerStatus
from projections.schema import ALL_TABLES

FACT_COLUMNS = ("tenant", "fact_id", "subject", "relation", "object", "scope", "reason", "confidence", "status",
                "valid_from", "valid_to", "asserted_at", "sources", "superseded_by", "supersedes", "ended_reason")
"""The attributes compared between the projection and the log fold."""

TENANTS = ("t1", "t2")
REFS = ("person:a", "person:b", "thing:x", "thing:y", "memory:m", "agent:z")
RELATIONS = ("stage", "knows", "likes")  # functional, symmetric, plain
BASE = datetime(2026, 9, 1, tzinfo=UTC)
VALID_TIMES: tuple[datetime | None, ...] = (None, BASE, BASE + timedelta(days=1), BASE + timedelta(days=2),
                                            BASE + timedelta(days=3))


def first_line(process: Any, timeout: float = 120.0) -> bytes:
    """The first line a child process writes to its stderr pipe, waiting at most `timeout` seconds for it (a child
    that stalls before printing fails the test instead of hanging the run)."""
    ready, _, _ = select.select([process.stderr], [], [], timeout)
    assert ready, f"the process printed nothing within {timeout:.0f} s (exit status {process.poll()})"
    return process.stderr.readline()  # type: ignore[no-any-return]


class ManualClock:
    """Transaction time under the test's control: it moves only when told to."""

    def __init__(self, start: datetime = BASE) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now


def fact_rows_from_log(state: Ontology, valid_at: datetime | None = None) -> dict[tuple[str, str], tuple]:
    """The facts_as_of rows the log fold gives: current facts, or with `valid_at` the non-archived facts whose
    valid interval [valid_from, valid_to) contains it."""
    rows = {}
    for f in state.facts.values():
        if valid_at is None:
            if f.status is not FactStatus.CURRENT:
                continue
        else:
            if f.status is FactStatus.ARCHIVED:
                continue
            if f.valid_from is not None and f.valid_from > valid_at:
                continue
            if f.valid_to is not None and valid_at >= f.valid_to:
                continue
        rows[(state.tenant, f.fact_id)] = (
            state.tenant, f.fact_id, f.subject, f.relation, f.object, f.scope, f.reason, f.confidence,
            f.status.value, f.valid_from, f.valid_to, f.asserted_at, len(f.provenance), f.superseded_by,
            f.supersedes, f.ended_reason)
    return rows


def fact_rows_from_sql(con: duckdb.DuckDBPyConnection, sql: str, params: list[Any] | None = None
                       ) -> dict[tuple[str, str], tuple]:
    columns = ", ".join(FACT_COLUMNS)
    rows = con.execute(f"SELECT {columns} FROM ({sql})", params or []).fetchall()
    keyed = {(r[0], r[1]): tuple(r) for r in rows}
    assert len(keyed) == len(rows), "a fact appears twice"
    return keyed


def content_hashes(con: duckdb.DuckDBPyConnection) -> dict[str, tuple[int, str]]:
    """Per table: row count and an md5 of all rows in a canonical order (duplicates change both)."""
    con.execute("SET TimeZone = 'UTC'")
    hashes = {}
    for table in ALL_TABLES:
        hashes[table.name] = con.execute(
            f"SELECT count(*), md5(coalesce(string_agg(CAST(t AS VARCHAR), chr(10) ORDER BY CAST(t AS VARCHAR)),"
            f" '')) FROM {table.name} AS t").fetchall()[0]
    return hashes


def table_differences(con: duckdb.DuckDBPyConnection, other: Path, limit: int = 20) -> str:
    """The rows that differ between the database of `con` and the DuckDB file `other`, per table (up to `limit`
    each way): what an assertion on `content_hashes` prints, so a mismatch explains itself."""
    con.execute(f"ATTACH '{str(other).replace(chr(39), chr(39) * 2)}' AS noumena_other (READ_ONLY)")
    try:
        lines = []
        for table in ALL_TABLES:
            for label, a, b in (("only here", table.name, f"noumena_other.{table.name}"),
                                ("only in the other", f"noumena_other.{table.name}", table.name)):
                rows = con.execute(f"SELECT * FROM (SELECT * FROM {a} EXCEPT ALL SELECT * FROM {b}) AS t"
                                   f" ORDER BY CAST(t AS VARCHAR) LIMIT {limit}").fetchall()
                lines += [f"{table.name} {label}: {row}" for row in rows]
        return "\n".join(lines) or "(no differing rows)"
    finally:
        con.execute("DETACH noumena_other")


class Workload:
    """Random but valid-looking commands for one or more tenants; rejected ones are simply skipped."""

    def __init__(self, rng: random.Random, tenants: tuple[str, ...] = TENANTS) -> None:
        self.rng = rng
        self.tenants = tenants
        self.fact_ids: dict[str, list[str]] = {t: [] for t in tenants}
        self.sessions = 0

    def setup(self) -> list[c.Command]:
        commands: list[c.Command] = []
        for tenant in self.tenants:
            commands.append(c.CreateTenant(tenant=tenant))
            commands += [c.RegisterEntity(tenant=tenant, ref=ref, label=ref.upper()) for ref in REFS]
        return commands

    def next(self) -> c.Command:
        rng, tenant = self.rng, self.rng.choice(self.tenants)
        facts = self.fact_ids[tenant]
        kind = rng.choices(
            ["assert", "invalidate", "correct", "archive", "restore", "recall", "entity", "session", "worker", "end"],
            weights=[10, 3, 2, 1, 1, 3, 1, 1, 2, 1])[0]
        if kind == "assert" or not facts and kind in ("invalidate", "correct", "archive", "restore", "recall"):
            valid_from = rng.choice(VALID_TIMES)
            later = [v for v in VALID_TIMES if v is not None and (valid_from is None or v > valid_from)]
            valid_to = rng.choice([None, *later]) if rng.random() < 0.3 else None
            return c.AssertFact(tenant=tenant, subject=rng.choice(REFS), relation=rng.choice(RELATIONS),
                                object=rng.choice(REFS), scope=rng.choice(["org", "org", "person:a", "session:s0"]),
                                confidence=rng.choice([None, 0.5, 0.9]), valid_from=valid_from, valid_to=valid_to,
                                reason=rng.choice([None, "because"]))
        if kind == "invalidate":
            return c.InvalidateFact(tenant=tenant, fact_id=rng.choice(facts), reason="no longer true",
                                    valid_to=rng.choice(VALID_TIMES[1:]) if rng.random() < 0.5 else None)
        if kind == "correct":  # a fact's interval corrected (in a functional timeline, its neighbours cut)
            bounds = sorted(rng.sample([v for v in VALID_TIMES if v is not None], 2))
            valid_from, valid_to = rng.choice([(bounds[0], None), (None, bounds[1]), (bounds[0], bounds[1])])
            return c.CorrectFact(tenant=tenant, fact_id=rng.choice(facts), reason="corrected", valid_from=valid_from,
                                 valid_to=valid_to)
        if kind == "archive":
            return c.ArchiveFact(tenant=tenant, fact_id=rng.choice(facts), cause="disuse")
        if kind == "restore":
            return c.RestoreFact(tenant=tenant, fact_id=rng.choice(facts), cause="recalled")
        if kind == "recall":
            return c.RecordRecall(tenant=tenant, agent=rng.choice(["agent:z", "person:a"]),
                                  fact_ids=tuple(rng.sample(facts, min(len(facts), rng.randint(1, 3)))),
                                  mode=rng.choice(list(RecallMode)))
        if kind == "entity":
            return c.RegisterEntity(tenant=tenant, ref=rng.choice(REFS), label=rng.choice(["A", "B", "C"]),
                                    hub=rng.random() < 0.3)
        if kind == "session":
            self.sessions += 1
            return c.StartSession(tenant=tenant, session_id=f"s{self.sessions % 3}", agent="agent:z",
                                  serving="person:a")
        if kind == "worker":
            if rng.random() < 0.5:
                return c.DispatchWorker(tenant=tenant, session_id=f"s{rng.randint(0, 2)}",
                                        worker_session_id=f"w{rng.randint(0, 2)}", task="a task",
                                        about=(rng.choice(REFS),))
            return c.ReportWorker(tenant=tenant, session_id=f"w{rng.randint(0, 2)}",
                                  status=rng.choice(list(WorkerStatus)), summary="progress",
                                  about=(rng.choice(REFS),))
        return c.EndSession(tenant=tenant, session_id=f"s{rng.randint(0, 2)}")

    def run(self, service: OntologyService, command: c.Command) -> bool:
        """Execute; remember new fact ids; False when a rule rejected the command."""
        try:
            outcome = service.execute(command)
        except DomainError:
            return False
        for event in outcome.events:
            fact_id = getattr(event, "fact_id", None)
            if fact_id is not None and fact_id not in self.fact_ids[event.tenant]:
                self.fact_ids[event.tenant].append(fact_id)
        return True
