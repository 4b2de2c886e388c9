"""The ontology service: runs commands through the rules against each tenant's state and appends the events.

It holds one folded `Ontology` per tenant, kept current by reading only the events it has not yet seen, so a
command costs one short read and one append. Rules run under one lock per process. Across processes, writers of
one tenant take turns when the log has writer locks (`TenantWriteLocks`, on PostgreSQL): a writer holds its
tenant's lock from reading the log's tail to its append, so it never conflicts and never starves; without them
(SQLite), a write that conflicts on the tenant stream version is tried again as the composition root's policy says
(`WriteRetries`). The states are live (writes
apply in place), so the rest of the process reads one only inside `reading(tenant)`, which holds that lock while it
reads.

A tenant's state starts from its latest snapshot (`StateSnapshots`), when there is a usable one, plus the events
after it; the snapshot's maps may be read on demand, and a record found damaged then (`SnapshotDamaged`) makes the
state be folded afresh from the whole log (a write is decided again on it). While the service writes, it only asks
for snapshots (`StateSnapshots.request`: after a long fold, and each time the state is `every` events ahead of the
last one asked for, so a crash leaves a short tail to fold); they are taken off its path, by a process that folds
the log itself, so a write never waits for one. When the process stops, it snapshots in place each state far enough
ahead of the snapshot on disk (docs/operations.md#restarting-fast).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from functools import partial

from domain.commands import Command
from domain.errors import ConcurrencyError, DomainError
from domain.forgetting import SubjectForgotten, content_key
from domain.ontology import Ontology
from domain.ports import (
    AlreadyTracked,
    BatchResult,
    EventLog,
    Outcome,
    Pending,
    SnapshotDamaged,
    StateSnapshots,
    TenantWriteLocks,
    TrackingPosition,
    VersionConflict,
    WriteRetries,
)
from domain.release import release_in_background
from domain.rules import decide

SETTLE_SECONDS = 120.0
"""How long a process that stops waits at most for its snapshotter to bring its tenants' snapshots to their states
(it stops waiting for a tenant as soon as a request stores nothing new): snapshotting in place instead pickles, under
the stop, every entry the state changed since it was loaded (after a long bulk write, much of the state)."""

__all__ = ["BatchResult", "OntologyService", "Outcome"]


log = logging.getLogger(__name__)

class OntologyService:
    """Runs commands through the rules (domain/rules.py) and appends their events: the one writer of the log."""

    def __init__(self, log: EventLog, clock: Callable[[], datetime], seal_content: bool = True,
                 retries: WriteRetries | None = None, snapshots: StateSnapshots | None = None,
                 writer_locks: TenantWriteLocks | None = None) -> None:
        self._log = log
        self._writer_locks = writer_locks
        self._holders = threading.local()
        """`depth`: how many blocks of this thread hold `_lock` (a thread inside one never waits for a tenant's
        writer lock: another thread may hold that lock and wait for `_lock`)."""
        self._snapshots = snapshots if snapshots is not None and snapshots.every > 0 else None
        self._snapshotted: dict[str, int] = {}
        """By tenant: the version of the snapshot its state was loaded from, or the version it had when a snapshot
        was last asked for (0: none)."""
        self._forgot: set[str] = set()
        """Tenants whose state applied a forget as it was written: it still holds the forgotten content until it
        is folded afresh (`reload`), so it is never snapshotted in this process."""
        self._closed = False
        self._seal = seal_content
        self._clock = clock
        self._retries = retries
        """Runs a write again after a version conflict (e.g. after short random pauses, so that a writer that keeps
        losing the race to another process's tight loop gets its turn); None: a conflict is refused at once."""
        self._states: dict[str, Ontology] = {}
        self._refolds: dict[str, threading.Event] = {}
        """Tenants dropped by a forget, to be folded afresh from the log before their next use (set once done)."""
        self._folding: dict[str, threading.Event] = {}
        """Those of `_refolds` being folded now, each with the event of the fold that runs for it (a second forget
        while one runs has a fold of its own: the first one's result is not kept)."""
        self._folders: set[threading.Thread] = set()
        """The threads folding them: closing waits for them, since they read the log (a thread still reading a
        store closed under it can take the interpreter down inside SQLite)."""
        self._stopping = False
        """Closing: a fold cut short by the stores closing is not an error worth logging."""
        self._lock = threading.RLock()
        self._last_now: datetime | None = None
        self.last_position: int | None = None
        """The log position of this process's latest write."""
        self._written: dict[str, int] = {}
        """By tenant: the log position of this process's latest write in it (read-your-writes waits for it)."""

    def written_position(self, tenant: str) -> int:
        """The log position of this process's latest write in `tenant` (0: none yet): a read of the tenant served
        by this process answers from a state at least that far (read-your-writes, `Core.fresh`)."""
        return self._written.get(tenant, 0)

    FOLD_ELSEWHERE_FROM = 10_000
    """Events of a tenant from which its state, dropped by a forget, is folded again by the snapshotter process:
    below it a fold here costs less of this process's interpreter than asking that process (and its answer) does."""
    FOLD_ELSEWHERE_SECONDS = 300.0
    """How long the snapshotter process is given to fold such a tenant (a whole snapshot of a large log) before it
    is folded here after all."""
    REFOLD_WAIT_SECONDS = 60.0
    """How long a use of a tenant waits for its background fold, and then again while that fold still runs: two
    folds of one log at once would only slow each other and every request (a fold always ends, here or elsewhere)."""

    def _wait_refolded(self, tenants: Iterator[str] | Sequence[str]) -> None:
        """Before taking the lock: a tenant dropped by a forget is folded again now, in a thread of its own holding
        no lock, and waited for. (A thread inside a block already holds the lock: it folds what it needs itself.)"""
        if getattr(self._holders, "depth", 0) or not self._refolds:
            return
        for tenant in tenants:
            with self._lock:
                done = self._refolds.get(tenant)
                if done is not None and self._folding.get(tenant) is not done:
                    self._start_refold(tenant, done, 0)
            if done is not None:
                while not done.wait(self.REFOLD_WAIT_SECONDS):
                    with self._lock:
                        if self._folding.get(tenant) is not done:  # (none runs: the caller folds under the lock)
                            break

    def _start_refold(self, tenant: str, done: threading.Event, dropped_version: int) -> None:
        """(Holding the lock.) Fold the tenant again in a thread of its own: by the snapshotter process when it was
        dropped at `dropped_version` events or more, else here."""
        self._folding[tenant] = done
        folder = threading.Thread(target=self._refold, args=(tenant, done, dropped_version), name="noumena-refold",
                                  daemon=True)
        self._folders.add(folder)
        folder.start()

    @contextmanager
    def _held(self) -> Iterator[None]:
        with self._lock:
            self._holders.depth = getattr(self._holders, "depth", 0) + 1
            try:
                yield
            finally:
                self._holders.depth -= 1

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        """No write of this service runs meanwhile (e.g. while a forget deletes keys)."""
        with self._held():
            yield

    @contextmanager
    def serialized(self, *tenants: str) -> Iterator[bool]:
        """No writer of these tenants in another process meanwhile, when the log has writer locks; yields whether
        they are all held (False without writer locks). Writes of this thread inside the block take their turn
        with it. Taken before this service's lock (`reading`, `exclusive`), never inside it: inside, a tenant
        held elsewhere is not waited for (its writes are then retried on a conflict, as without locks)."""
        locks = self._writer_locks
        if locks is None:
            yield False
            return
        wait = not getattr(self._holders, "depth", 0)
        wanted = sorted(set(tenants))  # (one order for every process: two batches never wait for each other)
        taken: list[str] = []
        try:
            for tenant in wanted:
                if not locks.acquire(tenant, wait=wait):
                    break
                taken.append(tenant)
            yield len(taken) == len(wanted)
        finally:
            for tenant in reversed(taken):
                locks.release(tenant)

    @contextmanager
    def writing(self, tenant: str) -> Iterator[Ontology]:
        """`reading(tenant)` for a read that decides a write (made inside the block): its tenant's turn to write
        is taken first (`serialized`), so no other process writes the tenant between the read and the write."""
        with self.serialized(tenant), self.reading(tenant) as state:
            yield state

    @contextmanager
    def reading(self, tenant: str) -> Iterator[Ontology]:
        """The tenant's state as of the latest event in the log, to read while the block runs: the one way the
        rest of the process reads it. The state is live (writes apply to it in place, and a state loaded from a
        snapshot reads its maps from the snapshot file on demand), so the block holds this service's lock: no
        write of this process runs meanwhile, and iterating a map never meets one growing under it.

        The lock is re-entrant: a write of this service inside the block (`execute`, `execute_batch`) runs, and
        the block sees its result, so a read that decides a write can hold both together. Keep the block short:
        every writer of the process waits for it, so nothing slow runs inside (no network, no extractor or LLM
        call, no embedding). Nothing read should be kept past the block where a later write would matter: copy
        out what is needed. A lookup in a state read from a snapshot may raise `SnapshotDamaged`; the next
        block folds the whole log."""
        self._wait_refolded((tenant,))
        with self._held():
            yield self._caught_up(tenant)

    def ontology(self, tenant: str) -> Ontology:
        """The tenant's live state object itself, returned without holding anything: only for a caller that
        already holds the lock (`exclusive`, `reading`) or has the service to itself (tests, one-shot tools,
        benchmarks). Anything served beside writer threads reads through `reading`."""
        self._wait_refolded((tenant,))
        with self._held():
            return self._caught_up(tenant)

    def execute(self, command: Command) -> Outcome:
        """Run one command; raise its DomainError if a rule rejects it."""
        result = self.execute_batch([command], all_or_nothing=True)
        outcome = result.outcomes[0]
        if outcome.error is not None:
            raise outcome.error
        return outcome

    def execute_batch(
        self,
        commands: Sequence[Command],
        *,
        all_or_nothing: bool = False,
        tracking: TrackingPosition | None = None,
        then: Callable[[list[Outcome]], Command] | None = None,
    ) -> BatchResult:
        """Decide every command in order and append all resulting events in one atomic write.

        With `all_or_nothing`, one rejected command rejects the batch and nothing is written; otherwise rejected
        commands are reported in their outcomes and the rest are written. `tracking` is stored in the same
        transaction; a position already stored makes the whole batch a no-op (`already_tracked`). `then`, given
        the outcomes, makes one last command that is decided after them and written in the same transaction
        (e.g. a record of what the batch did); its outcome comes last.

        Across processes the batch takes its tenants' turn to write (`serialized`) when the log has writer locks;
        waiting too long for it raises ConcurrencyError, as do conflicts that retries did not resolve: both are
        refusals to try again, nothing was written.
        """
        self._wait_refolded([cmd.tenant for cmd in commands])
        with self.serialized(*(cmd.tenant for cmd in commands)) as serialized, self._held():
            write = partial(self._write, commands, all_or_nothing, tracking, then)
            try:
                return write(trust_states=not serialized)
            except VersionConflict:
                if self._retries is None:
                    raise ConcurrencyError("another writer appended to the tenant while this write was decided"
                                           ) from None
            try:
                return self._retries(lambda: write(trust_states=False))
            except VersionConflict:
                raise ConcurrencyError("gave up after repeated version conflicts with other writers") from None

    def _write(self, commands: Sequence[Command], all_or_nothing: bool, tracking: TrackingPosition | None,
               then: Callable[[list[Outcome]], Command] | None, trust_states: bool) -> BatchResult:
        """One attempt at `execute_batch`: decide, append, and commit the states (or roll them back). Raises
        VersionConflict, having changed nothing, when another writer appended after the log was read.

        With `trust_states`, the batch is decided on the states as this service last left them, without reading
        the log (one query less per batch for a process that is the only writer). If another writer appended
        meanwhile, the append conflicts on the stream version; that, and what would not be written (a rejection,
        a no-op), is decided again at once on the log's tail. A batch that holds its tenants' writer locks reads
        the tail: other processes write between its turns."""
        if tracking is not None:
            stored = self._log.tracked_position(tracking.name)
            if stored is not None and stored >= tracking.position:
                return BatchResult([Outcome(cmd) for cmd in commands], [], already_tracked=True)
        tenants = dict.fromkeys(cmd.tenant for cmd in commands)
        unread = trust_states and all(tenant in self._states for tenant in tenants)
        states = {tenant: self._states[tenant] if unread else self._caught_up(tenant) for tenant in tenants}
        for state in states.values():
            state.begin()
        try:
            outcomes, pending = self._decide_all(commands, states)
            if unread and any(o.error is not None or not o.events for o in outcomes):
                self._rollback(states)
                return self._write(commands, all_or_nothing, tracking, then, trust_states=False)
            if then is not None:
                final = then(outcomes)
                if final.tenant not in states:
                    states[final.tenant] = self._caught_up(final.tenant)
                    states[final.tenant].begin()
                more, more_pending = self._decide_all([final], states)
                outcomes, pending = outcomes + more, pending + more_pending
        except SnapshotDamaged:  # (a record read on demand did not read: fold afresh, decide again)
            self._rollback(states)
            damaged = [t for t, state in states.items() if self._snapshots and self._snapshots.damaged(state)]
            if not damaged:
                raise
            for tenant in damaged:
                self._drop(tenant)
            return self._write(commands, all_or_nothing, tracking, then, trust_states=False)
        if all_or_nothing and any(not o.ok for o in outcomes):
            self._rollback(states)
            return BatchResult(outcomes, [])
        try:
            positions = self._log.append(pending, tracking) if pending or tracking else []
        except VersionConflict:
            self._rollback(states)
            if unread:  # (the states were behind the log, not necessarily a race: decide on the tail at once)
                return self._write(commands, all_or_nothing, tracking, then, trust_states=False)
            raise
        except AlreadyTracked:
            self._rollback(states)
            return BatchResult([Outcome(cmd) for cmd in commands], [], already_tracked=True)
        except BaseException:
            self._rollback(states)
            raise
        for state in states.values():
            state.commit()
        if self._snapshots is not None:
            self._snapshots.wrote()
            self._forgot.update(p.tenant for p in pending if isinstance(p.event, SubjectForgotten))
            for state in states.values():
                self._ask_for_snapshot(state, self._snapshots.every)
        if positions:
            self.last_position = positions[-1]
            for item, position in zip(pending, positions, strict=False):
                self._written[item.tenant] = position
        return BatchResult(outcomes, positions)

    def _decide_all(
        self, commands: Sequence[Command], states: dict[str, Ontology]
    ) -> tuple[list[Outcome], list[Pending]]:
        now = self._now()
        outcomes: list[Outcome] = []
        pending: list[Pending] = []
        for command in commands:
            state = states[command.tenant]
            try:
                events = decide(state, command, now)
            except DomainError as error:
                outcomes.append(Outcome(command, error=error))
                continue
            if not self._seal:
                for event in events:
                    state.apply(event)
                    pending.append(Pending(command.tenant, state.version, event))
            else:
                for event in events:
                    key = content_key(state, event)
                    state.apply(event)
                    pending.append(Pending(command.tenant, state.version, event, key))
            outcomes.append(Outcome(command, events))
        return outcomes, pending

    def _rollback(self, states: dict[str, Ontology]) -> None:
        for state in states.values():
            state.rollback()

    def reload(self, tenant: str) -> None:
        """Drop the folded state of a tenant (e.g. after a forget: it may hold content that no longer exists); its
        next use folds it again from the log in a thread of its own, holding no lock, and waits for it
        (`_wait_refolded`): folded under the lock, a large tenant (seconds per 100,000 events) held back every write
        of the process and every read through `reading`, of every tenant. A tenant no one uses is not folded, unless
        it has `FOLD_ELSEWHERE_FROM` events or more and snapshots are taken: the snapshotter process is asked to
        fold it at once, since that pass over its log, in this process, would share the interpreter with every
        request for seconds."""
        done = threading.Event()
        with self._lock:
            dropped = self._states.pop(tenant, None)
            self._forgot.discard(tenant)
            if self._snapshots is not None:
                self._snapshots.discard(tenant)
                self._snapshotted.pop(tenant, None)
            self._refolds[tenant] = done
            version = dropped.version if dropped is not None else 0
            if (self._snapshots is not None and self._snapshots.every and version >= self.FOLD_ELSEWHERE_FROM
                    and not self._stopping):
                self._start_refold(tenant, done, version)
        if dropped is not None:  # (no read has it: each takes the state from `_states` under the lock; all its own)
            release_in_background(vars(dropped).values())

    def _refold(self, tenant: str, done: threading.Event, dropped_version: int) -> None:
        try:
            state = None
            if dropped_version and self._snapshots is not None:
                state = self._snapshots.fold_elsewhere(tenant, dropped_version, self.FOLD_ELSEWHERE_SECONDS,
                                                       lambda: self._stopping)
            loaded = state is not None
            if state is None:
                state = Ontology(tenant=tenant)
                for event in self._log.read_stream(tenant):
                    if self._stopping:  # (the stores are about to close: close() waits for this thread to end)
                        return
                    state.apply(event)
            with self._lock:
                if self._refolds.get(tenant) is done and tenant not in self._states:
                    if not loaded:  # (a loaded snapshot's tail is read on its first use, a forget in it noticed)
                        for event in self._log.read_stream(tenant, after_version=state.version):  # (written since)
                            state.apply(event)
                    self._states[tenant] = state
                    self._snapshotted[tenant] = state.version if loaded else 0
                    if self._snapshots is not None:
                        self._ask_for_snapshot(state, self._snapshots.every)
        except Exception:  # (the next use folds it under the lock, as before)
            if not self._stopping:  # (a store closed under it: the process is stopping)
                log.exception("folding tenant %r again after a forget failed", tenant)
        finally:
            with self._lock:
                if self._refolds.get(tenant) is done:
                    del self._refolds[tenant]
                if self._folding.get(tenant) is done:
                    del self._folding[tenant]
                self._folders.discard(threading.current_thread())
            done.set()

    def close(self) -> None:
        """Have every tenant's snapshot brought to its state: by the snapshotter if it runs (it folds only what
        its last snapshot lacks), waiting up to `SETTLE_SECONDS`; then snapshot in place each state still at least
        `every` events ahead of the snapshot on disk (no write waits any more), stop taking snapshots from the log,
        and wait until the snapshots are stored (a process that stops gracefully restarts from them)."""
        self._stopping = True
        with self._lock:
            folders = list(self._folders)
        for folder in folders:
            folder.join(self.REFOLD_WAIT_SECONDS)
        if self._writer_locks is not None:
            self._writer_locks.close()
        if self._snapshots is None:
            return
        with self._lock:
            self._closed = True
            ahead = {tenant: state.version for tenant, state in self._states.items()
                     if tenant not in self._forgot and state.version > self._snapshots.stored_version(tenant)}
            for tenant in self._snapshots.settle(ahead, SETTLE_SECONDS):
                state = self._states[tenant]
                if state.version - self._snapshots.stored_version(tenant) >= self._snapshots.every:
                    self._snapshots.save(tenant, state)
                    self._snapshotted[tenant] = state.version
        self._snapshots.close()

    def _ask_for_snapshot(self, state: Ontology, lag: int) -> None:
        """Ask for a snapshot of the tenant (taken off this process's path) if `state` is `lag` events or more
        ahead of the last one."""
        tenant = state.tenant
        if self._snapshots is None or self._closed or state.version - self._snapshotted.get(tenant, 0) < lag:
            return
        self._snapshots.request(tenant)
        self._snapshotted[tenant] = state.version

    def _drop(self, tenant: str) -> None:
        """Forget a state loaded from a snapshot that turned out damaged, and the snapshot."""
        self._states.pop(tenant, None)
        if self._snapshots is not None:
            self._snapshots.discard(tenant)
            self._snapshotted.pop(tenant, None)

    def _caught_up(self, tenant: str) -> Ontology:
        try:
            return self._catch_up(tenant)
        except SnapshotDamaged:  # (the tail touched a record that does not read: fold the whole log)
            self._drop(tenant)
            return self._catch_up(tenant)

    def _catch_up(self, tenant: str) -> Ontology:
        state = self._states.get(tenant)
        if state is not None and self._snapshots is not None and self._snapshots.damaged(state):
            self._drop(tenant)
            state = None
        if state is None:
            pending = self._refolds.pop(tenant, None)  # (folded here, under the lock: no thread needs to)
            if pending is not None and self._folding.get(tenant) is not pending:
                pending.set()
            self._folding.pop(tenant, None)
            state = self._snapshots.load(tenant) if self._snapshots is not None else None
            if state is None:
                state = Ontology(tenant=tenant)
            self._states[tenant] = state
            self._snapshotted[tenant] = state.version
        events = list(self._log.read_stream(tenant, after_version=state.version))
        if state.version and any(isinstance(e, SubjectForgotten) for e in events):
            # A subject was forgotten (by another process, or after the snapshot): content folded earlier may no
            # longer exist. Fold afresh, and drop a snapshot that still holds it.
            state = self._states[tenant] = Ontology(tenant=tenant)
            self._forgot.discard(tenant)
            if self._snapshots is not None:
                self._snapshots.discard(tenant)
                self._snapshotted[tenant] = 0
            events = list(self._log.read_stream(tenant))
        for event in events:
            state.apply(event)
        if self._snapshots is not None:
            self._ask_for_snapshot(state, self._snapshots.every)
        return state

    def _now(self) -> datetime:
        """Transaction time for this write: the clock, never behind the previous write of this process."""
        now = self._clock()
        if self._last_now is not None and now < self._last_now:
            now = self._last_now
        self._last_now = now
        return now
