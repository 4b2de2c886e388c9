"""Serving perspectives: `perspective_for` ranks, tiers and renders what an agent sees, records the recall, and
keeps the evidence so that `noumena explain PERSPECTIVE_ID` can show (and reproduce) any answer.

Indexes: one `PerspectiveIndex` per tenant, kept current by following the event log (every query first applies
the records it has not seen). An as-of perspective folds the log up to T into a fresh index and computes decay
at T; it records no recall (looking at the past does not use a fact now).

Evidence: a JSON file per served perspective, `<home>/perspectives/<perspective_id>.json` (written atomically),
holding the request, the parameters, the log position the index stood at, every item with its activation and
path, the counts, the context block with each line's fact ids, and the recall recorded (its log position). The
recall event itself carries the perspective id, so the log links to the evidence.
"""

from __future__ import annotations

import json
import os
import threading
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from domain.activation import DEFAULT_PARAMETERS, ActivationParameters, Tier, estimate_tokens
from domain.commands import RecordRecall
from domain.errors import InvalidInput, NoumenaError, UnknownEntity
from domain.perspective import (
    DEFAULT_BUDGET_TOKENS,
    CountGroup,
    Perspective,
    PerspectiveItem,
    RecallRecord,
    fit_to_budget,
)
from domain.ports import CommandRunner
from domain.recalls import RecallMode
from projections.perspective_index import (
    TIER_CODES,
    TIERS_BY_CODE,
    PerspectiveIndex,
    Viewpoint,
    Walked,
    fold,
)
from projections.source import RawLog, decode

READ_BATCH = 10_000


class UnknownPerspective(NoumenaError):
    def __init__(self, perspective_id: str) -> None:
        super().__init__(f"no perspective {perspective_id!r} was served from this home")


class Perspectives:
    """The perspective service of one process: indexes per tenant, the rules of serving, the evidence."""

    def __init__(self, log: RawLog, service: CommandRunner, home: Path,
                 clock: Callable[[], datetime], parameters: ActivationParameters = DEFAULT_PARAMETERS) -> None:
        self._log = log
        self._service = service
        self._clock = clock
        self.parameters = parameters
        self.evidence_dir = Path(home) / "perspectives"
        self._indexes: dict[str, PerspectiveIndex] = {}
        self._position = 0
        self._lock = threading.RLock()
        self._read_model: Path | None = None
        """Following the log and walking an index never overlap (the arrays grow while records are applied)."""
        self.followers: list[Any] = []
        """Indexes that follow this one (search): `applied(index, position, topic, data)` after each record is
        applied to a tenant's index, `refolded(tenant)` after a tenant is folded again (a forget)."""

    @property
    def lock(self) -> threading.RLock:
        """Held while following the log or walking: a follower's query holds it too."""
        return self._lock

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

    def replace_index(self, tenant: str, index: PerspectiveIndex) -> None:
        """Adopt `index` for `tenant` (loaded from a read model rebuilt after a forget), then apply to it the
        tenant's records this service has followed beyond it."""
        with self._lock:
            position = index.position
            while position < self._position:
                batch = self._log.read_raw(position, READ_BATCH)
                if not batch:
                    break
                for at, topic, state in batch:
                    if at > self._position:
                        break
                    record = decode(at, topic, state)
                    if record.data.get("tenant") == tenant and at > index.position:
                        index.apply(at, record.topic, record.data)
                    position = at
                else:
                    continue
                break
            self._indexes[tenant] = index
            for follower in self.followers:
                follower.refolded(tenant)

    def records(self, until_position: int | None = None) -> list[tuple[int, str, dict[str, Any]]]:
        """Every logged record (position, topic, payload) up to `until_position`, decoded."""
        return self._records(until_position)

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
        record: bool = True,
    ) -> Perspective:
        """What `agent` sees, serving `serving`, with `focus` in mind: ranked, tiered, rendered within budget.

        A current perspective records one recall of its full and gist facts (mode `pushed`, or `deepened` for a
        deeper look) and stores its evidence; `record=False` does neither (benchmarks, previews).
        """
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
        if record:
            if as_of is None:
                perspective.recall = self._record_recall(perspective, deeper)
            self.keep_evidence(perspective)
        return perspective

    def _record_recall(self, perspective: Perspective, deeper: bool) -> RecallRecord | None:
        fact_ids = perspective.fact_ids(Tier.FULL, Tier.GIST)
        if not fact_ids:
            return None
        mode = RecallMode.DEEPENED if deeper else RecallMode.PUSHED
        result = self._service.execute_batch(
            [RecordRecall(tenant=perspective.tenant, agent=perspective.agent, fact_ids=tuple(fact_ids), mode=mode,
                          perspective_id=perspective.perspective_id)],
            all_or_nothing=True,
        )
        error = result.outcomes[0].error
        if error is not None:
            raise error
        return RecallRecord(mode=mode.value, fact_ids=fact_ids, position=result.last_position)

    def used(self, tenant: str, agent: str, fact_ids: Sequence[str], perspective_id: str | None = None) -> int | None:
        """The agent says it used these facts: record a recall of mode `used`; return its log position."""
        result = self._service.execute_batch(
            [RecordRecall(tenant=tenant, agent=agent, fact_ids=tuple(fact_ids), mode=RecallMode.USED,
                          perspective_id=perspective_id)],
            all_or_nothing=True,
        )
        error = result.outcomes[0].error
        if error is not None:
            raise error
        return result.last_position

    # ------------------------------------------------------------------------------------------ evidence

    def _path(self, perspective_id: str) -> Path:
        if not perspective_id or "/" in perspective_id or perspective_id.startswith("."):
            raise UnknownPerspective(perspective_id)
        return self.evidence_dir / f"{perspective_id}.json"

    def keep_evidence(self, perspective: Perspective) -> None:
        """Store the evidence of a served perspective (atomically), for `explain`."""
        self.evidence_dir.mkdir(parents=True, exist_ok=True)
        path = self._path(perspective.perspective_id)
        temporary = path.with_suffix(".tmp")
        temporary.write_text(perspective.model_dump_json(indent=1), encoding="utf-8")
        os.replace(temporary, path)

    def explain(self, perspective_id: str) -> Perspective:
        """The evidence of a served perspective: inputs, parameters, outputs."""
        path = self._path(perspective_id)
        if not path.exists():
            raise UnknownPerspective(perspective_id)
        return Perspective.model_validate_json(path.read_text(encoding="utf-8"))

    def reproduce(self, perspective_id: str) -> Perspective:
        """Compute the perspective again from the log as it stood when it was served, with the same parameters
        and the same moment; nothing is recorded. Equal items mean the answer is explained by its inputs."""
        served = self.explain(perspective_id)
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
    items: list[PerspectiveItem] = []
    for k in shown:
        fact = int(walked.facts[k])
        via = int(walked.via[k])
        subject, obj = int(index.src.data[fact]), int(index.dst.data[fact])
        path, path_facts = index.path(walked, fact, via)
        reason = index.reasons.get(fact)
        items.append(PerspectiveItem(
            tier=TIERS_BY_CODE[int(walked.tiers[k])],
            fact_id=index.fact_id(fact), subject=index.refs[subject], relation=index.rel_names[index.rel.data[fact]],
            object=index.refs[obj], subject_label=index.labels[subject], object_label=index.labels[obj],
            scope=index.scopes.names[index.scope.data[fact]], reason=reason or None,
            confidence=round(float(index.conf.data[fact]), 6), provenance=index.provenance.get(fact),
            activation=round(float(walked.activation[k]), 6), base_level=round(float(walked.base[k]), 6),
            spread=float(walked.spread[k]), hops=int(walked.hops[k]), about=index.refs[via],
            about_label=index.labels[via], path=path, path_fact_ids=path_facts,
        ))
    counted = np.nonzero(walked.tiers == TIER_CODES[Tier.COUNT])[0]
    groups: dict[str, CountGroup] = {}
    if len(counted):
        vias = walked.via[counted]
        for node in np.unique(vias):
            members = walked.facts[counted[vias == node]]
            ref = index.refs[int(node)]
            groups[ref] = CountGroup(about=ref, label=index.labels[int(node)], count=len(members),
                                     fact_ids=[index.fact_id(int(f)) for f in members])
    forgotten = walked.count(Tier.FORGOTTEN)
    header = [_header(index, viewpoint, as_of)]
    if viewpoint.focus:
        header.append("Focus: " + ", ".join(_label(index, ref) for ref in viewpoint.focus))
    items, groups, lines = fit_to_budget(header, items, groups, forgotten, budget_tokens)
    counts = {tier.value: sum(1 for i in items if i.tier is tier) for tier in (Tier.FULL, Tier.GIST, Tier.MARKER)}
    counts[Tier.COUNT.value] = sum(g.count for g in groups.values())
    counts[Tier.FORGOTTEN.value] = forgotten
    context = "\n".join(line.text for line in lines)
    return Perspective(
        perspective_id=perspective_id or uuid.uuid4().hex, tenant=tenant, agent=viewpoint.agent,
        serving=viewpoint.serving, focus=list(viewpoint.focus), as_of=as_of, deeper=deeper,
        served_at=served_at.astimezone(UTC), log_position=index.position, parameters=walked.parameters,
        budget_tokens=budget_tokens, items=items, count_groups=sorted(groups.values(), key=lambda g: g.about),
        forgotten=forgotten, counts=counts, context=context, context_tokens=estimate_tokens(context), lines=lines,
        unknown_refs=walked.unknown_refs,
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


FORGOTTEN_TEXT = "[forgotten]"


def erase_evidence(home: Path, tenant: str) -> int:
    """After a forget in `tenant`: blank the content (labels, reasons, provenance, the context) of every
    evidence file of that tenant, keeping its structure (refs, fact ids, tiers, activations, parameters).

    Evidence files are copies outside the log, so crypto-shredding cannot reach them; which of them hold the
    forgotten content (a memory's label is owned by every person a fact links it to) is not cheap to decide, so
    all of the tenant's evidence is redacted. Returns how many files were rewritten."""
    directory = Path(home) / "perspectives"
    if not directory.exists():
        return 0
    rewritten = 0
    for path in sorted(directory.glob("*.json")):
        try:
            served = Perspective.model_validate_json(path.read_text(encoding="utf-8"))
        except ValueError:
            continue
        if served.tenant != tenant:
            continue
        for item in served.items:
            item.subject_label = item.object_label = item.about_label = FORGOTTEN_TEXT
            item.reason = FORGOTTEN_TEXT if item.reason else None
            item.provenance = FORGOTTEN_TEXT if item.provenance else ""
        for group in served.count_groups:
            group.label = FORGOTTEN_TEXT
        for line in served.lines:
            line.text = FORGOTTEN_TEXT
        served.context = FORGOTTEN_TEXT
        temporary = path.with_suffix(".tmp")
        temporary.write_text(served.model_dump_json(indent=1), encoding="utf-8")
        os.replace(temporary, path)
        rewritten += 1
    return rewritten
