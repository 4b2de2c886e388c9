"""The append-only history tables, derived in SQL from the batch's events as JSON (`_events`: position,
recorded_at, stamped_at, topic, payload). DuckDB parses the payloads in bulk; the Python fold only keeps the
versioned and current-state tables, which need the rows as they were before the batch."""

from __future__ import annotations

import pyarrow as pa

EVENTS_SCHEMA = pa.schema([
    ("position", pa.int64()), ("recorded_at", pa.timestamp("us", tz="UTC")),
    ("stamped_at", pa.timestamp("us", tz="UTC")), ("topic", pa.string()), ("payload", pa.string()),
])

_PROVENANCE = '{"session_id": "VARCHAR", "message_ids": "VARCHAR[]", "actor": "VARCHAR", "occurred_at": "TIMESTAMPTZ"}'

_FACT_FIELDS = (
    '{"tenant": "VARCHAR", "fact_id": "VARCHAR", "promoted_fact_id": "VARCHAR", "to_scope": "VARCHAR",'
    ' "reason": "VARCHAR", "confidence": "DOUBLE", "previous_confidence": "DOUBLE", "valid_from": "TIMESTAMPTZ",'
    ' "valid_to": "TIMESTAMPTZ", "superseded_by": "VARCHAR", "supersedes": "VARCHAR", "cause": "VARCHAR",'
    f' "source_fact_ids": "VARCHAR[]", "event_id": "VARCHAR", "provenance": {_PROVENANCE}}}'
)

_SESSION_FIELDS = (
    '{"tenant": "VARCHAR", "session_id": "VARCHAR", "worker_session_id": "VARCHAR", "status": "VARCHAR",'
    ' "task": "VARCHAR", "summary": "VARCHAR", "about": "VARCHAR[]", "message_id": "VARCHAR",'
    ' "through_message_id": "VARCHAR", "role": "VARCHAR", "occurred_at": "TIMESTAMPTZ"}'
)

_RECALL_FIELDS = ('{"tenant": "VARCHAR", "agent": "VARCHAR", "mode": "VARCHAR", "perspective_id": "VARCHAR",'
                  ' "fact_ids": "VARCHAR[]", "event_id": "VARCHAR"}')

_COALESCED_FIELDS = ('{"tenant": "VARCHAR", "since": "TIMESTAMPTZ", "event_id": "VARCHAR", "uses": [{"agent":'
                     ' "VARCHAR", "mode": "VARCHAR", "fact_ids": ["VARCHAR"], "seconds": ["BIGINT"]}]}')

FACT_TOPICS = frozenset({"fact.asserted", "fact.corroborated", "fact.invalidated", "fact.corrected", "fact.archived",
                         "fact.restored", "fact.promoted"})
SESSION_TOPICS = frozenset({"session.started", "message.appended", "worker.dispatched", "worker.reported",
                            "session.compacted", "session.ended"})

HISTORY_SQL: list[tuple[frozenset[str] | None, str]] = [
    (None, """
INSERT INTO clock
SELECT position, recorded_at, stamped_at, json_extract_string(payload, '$.tenant'), topic,
       json_extract_string(payload, '$.event_id')
FROM _events ORDER BY position"""),
    (frozenset({"tenant.created"}), """
INSERT INTO tenants
SELECT e.j.tenant, coalesce(e.j.display_name, ''), e.stamped_at, e.position
FROM (SELECT *, json_transform(payload, '{"tenant": "VARCHAR", "display_name": "VARCHAR"}') AS j
      FROM _events WHERE topic = 'tenant.created') AS e ORDER BY e.position"""),
    # Subject, relation, object and scope never change: later changes take them from the fact's first version,
    # which an earlier batch or this one (written before the history) stored.
    (FACT_TOPICS, f"""
INSERT INTO fact_changes
SELECT e.position, e.recorded_at, e.j.tenant, coalesce(e.j.fact_id, e.j.promoted_fact_id), substr(e.topic, 6),
       v.subject, v.relation, v.object, coalesce(v.scope, e.j.to_scope), e.j.reason, e.j.confidence,
       e.j.previous_confidence, e.j.valid_from, e.j.valid_to, e.j.superseded_by, e.j.supersedes, e.j.cause,
       e.j.source_fact_ids, e.j.provenance.session_id, e.j.provenance.message_ids, e.j.provenance.actor,
       e.j.provenance.occurred_at, e.j.event_id
FROM (SELECT position, recorded_at, topic, json_transform(payload, '{_FACT_FIELDS}') AS j
      FROM _events WHERE topic LIKE 'fact.%') AS e
LEFT JOIN fact_versions AS v ON v.tenant = e.j.tenant AND v.fact_id = e.j.fact_id AND v.version = 1
ORDER BY e.position"""),
    (SESSION_TOPICS, f"""
INSERT INTO session_changes
SELECT e.position, e.recorded_at, e.j.tenant, e.j.session_id,
       CASE e.topic WHEN 'session.started' THEN 'started' WHEN 'message.appended' THEN 'message'
                    WHEN 'worker.dispatched' THEN 'dispatched' WHEN 'worker.reported' THEN 'reported'
                    WHEN 'session.compacted' THEN 'compacted' ELSE 'ended' END,
       e.j.worker_session_id, CASE WHEN e.topic = 'worker.dispatched' THEN 'dispatched' ELSE e.j.status END,
       e.j.task, e.j.summary, e.j.about, coalesce(e.j.message_id, e.j.through_message_id), e.j.role,
       e.j.occurred_at
FROM (SELECT position, recorded_at, topic, json_transform(payload, '{_SESSION_FIELDS}') AS j
      FROM _events WHERE topic IN ({", ".join(f"'{t}'" for t in sorted(SESSION_TOPICS))})) AS e
ORDER BY e.position"""),
    (frozenset({"facts.recalled"}), f"""
INSERT INTO recalls
SELECT e.position, e.recorded_at, e.j.tenant, e.j.agent, e.j.mode, e.j.perspective_id, e.j.fact_ids, e.j.event_id
FROM (SELECT position, recorded_at, json_transform(payload, '{_RECALL_FIELDS}') AS j
      FROM _events WHERE topic = 'facts.recalled') AS e ORDER BY e.position"""),
    (frozenset({"recalls.coalesced"}), f"""
INSERT INTO recalls
SELECT e.position, e.recorded_at, e.j.tenant, g.agent, g.mode, NULL, g.fact_ids, e.j.event_id
FROM (SELECT position, recorded_at, json_transform(payload, '{_COALESCED_FIELDS}') AS j
      FROM _events WHERE topic = 'recalls.coalesced') AS e, unnest(e.j.uses) AS u(g) ORDER BY e.position"""),
    (frozenset({"recalls.coalesced"}), f"""
INSERT INTO fact_uses
SELECT tenant, agent, fact_id, since + to_seconds(offset_seconds), position, mode
FROM (SELECT e.j.tenant AS tenant, g.agent AS agent, unnest(g.fact_ids) AS fact_id,
             unnest(g.seconds) AS offset_seconds, e.j.since AS since, e.position AS position, g.mode AS mode
      FROM (SELECT position, json_transform(payload, '{_COALESCED_FIELDS}') AS j
            FROM _events WHERE topic = 'recalls.coalesced') AS e, unnest(e.j.uses) AS u(g))"""),
    (frozenset({"facts.recalled"}), f"""
INSERT INTO fact_uses
SELECT e.j.tenant, e.j.agent, unnest(e.j.fact_ids), e.recorded_at, e.position, e.j.mode
FROM (SELECT position, recorded_at, json_transform(payload, '{_RECALL_FIELDS}') AS j
      FROM _events WHERE topic = 'facts.recalled') AS e"""),
]


def statements_for(topics: set[str]) -> list[str]:
    """The history statements a batch with these topics needs (the clock always)."""
    return [sql for needs, sql in HISTORY_SQL if needs is None or needs & topics]
