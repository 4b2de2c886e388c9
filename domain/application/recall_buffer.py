"""Recording what served reads used, coalesced: the uses perspectives, contexts and searches make are held here
and written as one `recalls.coalesced` event per tenant per flush, at most one use per agent, fact and hour.

Why: a served read is a use of what it shows (the testing effect), but writing one event per read made the log
grow with reads alone (1,000 events per 1,000 perspectives). The activation model already counts a use younger
than an hour as an hour old, so within one hour a second use adds only its count; the first use of each hour
is kept, at its own moment (docs/perspectives.md, "Recalls, coalesced", measures what the rest changes).

When: a flush runs when the oldest held use is `flush_seconds` old (checked on every use and by a background
timer), and on `close()` (a clean shutdown). A crash loses only the uses not flushed yet: activation hints,
never a fact; the next reads record their uses again.

`flush_seconds == 0` turns coalescing off: each read records its own `facts.recalled` event at once (what the
benchmark compares coalescing with, in the same run).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from domain import commands as c
from domain.ports import CommandRunner
from domain.recalls import RecallMode, hour_bucket

log = logging.getLogger(__name__)

MOST_HELD = 1_000_000
"""Uses held at most (per process); beyond, new uses are dropped until a flush succeeds (a log that refuses
writes for a long time must not exhaust memory for hints)."""


@dataclass(frozen=True)
class Recorded:
    """What recording a read's uses did: written now at `position`, or held for the next flush (`position`
    None, `held` True)."""

    position: int | None
    held: bool


class RecallBuffer:
    """One per process (infra/bootstrap.py), shared by every `Application` of that process."""

    def __init__(self, service: CommandRunner, flush_seconds: float = 60.0) -> None:
        if flush_seconds < 0:
            raise ValueError("flush_seconds must be >= 0")
        self._service = service
        self.flush_seconds = flush_seconds
        self._held: dict[str, dict[tuple[str, str, int], c.ServedUse]] = {}
        self._oldest: datetime | None = None
        self._count = 0
        self._lock = threading.Lock()
        self._flushing = threading.Lock()
        self._timer: threading.Thread | None = None
        self._stop = threading.Event()
        self.dropped = 0
        """Uses dropped because `MOST_HELD` were held (the log refused writes for that long)."""

    @property
    def coalescing(self) -> bool:
        return self.flush_seconds > 0

    @property
    def held(self) -> int:
        """How many uses wait for the next flush."""
        with self._lock:
            return self._count

    def record(self, tenant: str, agent: str, fact_ids: Sequence[str], mode: RecallMode, at: datetime,
               served_id: str | None = None) -> Recorded:
        """A read served at `at` used `fact_ids` for `agent`. Coalescing: held (the first use of each fact in
        each hour), flushed when due. Off: one `facts.recalled` event now, naming the read."""
        if not fact_ids:
            return Recorded(None, False)
        if not self.coalescing:
            result = self._service.execute_batch(
                [c.RecordRecall(tenant=tenant, agent=agent, fact_ids=tuple(fact_ids), mode=mode,
                                perspective_id=served_id)], all_or_nothing=True)
            error = result.outcomes[0].error
            if error is not None:
                raise error
            return Recorded(result.last_position, False)
        bucket = hour_bucket(at.timestamp())
        with self._lock:
            held = self._held.setdefault(tenant, {})
            for fact_id in fact_ids:
                key = (agent, fact_id, bucket)
                if key not in held:
                    if self._count >= MOST_HELD:
                        self.dropped += 1
                        continue
                    held[key] = c.ServedUse(agent=agent, fact_id=fact_id, mode=mode, at=at)
                    self._count += 1
            if self._oldest is None or at < self._oldest:
                self._oldest = at
            due = (at - self._oldest).total_seconds() >= self.flush_seconds
        self._start_timer()
        if due:
            self.flush()
        return Recorded(None, True)

    def flush(self) -> list[int]:
        """Write every held use: one `recalls.coalesced` event per tenant (none when every use's hour already
        holds one). Uses of agents or facts the tenant does not know are dropped. On a write error the uses are
        held again for the next flush, and the error is logged. Returns the positions written."""
        with self._flushing:
            with self._lock:
                held, self._held = self._held, {}
                self._oldest, self._count = None, 0
            positions: list[int] = []
            for tenant, uses in held.items():
                try:
                    with self._service.writing(tenant) as state:  # (the filter and its write together)
                        known = tuple(u for u in uses.values()
                                      if u.agent in state.entities and u.fact_id in state.facts)
                        if not known:
                            continue
                        result = self._service.execute_batch([c.RecordCoalescedRecalls(tenant=tenant, uses=known)],
                                                             all_or_nothing=True)
                    error = result.outcomes[0].error
                    if error is not None:
                        raise error
                    positions.extend(result.positions)
                except Exception:  # a hint is not worth a failed request: keep it for the next flush
                    log.exception("recording %d coalesced uses of tenant %r failed; kept for the next flush",
                                  len(uses), tenant)
                    self._hold_again(tenant, uses)
            return positions

    def _hold_again(self, tenant: str, uses: dict[tuple[str, str, int], c.ServedUse]) -> None:
        with self._lock:
            held = self._held.setdefault(tenant, {})
            for key, use in uses.items():
                if key not in held and self._count < MOST_HELD:
                    held[key] = use
                    self._count += 1
                    if self._oldest is None or use.at < self._oldest:
                        self._oldest = use.at

    def _start_timer(self) -> None:
        if self._timer is not None or self._stop.is_set():
            return
        with self._lock:
            if self._timer is not None:
                return
            self._timer = threading.Thread(target=self._run, name="noumena-recall-flush", daemon=True)
            self._timer.start()

    def _run(self) -> None:
        """Flush every `flush_seconds` while uses are held (a quiet process still writes what it served)."""
        while not self._stop.wait(self.flush_seconds):
            if self.held:
                self.flush()

    def close(self) -> list[int]:
        """A clean shutdown: stop the timer and flush what is held."""
        self._stop.set()
        timer = self._timer
        if timer is not None:
            timer.join(timeout=5)
        return self.flush()
