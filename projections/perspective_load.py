"""Bulk loading of a perspective index at start: from polars frames, or from the DuckDB read model.

The frames (the interface any source fills; `from_duckdb` fills it from the projections' tables):

- entities: `ref` str, `label` str, `hub` bool
- facts: `fact_id` str, `subject` str, `relation` str, `object` str, `scope` str, `reason` str|null,
  `confidence` float, `status` str ('current' | 'invalidated' | 'archived'), `asserted_at` float (epoch
  seconds), `provenance` str|null (one line: session, messages, actor)
- sessions: `session_id` str, `agent` str, `serving` str|null (workers carry their main session's)
- relations: `name` str, `weight` float (only relation types a tenant defined; built-ins are known)
- uses: `agent` str, `fact_id` str, `used_at` float (epoch seconds): recalls only, the assertion is implicit
- log_uses: `fact_id` str, `change` str ('corroborated' | 'corrected'), `used_at` float: the uses the log shows
  for every agent, dated where they happened
- episodes: `person` str, `at` float: a session serving the person started, or one of them compacted
- mentions: `ref` str, `at` float: a worker was about the entity (facts naming it are taken from `facts`)

From DuckDB: `entities` and `facts` (views over the current versions), `sessions`, `relation_types`,
`fact_uses`, the asserted, corroborated and corrected rows of `fact_changes` (provenance, log uses and
mentions), the started, compacted, dispatched and reported rows of `session_changes` (episodes and mentions) and
`projection_position` (where to resume following the log).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import numpy as np
import polars as pl

from domain.forgetting import FORGOTTEN
from projections.perspective_columns import Column, Texts
from projections.perspective_fact_ids import FactIds
from projections.perspective_index import STATUS_CODES, PerspectiveIndex
from projections.perspective_uses import CORRECTIONS, CORROBORATIONS
from projections.schema import PROJECTION_NAME


def _hashes(ids: pl.Series) -> np.ndarray:
    """`id_hash` for a whole column: hex prefixes parsed by polars, blake2b for the rest."""
    parsed = ids.str.slice(0, 16).str.to_integer(base=16, dtype=pl.UInt64, strict=False)
    mask = parsed.is_null() | (ids.str.len_chars() < 16)
    values = parsed.fill_null(0).to_numpy().astype(np.uint64).view(np.int64).copy()
    for k in np.nonzero(mask.to_numpy())[0]:
        digest = int.from_bytes(hashlib.blake2b(ids[int(k)].encode(), digest_size=8).digest(), "big")
        values[k] = digest - (1 << 64) if digest >= (1 << 63) else digest
    return values


def _texts(column: pl.Series) -> Texts:
    """A whole column as `Texts`, its bytes joined by polars: no Python step per text (a reload after a forget
    builds these for every fact of the tenant while the process serves)."""
    column = column.fill_null("")
    if column.is_empty():
        return Texts()
    return Texts.joined(column.str.join("").item().encode(), column.str.len_bytes().to_numpy())


def from_frames(tenant: str, entities: pl.DataFrame, facts: pl.DataFrame, sessions: pl.DataFrame | None = None,
                relations: pl.DataFrame | None = None, uses: pl.DataFrame | None = None, position: int = 0,
                clock: float | None = None, log_uses: pl.DataFrame | None = None,
                episodes: pl.DataFrame | None = None, mentions: pl.DataFrame | None = None) -> PerspectiveIndex:
    """Build an index in bulk (vectorized; one Python step per entity, none per fact)."""
    index = PerspectiveIndex(tenant)
    for ref, label, hub in zip(entities["ref"].to_list(), entities["label"].to_list(), entities["hub"].to_list(),
                               strict=True):
        index.entity(ref, label, bool(hub))
    if "merged_into" in entities.columns:
        for ref, into in zip(entities["ref"].to_list(), entities["merged_into"].to_list(), strict=True):
            if into:
                index.merge(index.entity(ref), index.entity(into))
    if relations is not None:
        for name, weight in zip(relations["name"].to_list(), relations["weight"].to_list(), strict=True):
            index.relation(name, float(weight))
    if sessions is not None:
        for sid, agent, serving in zip(sessions["session_id"].to_list(), sessions["agent"].to_list(),
                                       sessions["serving"].to_list(), strict=True):
            index.session(sid, index.resolve(index.entity(agent)),
                          index.resolve(index.entity(serving)) if serving else -1)

    # refs, relations and scopes named only by facts get their codes here (few distinct values)
    for ref in pl.concat([facts["subject"], facts["object"]]).unique().to_list():
        if ref not in index.entity_ids:
            index.entity(ref)
    for name in facts["relation"].unique().to_list():
        index.relation(name)
    for name in facts["scope"].unique().to_list():
        index.scope_code(name)

    def codes(column: str, mapping: dict[str, int], dtype: type) -> np.ndarray:
        table = pl.DataFrame({"k": list(mapping), "v": list(mapping.values())}, schema={"k": pl.String, "v": pl.Int64})
        joined = facts.select(pl.col(column).alias("k")).join(table, on="k", how="left", maintain_order="left")
        return joined["v"].to_numpy().astype(dtype)

    n = facts.height
    canonical = index.canonical.view  # a fact naming a merged entity belongs to the one it was merged into
    index.src = Column(np.int32, data=canonical[codes("subject", index.entity_ids, np.int64)])
    index.dst = Column(np.int32, data=canonical[codes("object", index.entity_ids, np.int64)])
    index.rel = Column(np.int16, data=codes("relation", index.rel_codes, np.int16))
    index.scope = Column(np.int32, data=codes("scope", index.scopes.codes, np.int32))
    index.conf = Column(np.float32, data=facts["confidence"].to_numpy())
    index.status = Column(np.int8, data=codes("status", STATUS_CODES, np.int8))
    index.asserted = Column(np.float64, data=facts["asserted_at"].cast(pl.Float64).to_numpy())
    index.fact_ids = FactIds(Column("S32", data=facts["fact_id"].to_numpy().astype("S32")),
                             Column(np.int64, data=_hashes(facts["fact_id"])))
    index.reasons = _texts(facts["reason"])
    index.provenance = (_texts(facts["provenance"]) if "provenance" in facts.columns
                        else Texts.joined(b"", np.zeros(n, dtype=np.int64)))
    current = index.status.view == 0
    index.live = Column(np.int32, data=np.where(current, index.scope.view + 1, 0))

    def fan(facts: np.ndarray) -> Column:
        src, dst = index.src.view[facts], index.dst.view[facts]
        ends = np.concatenate([src, dst[src != dst]])
        return Column(np.int32, data=np.bincount(ends, minlength=len(index.refs)).astype(np.int32))

    index.fan = fan(current)
    index.fan_org = fan(current & (index.scope.view == 0))
    index.compact()

    if uses is not None and uses.height:
        fact_index = _index_of(index, uses["fact_id"])
        for agent, group in uses.with_columns(pl.Series("f", fact_index)).filter(pl.col("f") >= 0).group_by(
                "agent", maintain_order=True):
            agent_id = index.resolve(index.entity(str(agent[0])))
            index.uses.load(agent_id, group["f"].to_numpy(), group["used_at"].cast(pl.Float64).to_numpy())
    if log_uses is not None and log_uses.height:
        fact_index = _index_of(index, log_uses["fact_id"])
        found = log_uses.with_columns(pl.Series("f", fact_index)).filter(pl.col("f") >= 0)
        for key, change in ((CORROBORATIONS, "corroborated"), (CORRECTIONS, "corrected")):
            rows = found.filter(pl.col("change") == change)
            if rows.height:
                index.uses.load(key, rows["f"].to_numpy(), rows["used_at"].cast(pl.Float64).to_numpy())
    if episodes is not None and episodes.height:
        for person, group in episodes.group_by("person", maintain_order=True):
            index.episodes.load(index.resolve(index.entity(str(person[0]))),
                                group["at"].cast(pl.Float64).to_numpy())
    _mentions(index, mentions)
    index.position = position
    if clock is not None:
        index.clock = clock
    elif n:
        index.clock = float(index.asserted.view.max())
    return index


def _mentions(index: PerspectiveIndex, mentions: pl.DataFrame | None) -> None:
    """Each entity's latest mention: the latest first use of a fact naming it (any status), or of a worker about
    it (`mentions`)."""
    latest = index.mentioned.view
    if index.fact_count:
        np.maximum.at(latest, index.src.view, index.asserted.view)
        np.maximum.at(latest, index.dst.view, index.asserted.view)
    if mentions is not None and mentions.height:
        ids = np.array([index.resolve(index.entity(str(ref))) for ref in mentions["ref"].to_list()], dtype=np.int64)
        latest = index.mentioned.view  # (entities may have been added)
        np.maximum.at(latest, ids, mentions["at"].cast(pl.Float64).to_numpy())


def _index_of(index: PerspectiveIndex, ids: pl.Series) -> np.ndarray:
    """The int ids of many fact ids (-1 when unknown), vectorized over the sorted hashes."""
    return index.fact_ids.find_many(ids.to_numpy().astype("S32"), _hashes(ids))


def _epoch(column: str) -> str:
    return f"epoch_us({column}) / 1e6"


def provenance_line() -> pl.Expr:
    """`provenance_text` as a column expression: a tenant's facts are turned into lines by polars, off the
    interpreter lock (a loop over their Python values held it, and every other request of the process, for as long
    as it took)."""
    def given(column: str) -> pl.Expr:
        return pl.col(column).fill_null("") != ""

    return pl.concat_str([
        pl.when(given("session_id")).then(pl.lit("session ") + pl.col("session_id")),
        pl.when(pl.col("message_ids").list.len().fill_null(0) > 0).then(
            pl.lit("messages ") + pl.col("message_ids").list.join(", ")),
        pl.when(given("actor")).then(pl.lit("by ") + pl.col("actor")),
    ], separator="; ", ignore_nulls=True)


def from_duckdb(con: duckdb.DuckDBPyConnection, tenant: str, as_of: datetime | None = None) -> PerspectiveIndex:
    """Build a tenant's index from the projections' DuckDB tables (see the module docstring).

    With `as_of`: what was believed at that transaction time, through the read model's point-in-time tables
    (`facts_as_of`, `entity_versions`, uses and provenance recorded by then) instead of folding the log.
    Relation weights and sessions are taken as they are now (both are rarely redefined)."""
    at = as_of.astimezone(UTC) if as_of is not None else None

    def frame(sql: str) -> pl.DataFrame:
        params: list[object] = [tenant] if at is None else [tenant, at]
        return pl.from_arrow(con.sql(sql, params=params).to_arrow_table())  # type: ignore[return-value]

    if at is None:
        entities = frame("SELECT ref, label, hub, merged_into FROM entities WHERE tenant = $1 ORDER BY ref")
        source, changes, used = "facts", "TRUE", "TRUE"
    else:
        entities = frame("SELECT ref, label, hub, merged_into FROM entity_versions WHERE tenant = $1"
                         " AND recorded_from <= $2"
                         " AND (recorded_to IS NULL OR $2 < recorded_to) ORDER BY ref")
        source, changes, used = "facts_as_of($2)", "recorded_at <= $2", "used_at <= $2"
    facts = frame(f"""
        SELECT f.fact_id, f.subject, f.relation, f.object, f.scope, f.reason, f.confidence, f.status,
               {_epoch('least(f.asserted_at, coalesce(c.occurred_at, f.asserted_at))')} AS asserted_at,
               c.session_id, c.message_ids, c.actor
        FROM {source} AS f
        LEFT JOIN (SELECT fact_id, any_value(session_id) AS session_id, any_value(message_ids) AS message_ids,
                          any_value(actor) AS actor, any_value(occurred_at) AS occurred_at
                   FROM fact_changes WHERE tenant = $1 AND change = 'asserted' AND {changes} GROUP BY fact_id) AS c
          ON c.fact_id = f.fact_id
        WHERE f.tenant = $1 ORDER BY f.asserted_at, f.fact_id""")
    facts = facts.with_columns(provenance_line().alias("provenance")).drop("session_id", "message_ids", "actor")
    sessions = frame("SELECT session_id, agent, serving FROM sessions WHERE tenant = $1"
                     + ("" if at is None else " AND $2 IS NOT NULL"))
    relations = frame("SELECT name, weight FROM relation_types WHERE tenant = $1"
                      + ("" if at is None else " AND $2 IS NOT NULL"))
    uses = frame(f"SELECT agent, fact_id, {_epoch('used_at')} AS used_at FROM fact_uses WHERE tenant = $1"
                 f" AND {used} ORDER BY position")
    dated = _epoch("least(recorded_at, coalesce(occurred_at, recorded_at))")
    log_uses = frame(f"SELECT fact_id, change, {dated} AS used_at FROM fact_changes WHERE tenant = $1"
                     f" AND change IN ('corroborated', 'corrected') AND {changes} ORDER BY position")
    # a compaction belongs to the person its session serves (a worker's: its main session's, as the index keeps)
    episodes = frame(f"""
        SELECT coalesce(s.serving, m.serving) AS person, {_epoch('least(c.recorded_at, coalesce(c.occurred_at,'
                                                                ' c.recorded_at))')} AS "at"
        FROM session_changes AS c JOIN sessions AS s ON s.tenant = c.tenant AND s.session_id = c.session_id
        LEFT JOIN sessions AS m ON m.tenant = s.tenant AND m.session_id = s.parent_session_id
        WHERE c.tenant = $1 AND (c.change = 'started' AND s.serving IS NOT NULL
                                 OR c.change = 'compacted' AND coalesce(s.serving, m.serving) IS NOT NULL)
          AND {changes.replace('recorded_at', 'c.recorded_at')} ORDER BY c.position""")
    mentions = frame(f"SELECT unnest(about) AS ref, {dated} AS \"at\" FROM session_changes WHERE tenant = $1"
                     f" AND change IN ('dispatched', 'reported') AND about IS NOT NULL AND {changes}")
    if at is None:
        rows = con.execute("SELECT position, epoch_us(clock) / 1e6 FROM projection_position WHERE projection = ?",
                           [PROJECTION_NAME]).fetchall()
        position, clock = (int(rows[0][0]), rows[0][1]) if rows else (0, None)
    else:
        rows = con.execute("SELECT coalesce(max(position), 0) FROM clock WHERE recorded_at <= ?", [at]).fetchall()
        position, clock = int(rows[0][0]) if rows else 0, at.timestamp()
    return from_frames(tenant, entities, facts, sessions, relations, uses, position=position, clock=clock,
                       log_uses=log_uses, episodes=episodes, mentions=mentions)


@dataclass(frozen=True)
class TextsNow:
    """Labels and reasons of a tenant as the live read model has them after a forget (`texts_now`)."""

    fact_ids: pl.Series
    reasons: list[str]
    labels: dict[str, str | None]


def texts_now(con: duckdb.DuckDBPyConnection, tenant: str, index: PerspectiveIndex) -> TextsNow:
    """After a forget, the texts of `index` the read model may read otherwise now: every fact's reason and entity's
    label reading `[forgotten]` there (the redaction blanked it, or the rebuilt file does), and every one `index`
    took from here before (a rebuilt file is exact: what the redaction blanked only for being equal to a forgotten
    text comes back). Only those rows are read, not the tenant's whole index again: a reload from the file held
    the interpreter for seconds, which every other tenant's requests waited for."""
    replaced = np.fromiter(index.reasons.replaced, dtype=np.int64, count=len(index.reasons.replaced))
    before = [bytes(fact_id).decode() for fact_id in index.fact_ids.ids.data[replaced]]
    refs = [index.refs[entity] for entity in index.replaced_labels]
    facts = pl.from_arrow(con.sql(
        "SELECT fact_id, coalesce(reason, '') AS reason FROM facts WHERE tenant = $1"
        " AND (reason = $2 OR fact_id IN (SELECT unnest($3::VARCHAR[])))",
        params=[tenant, FORGOTTEN, before]).to_arrow_table())
    labels = con.execute(
        "SELECT ref, label FROM entities WHERE tenant = $1"
        " AND (label = $2 OR ref IN (SELECT unnest($3::VARCHAR[])))", [tenant, FORGOTTEN, refs]).fetchall()
    return TextsNow(facts["fact_id"], facts["reason"].to_list(), dict(labels))  # type: ignore[index]


def take_texts(index: PerspectiveIndex, now: TextsNow) -> None:
    """Read the texts of `now` in `index` from now on (holding the lock its readers take)."""
    if len(now.fact_ids):
        if index.fact_ids.recent:
            index.fact_ids.sort()  # (find_many finds the sorted ids only)
        rows = _index_of(index, now.fact_ids)
        index.reasons.replace({int(row): reason for row, reason in zip(rows, now.reasons, strict=True) if row >= 0})
    for ref, label in now.labels.items():
        entity = index.entity_ids.get(ref)
        if entity is not None:
            index.labels[entity] = label or ref  # (as `PerspectiveIndex.entity` names an entity without a label)
            index.replaced_labels.add(entity)


def load_all(path: Path) -> tuple[dict[str, PerspectiveIndex], int]:
    """Every tenant's index from a DuckDB file of the read model (the published snapshot), and the log
    position it stands at: the perspective service starts from these and follows the log from there."""
    con = duckdb.connect(str(path), read_only=True)
    try:
        tenants = [row[0] for row in con.execute("SELECT DISTINCT tenant FROM entities ORDER BY 1").fetchall()]
        indexes = {tenant: from_duckdb(con, tenant) for tenant in tenants}
        rows = con.execute("SELECT position FROM projection_position WHERE projection = ?",
                           [PROJECTION_NAME]).fetchall()
        return indexes, int(rows[0][0]) if rows else 0
    finally:
        con.close()
