"""Releasing finished runs' leases: retried until they expire, and before the next decision.

A run's record and its release go out in one ``end_run.lua`` call. When Redis cannot be
reached (down, restarting, a stale pooled connection) the release is retried, safely (the
script compares the fence and writes the record only with it), until the lease has surely
expired: given up earlier, a finished run's lease would block its job for the rest of
``lease_ttl``. And it must reach Redis before the job's next decision, or that decision
meets the finished run's lease and skips its tick:

- on the node that ran it, :class:`Releases` tells the scheduler which jobs still have a
  release pending, and sends them at once when asked (:meth:`Releases.retry_now`);
- on other nodes, :func:`let_others_release` gives a lease another node holds a moment to
  go before the first decision after an outage.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Collection
from dataclasses import dataclass, field

import anyio
import anyio.lowlevel

from cronrace.errors import RedisAmbiguousError, StoreError
from cronrace.model.job import Job
from cronrace.model.records import RunRecord
from cronrace.protocol import ReleaseReply
from cronrace.runtime.clock import Clock
from cronrace.runtime.retry import Backoff
from cronrace.stores.contract import Store
from cronrace.stores.values import Owner, RunEnd
from cronrace.tick.outbox import Outbox

log = logging.getLogger("cronrace.run")

#: The longest pause between attempts to release a finished run's lease: when Redis
#: returns, the release must go out before anyone decides the job's next tick.
RELEASE_RETRY_S = 0.1
#: The pauses between those attempts: not jittered, as one node's releases do not herd,
#: and cut short when Redis answers again (:meth:`Releases.retry_now`).
RELEASE_BACKOFF = Backoff(start_s=0.01, max_s=RELEASE_RETRY_S, jitter=False)
#: Retries of a release sent at once, before the pauses begin: after Redis restarted every
#: pooled connection fails once, and going through them must not let a decision go first.
IMMEDIATE_RETRIES = 3
#: After an outage, a won tick whose job's lease another node holds waits up to this long
#: for that lease to go (polled every FOREIGN_RELEASE_POLL_S) before it is decided: a run
#: that finished while Redis was away releases it as soon as it gets through (it retries
#: every RELEASE_RETRY_S), while a run still going keeps it and the tick is then decided
#: under the overlap policy as usual.
FOREIGN_RELEASE_WAIT_S = 10 * RELEASE_RETRY_S
FOREIGN_RELEASE_POLL_S = RELEASE_RETRY_S / 2


#: What a release waiting in a batch gets when the batch was cut short before it was sent.
_NOT_SENT = object()


@dataclass(slots=True, eq=False)
class _Batch:
    """Releases sent together: each request's reply (or error) at the same index.

    The first request's run sends the batch; each other one waits on a future of its own
    (``waiting[i]`` for ``requests[i + 1]``): a future, not an event, as nearly every run
    waits here, and an event's wait holds two coroutines and a future more for each run in
    flight (the runs are plain asyncio tasks, tick/tasks.py).
    """

    requests: list[RunEnd]
    waiting: list[asyncio.Future[object]] = field(default_factory=list)
    replies: list[object] = field(default_factory=list)


class Releases:
    """The releases one agent has in flight, by job."""

    def __init__(self, store: Store, clock: Clock, owner: Owner, outbox: Outbox) -> None:
        self.store = store
        self.clock = clock
        self.owner = owner
        self.outbox = outbox
        #: Releases in flight by job (a plain dict: a Counter's lookups of absent jobs
        #: cost a Python call each, and every run and decision asks).
        self._pending: dict[str, int] = {}
        # Made when someone waits on them: nearly every run ends its job's last pending
        # release, and nearly every wake-up calls retry_now, with nobody waiting.
        self._settled: anyio.Event | None = None
        #: The pauses of releases waiting to retry: retry_now cuts them short.
        self._pauses: set[anyio.CancelScope] = set()
        self._forming: _Batch | None = None

    def retry_now(self) -> None:
        """Redis answers again: releases waiting to retry go out at once."""
        for pause in self._pauses:
            pause.cancel()

    def pending(self, jobs: Collection[str]) -> bool:
        """Whether a finished run of ``jobs`` is still trying to release its lease."""
        pending = self._pending
        return bool(pending) and any(name in pending for name in jobs)

    async def settled(self, jobs: Collection[str]) -> None:
        """Return once no finished run of ``jobs`` is still trying to release its lease."""
        while self.pending(jobs):
            if self._settled is None:
                self._settled = anyio.Event()
            await self._settled.wait()

    async def finish(
        self,
        job: Job,
        record: RunRecord,
        fence: int,
        *,
        until_mono: float,
        hand_on: bool = True,
    ) -> ReleaseReply | None:
        """Record the run and release its lease (or hand it on), retrying until ``until_mono``.

        Returns:
            The release's answer, or None when Redis did not answer by ``until_mono`` (the
            lease has expired by then; the record waits in the outbox). A record not
            confirmed by the end, also when cancelled, goes to the outbox.
        """
        attempt = 0
        confirmed = False
        self._pending[job.name] = self._pending.get(job.name, 0) + 1
        try:
            while True:
                request = RunEnd(
                    job.name,
                    fence,
                    self.owner,
                    job.lease_ttl_ms,
                    record,
                    job.history,
                    hand_on=hand_on,
                )
                # Sent in the batch of the releases of this turn of the loop (_lead); here,
                # not in a coroutine of its own: one frame less for each run in flight.
                batch = self._forming
                if batch is None:
                    reply = await self._lead(request)
                else:
                    batch.requests.append(request)
                    waiter: asyncio.Future[object] = asyncio.get_running_loop().create_future()
                    batch.waiting.append(waiter)
                    reply = await waiter
                if reply is _NOT_SENT:
                    continue  # its batch was cut short before it was sent: send it again
                if not isinstance(reply, StoreError):
                    assert isinstance(reply, ReleaseReply)
                    confirmed = True
                    return reply
                attempt += 1
                if attempt == 1 or attempt % 50 == 0:
                    log.warning(
                        "could not record or release a run; retrying until its lease expires",
                        extra={
                            "job": job.name,
                            "tick": record.tick_s,
                            "fence": fence,
                            "attempt": attempt,
                            "error": str(reply),
                        },
                    )
                if self.clock.monotonic() >= until_mono:
                    log.error(
                        "the lease expired before it could be released; the record waits "
                        "in the outbox",
                        extra={"job": job.name, "tick": record.tick_s, "fence": fence},
                    )
                    return None
                if attempt <= IMMEDIATE_RETRIES:
                    await anyio.lowlevel.checkpoint()
                    continue
                # On the agent's clock, as every other wait of a run: a pause on the
                # event loop's own clock never ended under a fake clock, and held a
                # stopping agent whose releases failed (the scheduler model, seed 17).
                with anyio.CancelScope() as pause:
                    self._pauses.add(pause)
                    try:
                        await self.clock.sleep(RELEASE_BACKOFF.delay_s(attempt))
                    finally:
                        self._pauses.discard(pause)
        finally:
            if not confirmed:
                self.outbox.keep([record], history=job.history, maybe_written=True)
            left = self._pending[job.name] - 1
            if left:
                self._pending[job.name] = left
            else:
                del self._pending[job.name]
                if self._settled is not None:
                    self._settled.set()
                    self._settled = None

    async def _lead(self, request: RunEnd) -> object:
        """Open a batch, let this turn's other releases join it, send it, share the replies.

        Runs that finish together (a tick's runs, released after a Redis outage) share one
        round trip. A batch cut short before it was sent tells the others to send again; one
        cut short while on the wire tells them it may have happened (they retry, as after
        a lost reply).
        """
        batch = _Batch([request])
        self._forming = batch
        sent = False
        try:
            await anyio.lowlevel.checkpoint()
            self._forming = None
            sent = True
            try:
                batch.replies = list(await self.store.end_runs(batch.requests))
            except StoreError as exc:
                batch.replies = [exc] * len(batch.requests)
        finally:
            if self._forming is batch:
                self._forming = None
            if not batch.replies:
                cut: object = RedisAmbiguousError("a batch of releases was cut short")
                batch.replies = [cut if sent else _NOT_SENT] * len(batch.requests)
            for waiter, reply in zip(batch.waiting, batch.replies[1:], strict=True):
                if not waiter.done():  # a run cancelled meanwhile has stopped waiting
                    waiter.set_result(reply)
        return batch.replies[0]


async def let_others_release(
    store: Store, jobs: list[str], *, owner: Owner, clock: Clock, until_mono: float
) -> None:
    """Give leases other nodes hold on ``jobs`` until ``until_mono`` to go.

    The scheduler calls this for FOREIGN_RELEASE_WAIT_S after its claims go through again
    after an outage, whichever wake-up first wins a claim of the job in that time.
    """
    for poll in itertools.count():
        try:
            states = await store.job_states(jobs)
        except StoreError:
            return  # the decision meets the same trouble and is retried there
        jobs = [s.job for s in states if s.lease is not None and s.lease.owner != owner]
        if not jobs or clock.monotonic() >= until_mono:
            return
        if not poll:
            log.info(
                "after the outage: letting other nodes release their leases first",
                extra={"jobs": jobs, "node": owner.node_id},
            )
        await clock.sleep(FOREIGN_RELEASE_POLL_S)
