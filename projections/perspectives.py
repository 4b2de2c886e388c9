"""Computing perspectives: `perspective_for` ranks, tiers and renders what an agent sees; `reproduce` computes a
served one again from the log as it stood. Nothing here writes: recording the recall a perspective causes and
keeping its evidence are the application's side effects (domain/application/use_cases/reading.py,
infra/adapters/evidence.py).

Indexes: one `PerspectiveIndex` per tenant, kept current by following the event log (every query first applies
the records it has not seen). An as-of perspective folds the log up to T into a fresh index and computes decay
at T.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from domain.activation import DEFAULT_PARAMETERS, ActivationParameters, Tier, estimate_tokens
from domain.errors import InvalidInput, UnknownEntity
from domain.perspective import (
    DEFAULT_BUDGET_TOKENS,
    FADED_SHOWN,
    CountGroup,
    FadedFact,
    Perspective,
    PerspectiveItem,
    fit_to_budget,
    new_served_id,
)
from projections.perspective_index import (
    TIER_CODES,
    TIERS_BY_CODE,
    PerspectiveIndex,
    Viewpoint,
    Walked,
    fold,
)
from projections.perspective_salience import salience_notes
from projections.perspective_walk import path as fact_path
from projections.source import RawLog, decode

if TYPE_CHECKING:
    from projections.perspective_load import TextsNow

READ_BATCH = 10_000


class Perspectives:
    """The perspective service of one process: indexes per tenant and the rules of serving."""

    def __init__(self, log: RawLog, clock: Callable[[], datetime],
                 parameters: ActivationParameters = DEFAULT_PARAMETERS) -> None:
        self._log = log
        self._clock = clock
        self.parameters = parameters
        self._indexes: dict[str, PerspectiveIndex] = {}
        self._position = 0
        self._lock = threading.RLock()
        self._read_model: Path | None = None
        """Following the log and walking an index never overlap (the arrays grow while records are applied)."""
        self.followers: list[Any] = []
        """Indexes that follow this one (search): `applied(index, position, topic, data)` after each record is
        applied to a tenant's index, `refolded(tenant)` after a tenant is folded again (a forget)."""

    @property
    def position(self) -> int:
        """The log position this service has followed to."""
        return self._position

    @property
    def lock(self) -> threading.RLock:
        """Held while following the log or walking: a follower's query holds it too."""
        return self._lock

    @property
    def tenants(self) -> list[str]:
        """The tenants whose index this holds (loaded from a read model, or folded so far), in order."""
        with self._lock:
            return sorted(self._indexes)

    # ------------------------------------------------------------------------------------------ indexes

    def start_from(self, indexes: dict[str, PerspectiveIndex], position: int) -> None:
        """Adopt indexes loaded in bulk (from DuckDB) that stand at log `position`; follow the log from there."""
        self._indexes = dict(indexes)
        self._position = position

    def start_from_read_model(self, path: Path) -> bool:
        """Load every tenant's index from the DuckDB read model at `path` (the published snapshot) if it exists,
        instead of folding the whole log; the log is followed from the snapshot's position. True if loaded."""
        if not path.exists():
            return False
        from projections.perspective_load import load_all

        self.start_from(*load_all(path))
        self._read_model = path
        return True

    def index(self, tenant: str) -> PerspectiveIndex:
        """The tenant's index, caught up with the log."""
        self.catch_up()
        index = self._indexes.get(tenant)
        if index is None:
            index = self._indexes[tenant] = PerspectiveIndex(tenant)
        return index

    def catch_up(self, until_position: int | None = None) -> int:
        """Apply every logged record not yet seen (up to `until_position`, None: the end of the log) to its tenant's
        index; return the log position reached."""
        with self._lock:
            return self._catch_up(until_position)

    def _catch_up(self, until_position: int | None = None) -> int:
        forgotten: set[str] = set()
        reached = False
        while not reached:
            batch = self._log.read_raw(self._position, READ_BATCH)
            if not batch:
                break
            for position, topic, state in batch:
                if until_position is not None and position > until_position:
                    reached = True
                    break
                record = decode(position, topic, state)
                tenant = record.data.get("tenant")
                if record.topic == "subject.forgotten" and tenant is not None:
                    forgotten.add(tenant)
                if tenant is not None:
                    index = self._indexes.get(tenant)
                    if index is None:
                        index = self._indexes[tenant] = PerspectiveIndex(tenant)
                    if position > index.position:
                        index.apply(position, record.topic, record.data)
                        for follower in self.followers:
                            follower.applied(index, position, record.topic, record.data)
                self._position = position
        for tenant in forgotten:
            self.refold(tenant)
        return self._position

    def refold(self, tenant: str) -> None:
        """After a forget in `tenant` (holding the lock): the index holds labels and reasons read before it, so
        fold the tenant again from the log, which now reads `[forgotten]` for that content."""
        self._indexes[tenant] = fold(tenant, self._records(self._position))
        for follower in self.followers:
            follower.refolded(tenant)

    def take_texts(self, tenant: str, now: TextsNow) -> None:
        """After a forget in `tenant`: its index reads the labels and reasons of `now` (read from the live read model,
        redacted or rebuilt) from now on; what the followers derived from its content is dropped."""
        from projections.perspective_load import take_texts

        with self._lock:
            index = self._indexes.get(tenant)
            if index is not None:
                take_texts(index, now)
            for follower in self.followers:
                follower.refolded(tenant)

    def records(self, until_position: int | None = None) -> list[tuple[int, str, dict[str, Any]]]:
        """Every logged record (position, topic, payload) up to `until_position`, decoded."""
        return self._records(until_position)

    def records_of(self, tenant: str, until_position: int) -> Iterator[tuple[int, str, dict[str, Any]]]:
        """The logged records (position, topic, payload) of `tenant` up to `until_position`, decoded a batch at a
        time (a pass over the log that holds no lock and keeps no other tenant's record)."""
        position = 0
        while position < until_position:
            batch = self._log.read_raw(position, READ_BATCH)
            if not batch:
                return
            for pos, topic, state in batch:
                if pos > until_position:
                    return
                record = decode(pos, topic, state)
                if record.data.get("tenant") == tenant:
                    yield pos, record.topic, record.data
                position = pos

    def _records(self, until_position: int | None = None) -> list[tuple[int, str, dict[str, Any]]]:
        records: list[tuple[int, str, dict[str, Any]]] = []
        position = 0
        while True:
            batch = self._log.read_raw(position, READ_BATCH)
            if not batch:
                return records
            for pos, topic, state in batch:
                if until_position is not None and pos > until_position:
                    return records
                record = decode(pos, topic, state)
                records.append((pos, record.topic, record.data))
                position = pos

    def as_of_index(self, tenant: str, as_of: datetime, until_position: int | None = None) -> PerspectiveIndex:
        """What was believed at `as_of`: from the read model's point-in-time tables when the service started
        from one that had reached `as_of`, else the log folded up to that transaction time."""
        if self._read_model is not None and until_position is None and self._read_model.exists():
            import duckdb

            from projections.perspective_load import from_duckdb

            con = duckdb.connect(str(self._read_model), read_only=True)
            try:
                rows = con.execute("SELECT max(recorded_at) FROM clock").fetchall()
                if rows and rows[0][0] is not None and rows[0][0] >= as_of:
                    return from_duckdb(con, tenant, as_of=as_of)
            finally:
                con.close()
        return fold(tenant, self._records(until_position), until=as_of.timestamp())

    # ------------------------------------------------------------------------------------------ serving

    def perspective_for(
        self,
        tenant: str,
        agent: str,
        serving: str | None = None,
        focus: Sequence[str] = (),
        as_of: datetime | None = None,
        depth: int | None = None,
        budget_tokens: int = DEFAULT_BUDGET_TOKENS,
        deeper: bool = False,
    ) -> Perspective:
        """What `agent` sees, serving `serving`, with `focus` in mind: ranked, tiered, rendered within budget.
        Computed only: the application records the recall it causes and keeps its evidence."""
        if as_of is not None and as_of.tzinfo is None:
            raise InvalidInput("as_of needs a time zone", field="as_of")
        parameters = self.parameters if depth is None else self.parameters.model_copy(update={"depth": depth})
        if deeper:
            parameters = parameters.deeper()
        with self._lock:
            if as_of is None:
                index = self.index(tenant)
                moment = self._clock()
            else:
                index = self.as_of_index(tenant, as_of)
                moment = as_of
            for field_name, ref in (("agent", agent), ("serving", serving)):
                if ref is not None and ref not in index.entity_ids:
                    raise UnknownEntity(ref, tenant, field=field_name)
            viewpoint = Viewpoint(agent=agent, serving=serving, focus=tuple(dict.fromkeys(focus)))
            walked = index.walk(viewpoint, parameters, moment.timestamp())
            perspective = build_perspective(index, walked, viewpoint, tenant=tenant, as_of=as_of, deeper=deeper,
                                            served_at=moment, budget_tokens=budget_tokens)
        return perspective

    # ------------------------------------------------------------------------------------------ reproducing

    def reproduce(self, served: Perspective) -> Perspective:
        """Compute a served perspective (its request, moment, parameters and log position suffice) again from the
        log as it stood then, with the same parameters and moment; nothing is recorded. Equal items mean the
        answer is explained by its inputs."""
        moment = served.as_of or served.served_at
        index = fold(served.tenant, self._records(served.log_position), until=moment.timestamp())
        viewpoint = Viewpoint(agent=served.agent, serving=served.serving, focus=tuple(served.focus))
        walked = index.walk(viewpoint, served.parameters, moment.timestamp())
        again = build_perspective(index, walked, viewpoint, tenant=served.tenant, as_of=served.as_of,
                                  deeper=served.deeper, served_at=served.served_at,
                                  budget_tokens=served.budget_tokens)
        again.perspective_id = served.perspective_id
        return again


def build_perspective(index: PerspectiveIndex, walked: Walked, viewpoint: Viewpoint, *, tenant: str,
                      as_of: datetime | None, deeper: bool, served_at: datetime, budget_tokens: int,
                      perspective_id: str | None = None) -> Perspective:
    """Turn a walk into a Perspective: items for the shown tiers, groups for the counted, the context block."""
    shown = np.nonzero(walked.tiers <= TIER_CODES[Tier.MARKER])[0]
    agent = index.lookup(viewpoint.agent)
    serving = index.lookup(viewpoint.serving) if viewpoint.serving else None
    faded_at = np.nonzero(walked.tiers == TIER_CODES[Tier.FORGOTTEN])[0][:FADED_SHOWN]  # ranked: strongest first
    noted = np.concatenate([shown, faded_at])
    tiers = walked.tiers[noted]
    notes = salience_notes(index, walked.facts[noted].astype(np.int64), agent=-1 if agent is None else agent,
                           serving=-1 if serving is None else serving, now=walked.now, p=walked.parameters,
                           ranks=np.where(tiers <= TIER_CODES[Tier.GIST], 0, noted),
                           activations=walked.activation[noted], forgotten=tiers == TIER_CODES[Tier.FORGOTTEN])
    why = dict(zip(noted.tolist(), notes, strict=True))

    items: list[PerspectiveItem] = []
    for k in shown:
        fact = int(walked.facts[k])
        via = int(walked.via[k])
        subject, obj = int(index.src.data[fact]), int(index.dst.data[fact])
        path, path_facts = fact_path(index, walked, fact, via)
        reason = index.reasons.get(fact)
        items.append(PerspectiveItem(
            tier=TIERS_BY_CODE[int(walked.tiers[k])],
            fact_id=index.fact_ids.at(fact), subject=index.refs[subject],
            relation=index.rel_names[index.rel.data[fact]], object=index.refs[obj],
            subject_label=index.labels[subject], object_label=index.labels[obj],
            scope=index.scopes.names[index.scope.data[fact]], reason=reason or None,
            confidence=round(float(index.conf.data[fact]), 6), provenance=index.provenance.get(fact),
            activation=round(float(walked.activation[k]), 6), base_level=round(float(walked.base[k]), 6),
            spread=float(walked.spread[k]), hops=int(walked.hops[k]), about=index.refs[via],
            about_label=index.labels[via], path=path, path_fact_ids=path_facts, salience=why[int(k)],
        ))
    counted = np.nonzero(walked.tiers == TIER_CODES[Tier.COUNT])[0]
    groups: dict[str, CountGroup] = {}
    if len(counted):
        vias = walked.via[counted]
        for node in np.unique(vias):
            members = walked.facts[counted[vias == node]]
            ref = index.refs[int(node)]
            groups[ref] = CountGroup(about=ref, label=index.labels[int(node)], count=len(members),
                                     fact_ids=[index.fact_ids.at(int(f)) for f in members])
    forgotten = walked.count(Tier.FORGOTTEN)
    faded = []
    for k in faded_at:
        fact = int(walked.facts[k])
        faded.append(FadedFact(
            fact_id=index.fact_ids.at(fact), subject_label=index.labels[int(index.src.data[fact])],
            relation=index.rel_names[index.rel.data[fact]], object_label=index.labels[int(index.dst.data[fact])],
            scope=index.scopes.names[index.scope.data[fact]], activation=round(float(walked.activation[k]), 6),
            base_level=round(float(walked.base[k]), 6), hops=int(walked.hops[k]), salience=why[int(k)]))
    header = [_header(index, viewpoint, as_of)]
    if viewpoint.focus:
        header.append("Focus: " + ", ".join(_label(index, ref) for ref in viewpoint.focus))
    items, groups, lines = fit_to_budget(header, items, groups, forgotten, budget_tokens)
    counts = {tier.value: sum(1 for i in items if i.tier is tier) for tier in (Tier.FULL, Tier.GIST, Tier.MARKER)}
    counts[Tier.COUNT.value] = sum(g.count for g in groups.values())
    counts[Tier.FORGOTTEN.value] = forgotten
    context = "\n".join(line.text for line in lines)
    return Perspective(
        perspective_id=perspective_id or new_served_id(served_at), tenant=tenant, agent=viewpoint.agent,
        serving=viewpoint.serving, focus=list(viewpoint.focus), as_of=as_of, deeper=deeper,
        served_at=served_at.astimezone(UTC), log_position=index.position, parameters=walked.parameters,
        budget_tokens=budget_tokens, items=items, count_groups=sorted(groups.values(), key=lambda g: g.about),
        forgotten=forgotten, counts=counts, context=context, context_tokens=estimate_tokens(context), lines=lines,
        unknown_refs=walked.unknown_refs, faded=faded,
    )


def _label(index: PerspectiveIndex, ref: str) -> str:
    eid = index.entity_ids.get(ref)
    return index.labels[eid] if eid is not None else ref


def _header(index: PerspectiveIndex, viewpoint: Viewpoint, as_of: datetime | None) -> str:
    text = f"# What {_label(index, viewpoint.agent)} sees"
    if viewpoint.serving:
        text += f", serving {_label(index, viewpoint.serving)}"
    if as_of is not None:
        text += f" (as believed at {as_of.isoformat()})"
    return text


def perspective_json(perspective: Perspective) -> dict[str, Any]:
    """The CLI's JSON: id, items (tier, fact, activation, hops, path), counts per tier, groups and context."""
    return {
        "perspective_id": perspective.perspective_id,
        "tenant": perspective.tenant,
        "agent": perspective.agent,
        "serving": perspective.serving,
        "focus": perspective.focus,
        "as_of": perspective.as_of.isoformat() if perspective.as_of else None,
        "deeper": perspective.deeper,
        "items": [
            {"tier": i.tier.value, "fact_id": i.fact_id, "subject": i.subject, "relation": i.relation,
             "object": i.object, "activation": i.activation, "hops": i.hops, "path": i.path, "reason": i.reason,
             "scope": i.scope}
            for i in perspective.items
        ],
        "count_groups": [{"about": g.about, "count": g.count, "fact_ids": g.fact_ids}
                         for g in perspective.count_groups],
        "counts": perspective.counts,
        "context": perspective.context,
        "context_tokens": perspective.context_tokens,
    }


def dumps(data: Any) -> str:
    return json.dumps(data, ensure_ascii=False, indent=2)
