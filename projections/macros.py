"""Point-in-time table macros, stored in the DuckDB file itself so that stock `duckdb` can call them.

Semantics (docs/sql.md documents them with examples; tests hold them equal to a replay of the log):

- `facts_as_of(recorded_at, valid_at := NULL)`: the fact versions believed at transaction time `recorded_at`
  (`recorded_from <= recorded_at < recorded_to`). Without `valid_at`: only those whose status was 'current'
  then: what the ontology said was current. With `valid_at`: those believed then whose valid interval
  `[valid_from, valid_to)` contains `valid_at` (NULL bounds are open), whether current or invalidated then
  (invalidation ends a fact's valid time, it does not erase its past); archived versions are hidden, as they
  are from every current answer. `recorded_at` NULL means "now" (the latest belief).
- `entity_neighbours_as_of(ref, recorded_at)`: every fact current at `recorded_at` with `ref` at either end,
  the entity at the other end with its label as it was then, and the direction.
- `activation_as_of(agent, at, decay := 0.5, time_unit := 1, minimum_age := 1)`: ACT-R base level per fact
  for one agent, B = ln sum_j (max(t - t_j, minimum_age) / time_unit)^(-decay), t and t_j in seconds, over the
  fact's assertion (the first use, for every agent) and this agent's recalls recorded at or before `at`.
  Only facts of tenants where `agent` was registered at `at`. `time_unit := 604800, minimum_age := 3600` gives
  the perspective's B (domain/activation.py measures ages in weeks, at least an hour).
"""

from __future__ import annotations

import duckdb

MIN_LAG_SECONDS = 1.0
"""A use less than this long before `at` counts as this old: (t - t_j)^-d is infinite at t = t_j."""

FACTS_AS_OF = """
CREATE OR REPLACE MACRO facts_as_of(recorded_at, valid_at := NULL) AS TABLE
SELECT v.tenant, v.fact_id, v.subject, v.relation, v.object, v.scope, v.reason, v.confidence, v.status,
       v.valid_from, v.valid_to, v.asserted_at, v.sources, v.superseded_by, v.supersedes, v.ended_reason,
       v.version, v.recorded_from, v.recorded_to
FROM fact_versions AS v
WHERE v.recorded_from <= coalesce(CAST(recorded_at AS TIMESTAMPTZ), TIMESTAMPTZ 'infinity')
  AND (v.recorded_to IS NULL OR coalesce(CAST(recorded_at AS TIMESTAMPTZ), TIMESTAMPTZ 'infinity') < v.recorded_to)
  AND CASE WHEN valid_at IS NULL THEN v.status = 'current'
           ELSE v.status <> 'archived'
                AND (v.valid_from IS NULL OR v.valid_from <= CAST(valid_at AS TIMESTAMPTZ))
                AND (v.valid_to IS NULL OR CAST(valid_at AS TIMESTAMPTZ) < v.valid_to)
      END
"""

ENTITY_NEIGHBOURS_AS_OF = """
CREATE OR REPLACE MACRO entity_neighbours_as_of(ref, recorded_at) AS TABLE
WITH edges AS (
  SELECT f.tenant, f.fact_id, f.relation, f.scope, f.confidence, f.reason,
         CASE WHEN f.subject = ref THEN f.object ELSE f.subject END AS neighbour,
         CASE WHEN f.subject = ref THEN 'out' ELSE 'in' END AS direction
  FROM facts_as_of(recorded_at) AS f
  WHERE f.subject = ref OR f.object = ref
)
SELECT e.tenant, e.neighbour, n.label, n.hub, e.relation, e.direction, e.fact_id, e.scope, e.confidence, e.reason
FROM edges AS e
LEFT JOIN entity_versions AS n
  ON n.tenant = e.tenant AND n.ref = e.neighbour
 AND n.recorded_from <= coalesce(CAST(recorded_at AS TIMESTAMPTZ), TIMESTAMPTZ 'infinity')
 AND (n.recorded_to IS NULL OR coalesce(CAST(recorded_at AS TIMESTAMPTZ), TIMESTAMPTZ 'infinity') < n.recorded_to)
"""

ACTIVATION_AS_OF = f"""
CREATE OR REPLACE MACRO activation_as_of(agent, "at", decay := 0.5, time_unit := 1.0,
                                          minimum_age := {MIN_LAG_SECONDS}) AS TABLE
WITH tenants_of_agent AS (
  SELECT DISTINCT a.tenant FROM entity_versions AS a
  WHERE a.ref = agent AND a.recorded_from <= CAST("at" AS TIMESTAMPTZ)
),
uses AS (
  SELECT c.tenant, c.fact_id, c.recorded_at AS used_at FROM fact_changes AS c
  WHERE c.change = 'asserted' AND c.recorded_at <= CAST("at" AS TIMESTAMPTZ)
    AND c.tenant IN (SELECT tenant FROM tenants_of_agent)
  UNION ALL
  SELECT u.tenant, u.fact_id, u.used_at FROM fact_uses AS u
  WHERE u.agent = agent AND u.used_at <= CAST("at" AS TIMESTAMPTZ)
),
scores AS (
  SELECT s.tenant, s.fact_id, count(*) AS uses, max(s.used_at) AS last_used_at,
         ln(sum(pow(greatest(epoch(CAST("at" AS TIMESTAMPTZ)) - epoch(s.used_at), CAST(minimum_age AS DOUBLE))
                    / CAST(time_unit AS DOUBLE), -CAST(decay AS DOUBLE)))) AS activation
  FROM uses AS s GROUP BY s.tenant, s.fact_id
)
SELECT sc.tenant, agent AS agent, sc.fact_id, v.subject, v.relation, v.object, v.status, sc.uses,
       sc.last_used_at, sc.activation
FROM scores AS sc
LEFT JOIN fact_versions AS v
  ON v.tenant = sc.tenant AND v.fact_id = sc.fact_id
 AND v.recorded_from <= CAST("at" AS TIMESTAMPTZ)
 AND (v.recorded_to IS NULL OR CAST("at" AS TIMESTAMPTZ) < v.recorded_to)
"""

MACROS = {
    "facts_as_of": FACTS_AS_OF,
    "entity_neighbours_as_of": ENTITY_NEIGHBOURS_AS_OF,
    "activation_as_of": ACTIVATION_AS_OF,
}


def create_macros(con: duckdb.DuckDBPyConnection) -> None:
    """(Re)create the point-in-time macros in the database `con` is using; they persist in its file."""
    for sql in MACROS.values():
        con.execute(sql)
