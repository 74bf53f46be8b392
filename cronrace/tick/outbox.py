"""Run records on their way to Redis: written now, or kept until Redis answers again.

docs/design.md section 3 promises a record for every decision. A record that cannot be
written right now (Redis down, a partition, a timeout, a shutdown cutting the write
short) must therefore not vanish: the outbox keeps it in a bounded queue, and a
background task writes the queue as soon as Redis answers.

A write whose reply was lost may have happened. Before retrying such records the outbox
reads back what the job's history received since they were made (stream ids are the
server's clock) and drops the ones already there, so a record is written once.

When the queue is full the oldest record is dropped, and what is still queued when the
agent exits is given up: each such record is logged at ERROR with job, tick, node, fence
and outcome, so nothing disappears without a line in the log.
"""

from __future__ import annotations

import logging
from collections import defaultdict, deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import anyio

from cronrace.errors import StoreError
from cronrace.model.records import RunRecord
from cronrace.runtime.clock import Clock
from cronrace.runtime.observer import Observer
from cronrace.runtime.retry import BACKOFF, Backoff, Retry
from cronrace.stores.contract import Store

log = logging.getLogger("cronrace.tick.outbox")

#: The most records kept while Redis cannot take them (about 300 bytes each).
OUTBOX_CAPACITY = 10_000
#: The most records written (or read back) per job in one round trip.
BATCH = 500
#: How far before a record's own time its copy may sit in the history: the record's
#: time is the shared clock's, the stream id the server's; a generous margin for skew.
READ_BACK_MARGIN_MS = 60_000


@dataclass(slots=True, eq=False)
class _Kept:
    record: RunRecord
    history: int
    maybe_written: bool


def _identity(record: RunRecord) -> tuple[str, int, str, str, int, int]:
    return (
        record.job,
        record.tick_s,
        record.node,
        record.outcome.value,
        record.fence,
        record.finished_ms,
    )


class Outbox:
    """The run records of one agent that Redis has not confirmed yet.

    Args:
        store: where records go.
        clock: sleeps between attempts.
        backoff: the pauses between attempts (default the project's one policy).
        capacity: the most records kept; older ones are dropped (and logged) beyond it.
    """

    def __init__(
        self,
        store: Store,
        clock: Clock,
        *,
        backoff: Backoff = BACKOFF,
        capacity: int = OUTBOX_CAPACITY,
        observer: Observer | None = None,
    ) -> None:
        self.store = store
        self.clock = clock
        self.capacity = capacity
        self.observer = observer or Observer()
        self.backoff = backoff
        self._queue: deque[_Kept] = deque()
        self._wake = anyio.Event()
        self._lock = anyio.Lock()
        self.dropped = 0

    @property
    def pending(self) -> int:
        """How many records wait for Redis."""
        return len(self._queue)

    async def write(self, records: Sequence[RunRecord], *, history: int) -> bool:
        """Append ``records`` now, or keep them for later; never raises a Redis failure.

        Also when the caller is cancelled during the write, the records are kept.

        Returns:
            True when Redis confirmed them now.
        """
        if not records:
            return True
        written = False
        try:
            await self.store.record(records, history=history)
            written = True
        except StoreError as exc:
            self.observer.redis_error("record")
            log.warning(
                "could not write run records now; keeping them for later",
                extra={"records": len(records), "error": str(exc)},
            )
        finally:
            if not written:
                self.keep(records, history=history, maybe_written=True)
        return written

    def keep(
        self, records: Iterable[RunRecord], *, history: int, maybe_written: bool = True
    ) -> None:
        """Queue records for the background writer (``maybe_written``: a reply was lost)."""
        for record in records:
            self._queue.append(_Kept(record, history, maybe_written))
        while len(self._queue) > self.capacity:
            self._drop(self._queue.popleft().record, "the outbox is full")
        self._wake.set()

    async def run(self) -> None:
        """Write kept records whenever there are some, retrying with backoff; until cancelled."""
        retry = Retry(self.clock, self.backoff)
        while True:
            if not self._queue:
                self._wake = anyio.Event()
                await self._wake.wait()
                continue
            if await self.flush():
                retry.succeeded()
                continue
            await retry.wait()

    async def flush(self) -> bool:
        """Try once to write every kept record.

        Returns:
            True when the outbox is empty afterwards.
        """
        async with self._lock:
            while self._queue:
                batch = list(self._queue)[:BATCH]
                try:
                    await self._write_batch(batch)
                except StoreError as exc:
                    for kept in batch:
                        kept.maybe_written = True
                    log.debug("kept run records still cannot be written", extra={"error": str(exc)})
                    return False
                done = {id(kept) for kept in batch}
                self._queue = deque(kept for kept in self._queue if id(kept) not in done)
                log.info("kept run records written", extra={"records": len(batch)})
            return True

    async def _write_batch(self, batch: list[_Kept]) -> None:
        by_job: dict[str, list[_Kept]] = defaultdict(list)
        for kept in batch:
            by_job[kept.record.job].append(kept)
        todo: list[_Kept] = []
        for job, kept_of_job in by_job.items():
            doubtful = [k for k in kept_of_job if k.maybe_written]
            present: set[tuple[str, int, str, str, int, int]] = set()
            if doubtful:
                since_ms = min(k.record.finished_ms for k in doubtful) - READ_BACK_MARGIN_MS
                found = await self.store.records_since(job, since_ms, BATCH * 4)
                present = {_identity(record) for record in found}
            todo.extend(k for k in kept_of_job if _identity(k.record) not in present)
        for history in {k.history for k in todo}:
            await self.store.record(
                [k.record for k in todo if k.history == history], history=history
            )

    def give_up(self, reason: str) -> None:
        """Drop every kept record, logging each one (the agent is exiting)."""
        while self._queue:
            self._drop(self._queue.popleft().record, reason)

    def _drop(self, record: RunRecord, reason: str) -> None:
        self.dropped += 1
        self.observer.record_dropped(record.job, record.outcome)
        log.error(
            "run record dropped",
            extra={
                "why": reason,
                "job": record.job,
                "tick": record.tick_s,
                "node": record.node,
                "fence": record.fence,
                "outcome": record.outcome.value,
                "error": record.error,
            },
        )
