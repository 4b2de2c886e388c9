"""Serving contexts: `context_for` compiles a main session's budgeted context block for one request.

It reads the session (turns, summaries, workers) and the hard constraints from the ontology service, takes the
perspective from the perspective engine with the focus found in the message and the recent turns, and lays the
layers out with domain/context.py. Per tenant it keeps, following the tenant's stream, the name index used to
find mentions and an index of constraint facts by entity; per session, the summary reduction tree.

Nothing here writes: the application records the recall a context causes (`shown_clearly`) and keeps its evidence
(infra/adapters/evidence.py: the request, the parameters, the tenant stream version the session was read at, the
perspective with its own log position, the focus, every block with its ids, what was cut). `reproduce` folds the
log back to those positions and assembles again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from domain.context import (
    DEFAULT_CONTEXT_PARAMETERS,
    ConstraintIndex,
    Context,
    ContextParameters,
    FocusRef,
    WorkerView,
    assemble,
    choose_focus,
    constraints_tokens,
    line_tokens,
    perspective_budget,
    recalled_lines,
    select_constraints,
)
from domain.context.tokens import forget_cached as forget_cached_lines
from domain.entities import EntitiesMerged, EntityRegistered, EntityUpdated
from domain.errors import InvalidInput, UnknownContext
from domain.facts import FactAsserted
from domain.mentions import MentionIndex
from domain.ontology import Ontology
from domain.perspective import Perspective, new_served_id
from domain.ports import CommandRunner, EventLog
from domain.search import SearchAnswer
from domain.sessions import SessionKind, SessionState, workers_for
from domain.summaries import Folder, SummaryTree, TrimmingFolder
from projections.perspective_index import Viewpoint
from projections.perspectives import Perspectives, build_perspective

CONTEXT_PREFIX = "ctx-"


def is_context_id(identifier: str) -> bool:
    return identifier.startswith(CONTEXT_PREFIX)


@dataclass
class _TenantIndexes:
    state: Ontology
    version: int
    mentions: MentionIndex
    constraints: ConstraintIndex


@dataclass
class _Inputs:
    """What one assembly reads, gathered from the live service or from a fold of the log."""

    state: Ontology
    mentions: MentionIndex
    constraints: ConstraintIndex
    trees: dict[str, SummaryTree] = field(default_factory=dict)


class Contexts:
    """The context service of one process, beside the perspective service whose engine it uses."""

    def __init__(self, perspectives: Perspectives, service: CommandRunner, log: EventLog,
                 clock: Callable[[], datetime], parameters: ContextParameters = DEFAULT_CONTEXT_PARAMETERS,
                 folder: Folder | None = None, searches: Any = None) -> None:
        self.perspectives = perspectives
        self.searches = searches
        """The search service (projections/searches.py) that recalls facts by the message's content; None: off."""
        self._service = service
        self._log = log
        self._clock = clock
        self.parameters = parameters
        self.folder = folder or TrimmingFolder()
        self._tenants: dict[str, _TenantIndexes] = {}
        self._trees: dict[tuple[str, str], tuple[Ontology, SummaryTree]] = {}
        perspectives.followers.append(self)

    # ------------------------------------------------------------------------------------------ following

    def applied(self, pindex: object, position: int, topic: str, data: dict[str, Any]) -> None:
        """The perspective service applied a record: nothing to do (the indexes here catch up on use)."""

    def refolded(self, tenant: str) -> None:
        """The perspective service folded `tenant` again (after a forget): drop the names, summary trees and the
        folded state held for it (they hold labels and summaries read before the forget), and the token counts
        cached by line (the lines of served contexts)."""
        self._tenants.pop(tenant, None)
        for key in [key for key in self._trees if key[0] == tenant]:
            del self._trees[key]
        forget_cached_lines()

    # ------------------------------------------------------------------------------------------ indexes

    def warm(self, tenant: str) -> None:
        """Build the tenant's name and constraint indexes now (a served replica does it before it says ready,
        so its first context does not pay for a pass over every entity and fact)."""
        with self._service.reading(tenant) as state:
            self._indexes(tenant, state)

    def _indexes(self, tenant: str, state: Ontology) -> _TenantIndexes:
        """Names and constraint facts of the tenant, caught up with `state` by reading its stream's new events."""
        cached = self._tenants.get(tenant)
        if cached is None or cached.state is not state or cached.version > state.version:
            cached = self._tenants[tenant] = _TenantIndexes(
                state, state.version, MentionIndex.from_ontology(state),
                ConstraintIndex.from_ontology(state, self.parameters.constraint_relations))
            return cached
        if cached.version == state.version:
            return cached
        version = cached.version
        for event in self._log.read_stream(tenant, after_version=version):
            if version >= state.version:
                break
            version += 1
            if isinstance(event, (EntityRegistered, EntityUpdated)):
                entity = state.entities.get(event.ref)
                if entity is not None and entity.merged_into is None:
                    cached.mentions.set_names(entity.ref, (entity.label, *entity.aliases))
            elif isinstance(event, EntitiesMerged):
                cached.mentions.remove(event.merged_ref)
            elif isinstance(event, FactAsserted):
                cached.constraints.add(event.fact_id, event.subject, event.relation, event.object)
        cached.version = version
        return cached

    def _tree(self, tenant: str, state: Ontology, session: SessionState) -> SummaryTree:
        """The session's summary tree, grown by the compactions since the last request. Built again when the
        service folded the tenant anew (after a forget, summaries may have lost their content)."""
        key = (tenant, session.session_id)
        cached = self._trees.get(key)
        summaries = session.summaries
        if cached is None or cached[0] is not state or cached[1].leaves > len(summaries):
            cached = self._trees[key] = (state, SummaryTree(session.session_id, self.folder))
        cached[1].extend(summaries)
        return cached[1]

    # ------------------------------------------------------------------------------------------ serving

    def context_for(self, tenant: str, session_id: str, message: str | None = None,
                    budget_tokens: int | None = None) -> Context:
        """The context block for main session `session_id`, for a request carrying `message`, within budget.
        Computed only: the application records a recall of the facts it shows clearly (`shown_clearly`) and
        keeps its evidence."""
        budget = self.parameters.budget_tokens if budget_tokens is None else budget_tokens
        if budget < 1:
            raise InvalidInput("the budget must be at least 1 token", field="budget_tokens")
        with self._service.reading(tenant) as state:
            session = state.require_session(session_id)
            agent, serving = session.agent, session.serving

        def perspective(agent: str, serving: str | None, focus: list[str], p_budget: int) -> Perspective:
            return self.perspectives.perspective_for(tenant, agent, serving, focus, budget_tokens=p_budget)

        search = None  # (before the state is read whole: a search may embed the message, which may be remote)
        if message and message.strip() and self.searches is not None and self.parameters.recalled_facts:
            search = self.searches.search_for(tenant, agent, message, serving=serving,
                                              session_id=session_id, k=self.parameters.recalled_facts)
        # The state is read whole under the service's lock (also keeping this object's caches to one request at
        # a time); the perspective it asks for is computed in memory from the perspective index meanwhile.
        with self._service.reading(tenant) as state:
            indexes = self._indexes(tenant, state)
            session = state.require_session(session_id)
            inputs = _Inputs(state, indexes.mentions, indexes.constraints,
                             {session_id: self._tree(tenant, state, session)})
            moment = self._clock()
            return compose(inputs, tenant=tenant, session_id=session_id, message=message, budget=budget,
                           moment=moment, parameters=self.parameters, perspective=perspective,
                           context_id=CONTEXT_PREFIX + new_served_id(moment), folder=self.folder, search=search)

    # ------------------------------------------------------------------------------------------ reproducing

    def reproduce(self, served: Context) -> Context:
        """Assemble a served context again from the log as it stood when it was served (the session state at its
        stream version, the perspective at its log position), with the same parameters and moment; nothing is
        recorded."""
        context_id = served.context_id
        state = Ontology(tenant=served.tenant)
        for event in self._log.read_stream(served.tenant):
            if state.version >= served.ontology_version:
                break
            state.apply(event)
        inputs = _Inputs(state, MentionIndex.from_ontology(state),
                         ConstraintIndex.from_ontology(state, served.parameters.constraint_relations))

        def perspective(agent: str, serving: str | None, focus: list[str], p_budget: int) -> Perspective:
            before = served.perspective
            if before is None:
                raise UnknownContext(context_id)
            index = self.perspectives.as_of_index(served.tenant, before.served_at, until_position=before.log_position)
            viewpoint = Viewpoint(agent=agent, serving=serving, focus=tuple(dict.fromkeys(focus)))
            walked = index.walk(viewpoint, before.parameters, before.served_at.timestamp())
            return build_perspective(index, walked, viewpoint, tenant=served.tenant, as_of=None, deeper=False,
                                     served_at=before.served_at, budget_tokens=p_budget,
                                     perspective_id=before.perspective_id)

        again = compose(inputs, tenant=served.tenant, session_id=served.session_id, message=served.message,
                        budget=served.budget_tokens, moment=served.served_at, parameters=served.parameters,
                        perspective=perspective, context_id=served.context_id, folder=self.folder,
                        search=served.search)
        again.recall = served.recall
        return again


PerspectiveSource = Callable[[str, str | None, list[str], int], Perspective]


def compose(inputs: _Inputs, *, tenant: str, session_id: str, message: str | None, budget: int, moment: datetime,
            parameters: ContextParameters, perspective: PerspectiveSource, context_id: str,
            folder: Folder, search: SearchAnswer | None = None) -> Context:
    """Find the focus, select the hard constraints, fetch the perspective and assemble the block."""
    state = inputs.state
    session = state.require_session(session_id)
    if session.kind is not SessionKind.MAIN:
        raise InvalidInput(f"session {session_id!r} is a {session.kind.value} session; a context is assembled for"
                           " a main session (a worker keeps its own details)", field="session_id")

    def label(ref: str) -> str:
        entity = state.entities.get(ref)
        return entity.label if entity is not None else ref

    recent = session.turns[-parameters.recent_turns:] if parameters.recent_turns else []
    ambiguous: list[str] = []

    def found(text: str | None, where: str) -> list[tuple[str, str]]:
        refs = []
        for mention in inputs.mentions.find(text or ""):
            if mention.ambiguous:
                ambiguous.append(f"{mention.name}: {', '.join(mention.ambiguous)}")
            elif mention.ref in state.entities:
                refs.append((mention.ref, where))
        return refs

    workers = workers_for(state, session_id)
    focus = choose_focus(
        found(message, "message"),
        [(ref, f"worker {w.session_id}") for w in workers for ref in w.about if ref in state.entities],
        [ref for message_id, _role, content in reversed(recent) for ref in found(content, f"turn {message_id}")],
        exclude=(session.agent, session.serving or ""), parameters=parameters,
    )
    anchors = {session.agent, f"session:{session_id}", *(ref for ref, _ in focus)}
    if session.serving:
        anchors.add(session.serving)
    constraints = select_constraints(state, session, anchors, moment, inputs.constraints)
    header = f"# Context for {label(session.agent)}" + (f", serving {label(session.serving)}" if session.serving
                                                         else "") + f" · session {session_id}"
    constraint_tokens = constraints_tokens(constraints, label)
    recalled_tokens = sum(line_tokens(line.text) for item in (search.items if search is not None else ())
                          for line in recalled_lines(item))
    seen = perspective(session.agent, session.serving, [ref for ref, _ in focus],
                       max(1, perspective_budget(parameters, budget, constraint_tokens) - recalled_tokens))
    title = f"## Relations in view (focus: {', '.join(label(ref) for ref, _ in focus)})" if focus \
        else "## Relations in view"
    tree = inputs.trees.get(session_id) or SummaryTree.build(session_id, session.summaries, folder)
    assembly = assemble(
        header=header, constraints=constraints, perspective=seen, perspective_title=title,
        workers=[WorkerView(w.session_id, (w.status.value if w.status else "dispatched"), w.task, w.last_summary,
                            w.about) for w in workers],
        summary=tree.frontier(), turns=recent, label=label, session_id=session_id, parameters=parameters,
        budget_tokens=budget, recalled=search.items if search is not None else (),
    )
    return Context(
        context_id=context_id, tenant=tenant, session_id=session_id, agent=session.agent, serving=session.serving,
        message=message, served_at=moment.astimezone(UTC), budget_tokens=budget, parameters=parameters,
        ontology_version=state.version,
        focus=[FocusRef(ref=ref, label=label(ref), found_in=where) for ref, where in focus],
        ambiguous=list(dict.fromkeys(ambiguous)), perspective=seen,
        constraint_fact_ids=[f.fact_id for f in constraints], deduplicated=assembly.deduplicated,
        blocks=assembly.blocks, omitted=assembly.omitted, text=assembly.text, tokens=assembly.tokens,
        search=search, recalled_fact_ids=assembly.recalled,
    )


def context_json(context: Context) -> dict[str, Any]:
    """The CLI's JSON: the block, its blocks with their ids, the focus, what was cut, and the ids to explain."""
    return {
        "context_id": context.context_id,
        "tenant": context.tenant,
        "session_id": context.session_id,
        "agent": context.agent,
        "serving": context.serving,
        "message": context.message,
        "budget_tokens": context.budget_tokens,
        "tokens": context.tokens,
        "focus": [f.model_dump() for f in context.focus],
        "ambiguous": context.ambiguous,
        "perspective_id": context.perspective.perspective_id if context.perspective else None,
        "blocks": [{"role": b.role.value, "budget_tokens": b.budget_tokens, "tokens": b.tokens,
                    "fact_ids": b.fact_ids, "message_ids": b.message_ids, "summary_ids": b.summary_ids,
                    "session_ids": b.session_ids, "text": "\n".join(line.text for line in b.lines)}
                   for b in context.blocks],
        "omitted": [o.model_dump() for o in context.omitted],
        "deduplicated": context.deduplicated,
        "text": context.text,
    }
