"""Ports: what the domain and the application layer (domain/application/) need from the outside world.

Each is a Protocol; the adapters live in infra/ (the event log, the key store, the read model, the perspective and
context engines over projections/) and infra/bootstrap.py plugs them in. Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple, Protocol

from domain.commands import Command
from domain.context import Context
from domain.errors import DomainError
from domain.events import DomainEvent
from domain.forgetting import ContentKey, ForgetPlan
from domain.ontology import Ontology
from domain.perspective import Perspective
from domain.search import SearchAnswer


class Pending(NamedTuple):
    """One event to append as version `version` of `tenant`'s stream, its content sealed with `key`. (A named
    tuple: one is made per event written, and it is the cheapest immutable record to make.)"""

    tenant: str
    version: int
    event: DomainEvent
    key: ContentKey | None = None


@dataclass(frozen=True, slots=True)
class Logged:
    """One event as recorded: its log position is its place in transaction time."""

    position: int
    event: DomainEvent


@dataclass(frozen=True, slots=True)
class TrackingPosition:
    """Where an upstream source (a Kafka partition, a file) had got to when these events were produced."""

    name: str
    position: int


class VersionConflict(Exception):
    """Another writer appended to one of the streams first."""


class KeysForgotten(VersionConflict):
    """Keys this batch was sealed with may have been deleted by a forget in another process since they were
    handed out: decide and seal the batch again."""


class SnapshotDamaged(Exception):
    """A record of a state loaded on demand from a snapshot could not be read (the file was damaged after it was
    opened): the state must be folded afresh from the log."""


class AlreadyTracked(Exception):
    """The tracking position was recorded before: this input has already been stored."""


class EventLog(Protocol):
    """The append-only log of every tenant's events, in one total order (the log position)."""

    def read_stream(self, tenant: str, after_version: int = 0) -> Iterable[DomainEvent]: ...

    def append(self, pending: Sequence[Pending], tracking: TrackingPosition | None = None) -> list[int]:
        """Append atomically; raise VersionConflict or AlreadyTracked and write nothing on either."""
        ...

    def read(self, after_position: int, limit: int) -> Sequence[Logged]: ...

    def max_position(self) -> int: ...

    def tracked_position(self, name: str) -> int | None: ...


class StateSnapshots(Protocol):
    """Snapshots of a tenant's folded state (the `Ontology` its rules decide on), so that a process starts from
    the latest one plus the log's tail instead of folding the whole log (infra/adapters/state_snapshots.py)."""

    every: int
    """How many events a snapshot may lag the state it was taken from before a new one is taken (0: never)."""

    def load(self, tenant: str) -> Ontology | None:
        """The tenant's latest usable snapshot, or None (none, made by other code, corrupt, not of this log, or
        its key deleted by a forget): then the caller folds the whole log."""
        ...

    def save(self, tenant: str, state: Ontology) -> None:
        """Take a snapshot of `state` now, in this process (the caller holds it still meanwhile; a process that
        stops does, when no write waits); it may be stored later. It is never stored once a forget of the tenant
        is in the log after it."""
        ...

    def request(self, tenant: str) -> None:
        """Have the tenant's snapshot brought up to the end of the log off this process's writes (by a process
        of its own that folds the log from the last snapshot); returns at once. Best effort: a snapshot is only
        a faster start, and one that is never taken leaves the older one in use."""
        ...

    def wrote(self) -> None:
        """A write was appended: snapshots asked for wait for a pause in the writes (up to a bound), so the work
        of taking them does not run beside busy writers."""
        ...

    def stored_version(self, tenant: str) -> int:
        """The version of the tenant's snapshot in this process's home (0: none, or unreadable)."""
        ...

    def settle(self, versions: dict[str, int], timeout: float) -> set[str]:
        """Have the snapshots of these tenants brought to these versions (at least) by the process that takes
        them off this one's writes, if one runs, waiting at most `timeout` seconds; returns the tenants whose
        snapshot is still behind (a process that stops then snapshots those in place)."""
        ...

    def discard(self, tenant: str) -> None:
        """Delete the tenant's snapshot in this process's home (after a forget)."""
        ...

    def fold_elsewhere(self, tenant: str, version: int, timeout: float,
                       stopping: Callable[[], bool] = ...) -> Ontology | None:
        """Have the process that takes snapshots off this one's writes fold the tenant from the log to `version` at
        least and store it, then load that snapshot (its maps read on demand); None when no such process can be
        asked, it stored nothing, or `timeout` seconds (or `stopping()`) came first. For a large tenant whose state
        a forget dropped: folded in this process, its whole log would share the interpreter with every request."""
        ...

    def damaged(self, state: Ontology) -> bool:
        """Whether `state`, loaded from a snapshot, found one of its records unreadable since (a read raised
        `SnapshotDamaged`): then the caller folds the whole log instead."""
        ...

    def close(self) -> None:
        """Stop taking snapshots from the log (a snapshot being taken so is not stored) and wait for those `save`
        is still storing."""
        ...


class WriteRetries(Protocol):
    """How a write that lost the race to another writer (it raised `VersionConflict`) is tried again: how often and
    after what pauses (a policy of the composition root). When the policy gives up, the last conflict propagates."""

    def __call__(self, write: Callable[[], BatchResult]) -> BatchResult: ...


class TenantWriteLocks(Protocol):
    """Serializes the writers of one tenant across processes (a PostgreSQL advisory lock per tenant): a writer
    holding a tenant's lock decides on the log as it is and appends without a version conflict, and writers that
    wait are served in turn, so none starves behind another's tight loop (infra/adapters/writer_locks.py)."""

    def acquire(self, tenant: str, wait: bool = True) -> bool:
        """Take the tenant's lock for this thread (re-entrant). With `wait`, block until it is free (raise
        ConcurrencyError after a bound: a retryable refusal); without, return False at once if it is held."""
        ...

    def release(self, tenant: str) -> None:
        """Let go of one `acquire` of this thread."""
        ...

    def close(self) -> None: ...


class KeyStore(Protocol):
    """Data keys kept outside the log. Deleting a key erases every copy of what it sealed."""

    def keys_for(self, keys: Iterable[ContentKey]) -> dict[str, bytes]:
        """Each key's bytes by key id, created on first use, new owners recorded; committed before returning."""
        ...

    def keys_pending(self, keys: Iterable[ContentKey]
                     ) -> tuple[dict[str, tuple[str, bytes]], Callable[[], Callable[[], None]]]:
        """By key id: the name a sealed field records and the key's bytes (for a key derived from its group's,
        the name is `<group key id>/<key id>`);
        and `ready`, to call before the sealed events are committed: it waits until the new keys are durable
        (raising if they could not be stored), then holds off every forget until the function it returns is
        called, after the events are committed or failed. It raises `KeysForgotten` when a forget may have
        deleted some of the keys meanwhile (another process): then the batch must be decided again."""
        ...

    def get(self, key_id: str) -> bytes | None:
        """The key's bytes by id or derived name, or None once forgotten."""
        ...

    def forget(self, tenant: str, owner: str, plan: Callable[[], ForgetPlan] | None = None,
               record: Callable[[int], object] | None = None) -> int:
        """Delete, for real, every key of the tenant that `owner` owns, the keys in the plan's `also` (by id),
        and the key of each group in its `splits` once the group's other members' keys (by key id, with their
        owners) are stored on their own; return how many keys were deleted. Where the store can, `plan()` is
        called with every sealed write held off, so it sees the log as it stays until the keys are gone (it
        may read keys: the store lets the calling thread). The plan's `owners` are deleted like `owner`.
        `record(deleted)` records the forget in the log while sealed writes are still held off (where the store
        can), so none lands between the deletion and the event."""
        ...

    def evict_cache(self) -> None:
        """Drop keys cached in this process."""
        ...


class Embedder(Protocol):
    """Turns texts into vectors for semantic search. Implemented in infra/adapters/embedders.py (numpy stays out of the
    domain, hence `Any`)."""

    name: str
    """Identifies the model and its dimensions, e.g. "wordllama:l2_supercat:256": recorded in evidence, and a
    changed name means stored vectors are no longer comparable."""

    dimensions: int

    def embed(self, texts: Sequence[str]) -> Any:
        """A numpy float32 array of shape (len(texts), dimensions), one L2-normalised row per text, in order; a
        blank text gives a zero row. Raises `EmbedderUnavailable` naming what went wrong."""
        ...


class PerspectiveEngine(Protocol):
    """Computes what a viewer sees (projections/perspectives.py behind infra/runtime/perspective_engine.py). It only
    computes: recording the recall a perspective causes and keeping its evidence are the application's side
    effects."""

    records_recalls: bool
    """False: an engine whose perspectives cause no recall and keep no evidence (benchmarks over an index not
    built from the log)."""

    def perspective(self, tenant: str, agent: str, serving: str | None, focus: Sequence[str],
                    as_of: datetime | None, budget_tokens: int | None, deeper: bool = False) -> Perspective:
        """Compute a perspective (no write, no evidence)."""
        ...

    def reproduce(self, served: Perspective) -> Perspective:
        """Compute a served perspective again (from its request, moment, parameters and log position) from the
        log as it stood then; nothing is recorded."""
        ...

    def forgotten(self, tenants: list[str] | None = None) -> None:
        """Content was forgotten in `tenants` (None: any): drop whatever holds it in memory."""
        ...


class ContextEngine(Protocol):
    """Assembles a main session's context block (projections/contexts.py behind infra/runtime/context_engine.py);
    computes only."""

    def context(self, tenant: str, session_id: str, message: str | None, budget_tokens: int | None) -> Context:
        """Assemble (no write, no evidence)."""
        ...

    def reproduce(self, served: Context) -> Context:
        """Assemble a served context again from the log as it stood then; nothing is recorded."""
        ...


class SearchEngine(Protocol):
    """Recall by content (projections/searches.py behind infra/runtime/search_engine.py): BM25 and embeddings fused with
    the viewer's activation, within what the viewer may see; computes only."""

    def search(self, tenant: str, agent: str, query: str, serving: str | None = None, session_id: str | None = None,
               k: int | None = None, as_of: datetime | None = None, about: Sequence[str] = ()) -> SearchAnswer: ...


class EvidenceStore(Protocol):
    """What `explain` shows about served reads, bounded in size and age (infra/adapters/evidence.py). Lookups are scoped
    to a tenant (None: an operator's look, any tenant) and raise `UnknownServed` for an id not kept."""

    def keep(self, served: Perspective | Context | SearchAnswer) -> None: ...

    def perspective(self, tenant: str | None, perspective_id: str) -> tuple[Perspective, bool]:
        """The perspective as served (True), or its request with no items yet (False: compute it again)."""
        ...

    def context(self, tenant: str | None, context_id: str) -> Context: ...

    def search(self, tenant: str | None, search_id: str) -> SearchAnswer: ...

    def erase(self, tenant: str) -> int:
        """After a forget: blank the content the tenant's kept answers hold; returns how many were rewritten."""
        ...


class ReadModel(Protocol):
    """The read model this process's projector keeps (DuckDB, infra/runtime/serving.py): where reads by query go.
    Writes nudge it; a read naming a log position waits (bounded) until it has applied that position."""

    position: int

    def nudge(self) -> None: ...

    def wait_for(self, position: int, timeout: float) -> bool: ...

    def expect_forget(self, tenant: str) -> None:
        """This process is about to forget in `tenant` and will tell what it erased (`forgotten`)."""
        ...

    def forgotten(self, tenant: str, position: int | None, sealed: list[int]) -> None:
        """The forget announced by `expect_forget` was recorded at `position` and made the events at log positions
        `sealed` unreadable: the read model blanks their texts without searching the log. None: it failed, or what
        it erased is not known (the read model then searches the log for it)."""
        ...

    def wait_cleaned(self, tenant: str, position: int, timeout: float) -> bool:
        """After a forget at `position`: wait until no read of the tenant can show what it erased (its texts are
        blanked in the live read model and indexes; the read model is rebuilt from the log behind them, see
        `purging`); False when `timeout` seconds pass first."""
        ...

    def purging(self) -> list[str]:
        """Tenants whose read model is still being rebuilt without forgotten content (served meanwhile)."""
        ...

    def lag(self) -> int: ...

    def entity(self, tenant: str, ref: str) -> dict[str, Any] | None: ...

    def search_entities(self, tenant: str, text: str, skip: int, limit: int) -> tuple[list[dict[str, Any]], int]: ...

    @property
    def generation(self) -> int:
        """How many times the read model was rebuilt (without forgotten content): what was read from it before a
        change of generation must be read again."""
        ...

    def entities_since(self, tenant: str, after_position: int) -> tuple[list[dict[str, Any]], int]:
        """The tenant's entities (ref, label, aliases, hub, merged_into) as they are now, of those changed after
        `after_position` (every one for -1), and the position they were read at."""
        ...

    def fact_history(self, tenant: str, fact_id: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]: ...

    def graph_as_of(self, tenant: str, recorded_at: datetime | None, valid_at: datetime | None, skip: int,
                    limit: int) -> tuple[list[dict[str, Any]], int]: ...

    def session(self, tenant: str, session_id: str) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]: ...


class CopiesOutsideTheLog(Protocol):
    """Derived copies of content (evidence files, import rejects, DuckDB files and their exports): a forget must
    reach them."""

    def erase(self, tenant: str, subjects: Sequence[str]) -> list[str]:
        """Blank the tenant's evidence files and the rejected lines attributable to `subjects` (copies the keys
        cannot reach); returns one line per kind of file: what, and how many were rewritten."""
        ...

    def events_affected(self, tenant: str | None = None) -> tuple[int | None, list[int]]:
        """How many stored events the keys the last forget deleted had sealed, and their log positions (reading
        only `tenant`'s events when named: a tenant's keys seal only its own)."""
        ...

    def purge(self) -> int | None:
        """Rebuild the projections without forgotten content; None when a running projector does it itself."""
        ...


@dataclass
class Outcome:
    """What one command did: the events it caused (maybe none: a repeat) or the error that rejected it."""

    command: Command
    events: list[DomainEvent] = field(default_factory=list)
    error: DomainError | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass
class BatchResult:
    outcomes: list[Outcome]
    positions: list[int]
    already_tracked: bool = False

    @property
    def last_position(self) -> int | None:
        return self.positions[-1] if self.positions else None

    @property
    def accepted(self) -> int:
        return sum(1 for o in self.outcomes if o.ok)

    @property
    def rejected(self) -> list[Outcome]:
        return [o for o in self.outcomes if not o.ok]


class CommandRunner(Protocol):
    """Each tenant's folded state, and running commands through the rules into the log
    (domain/application/ontology_service.py's OntologyService is the one implementation)."""

    def ontology(self, tenant: str) -> Ontology: ...

    def execute_batch(self, commands: Sequence[Command], *, all_or_nothing: bool = False,
                      tracking: TrackingPosition | None = None) -> BatchResult: ...


@dataclass(frozen=True)
class ApiKeyRecord:
    key_id: str
    tenant: str
    sha256: str
    label: str
    created_at: str
    agents: tuple[str, ...] = ()
    """The agents the key acts as (domain/access.py); empty: a tenant-wide key, for services."""


@dataclass(frozen=True)
class IssuedKey:
    """A newly created key: `key` is the only copy of the secret there will ever be."""

    record: ApiKeyRecord
    key: str


class ApiKeys(Protocol):
    """The API keys, each bound to one tenant (infra/adapters/api_keys.py): what authentication resolves a
    presented key with, and what the admin routes and `noumena keys` manage."""

    def create(self, tenant: str, label: str = "", agents: tuple[str, ...] = ()) -> IssuedKey: ...

    def list(self, tenant: str | None = None) -> list[ApiKeyRecord]: ...

    def revoke(self, key_id: str) -> ApiKeyRecord: ...

    def tenant_for(self, key: str) -> str | None: ...

    def record_for(self, key: str) -> ApiKeyRecord | None: ...
