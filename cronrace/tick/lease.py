"""A held running lease: renewed while the handler runs, given up when it cannot be.

The rule that keeps two runs from overlapping is local: a node that has not renewed its
lease for ``lease_ttl`` minus a margin, measured on its own monotonic clock from the moment
it *sent* the last successful request, cancels its handler. It does not wait for Redis to
tell it (Redis may be unreachable), and by then Redis may already have let the lease
expire and granted it to another node.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
from dataclasses import dataclass, field

import anyio
from anyio.abc import TaskGroup

from cronrace.errors import StoreError
from cronrace.model.job import Flag
from cronrace.protocol import RenewRequest
from cronrace.runtime.clock import Clock
from cronrace.runtime.observer import Observer
from cronrace.stores.contract import Store
from cronrace.stores.values import Owner, Renewal
from cronrace.tick.cancel import Cancellable

log = logging.getLogger("cronrace.tick.lease")

#: Fraction of the lease kept as a margin for cancellation latency and clock rate error.
SAFETY_MARGIN = 0.1


@dataclass(slots=True)
class Lease:
    """The running lease of one run of one job.

    Attributes:
        granted_mono: when the acquire request was sent (monotonic seconds): the lease
            cannot have started earlier, so deadlines measured from it are conservative.
        expiry_mono: by when Redis has surely let the lease expire (monotonic seconds):
            ``lease_ttl`` after the last grant or renewal was *answered*. Releasing later
            is pointless (the fence no longer matches anything).
    """

    store: Store
    clock: Clock
    job: str
    fence: int
    ttl_s: float
    granted_mono: float
    renewals: int = 0
    failures: int = 0
    lost_reason: str | None = None
    slowest_renewal_s: float = 0.0
    observer: Observer = field(default_factory=Observer)
    #: The run's owner and tick: with them a renewal after a wipe writes the lost lease back.
    owner: Owner | None = None
    tick_s: int = 0
    #: The manual trigger the run runs, if any, and the job's history cap: written with a
    #: re-asserted lease (its result, and that of a grant it displaces).
    trigger_id: str | None = None
    history: int = 0
    expiry_mono: float = field(init=False)
    _deadline_mono: float = field(init=False)

    def __post_init__(self) -> None:
        self._deadline_mono = self.granted_mono + self.ttl_s * (1 - SAFETY_MARGIN)
        # Created once the grant was answered: Redis started the lease before now.
        self.expiry_mono = self.clock.monotonic() + self.ttl_s

    @property
    def deadline_mono(self) -> float:
        """When this node must stop believing it holds the lease."""
        return self._deadline_mono

    @property
    def first_renewal_mono(self) -> float:
        """When the lease is first renewed if the run is still going (a third of its ttl)."""
        return self.granted_mono + self.ttl_s / 3

    @property
    def lost(self) -> bool:
        return self.lost_reason is not None

    def rebase(self, fence: int, granted_mono: float) -> None:
        """Follow the lease to a handed-on run (queued or catch-up tick) with a new fence."""
        self.fence = fence
        self.granted_mono = granted_mono
        self._deadline_mono = granted_mono + self.ttl_s * (1 - SAFETY_MARGIN)
        self.expiry_mono = self.clock.monotonic() + self.ttl_s

    def check_deadline(self) -> bool:
        """Count the lease as lost if its deadline has passed; return whether it is lost.

        The renewal task notices a passed deadline only when it gets to run: a handler that
        blocked the event loop past the deadline may return first. Its run is no less
        unprotected, so whoever looks at the lease after the handler asks here.
        """
        if not self.lost and self.clock.monotonic() >= self._deadline_mono:
            self.lost_reason = "no successful renewal within lease_ttl (was the loop blocked?)"
            log.warning(
                "lease lost while the handler ran",
                extra={"job": self.job, "fence": self.fence, "reason": self.lost_reason},
            )
        return self.lost

    async def keep(self, victim: Cancellable, lost_flag: Flag | None = None) -> None:
        """Renew every ``ttl/3`` until cancelled; cancel ``victim`` when the lease is lost.

        ``lost_flag`` (the run context's) is set *before* the victim is cancelled, so that
        a handler sees ``ctx.lease_lost`` when the cancellation reaches it.
        """
        interval_s = self.ttl_s / 3
        next_renewal = self.first_renewal_mono
        while True:
            now = self.clock.monotonic()
            if now >= self._deadline_mono:
                self._lose("no successful renewal within lease_ttl", victim, lost_flag)
                return
            if now < next_renewal:
                # Wake for the renewal or the deadline, whichever is first; then look again
                # before doing anything, because a paused process wakes past both.
                await self.clock.sleep(min(next_renewal, self._deadline_mono) - now)
                continue
            sent = now
            next_renewal = sent + interval_s
            answer = None
            # Never wait for an answer past the deadline: an answer that arrives later
            # cannot make the lease ours again.
            with anyio.move_on_after(max(0.01, self._deadline_mono - sent)):
                try:
                    answer = await self._renew()
                except StoreError as exc:
                    self.failures += 1
                    self.observer.renewal(self.job, False)
                    log.warning(
                        "lease renewal failed; retrying until the deadline",
                        extra={"job": self.job, "fence": self.fence, "error": str(exc)},
                    )
                    next_renewal = min(next_renewal, sent + max(0.05, interval_s / 4))
            if answer is not None and not self.answered(answer, sent, victim, lost_flag):
                return

    async def _renew(self, *, starting: bool = False) -> Renewal:
        request = RenewRequest(
            self.fence,
            int(self.ttl_s * 1000),
            owner=str(self.owner) if self.owner is not None else None,
            tick_s=self.tick_s,
            starting=starting,
            trigger_id=self.trigger_id,
            history=self.history,
        )
        return await self.store.renew_lease(self.job, request)

    def answered(
        self,
        answer: Renewal,
        sent: float,
        victim: Cancellable,
        lost_flag: Flag | None,
    ) -> bool:
        """Take a renewal's answer (sent at ``sent``); return whether the lease is still held."""
        self.observer.renewal(self.job, answer in (Renewal.RENEWED, Renewal.REASSERTED))
        if answer in (Renewal.RENEWED, Renewal.REASSERTED):
            if answer is Renewal.REASSERTED:
                log.warning(
                    "lease re-asserted: the store had lost it with the job's data while the run "
                    "went on",
                    extra={"job": self.job, "fence": self.fence, "tick": self.tick_s},
                )
            self.renewals += 1
            self.slowest_renewal_s = max(self.slowest_renewal_s, self.clock.monotonic() - sent)
            self._deadline_mono = sent + self.ttl_s * (1 - SAFETY_MARGIN)
            self.expiry_mono = self.clock.monotonic() + self.ttl_s
            return True
        if answer is Renewal.GONE:
            self._lose("lease expired or was released under us", victim, lost_flag)
        else:
            self._lose("lease was taken by a newer fence", victim, lost_flag)
        return False

    async def renew_now(
        self,
        victim: Cancellable,
        lost_flag: Flag | None,
        *,
        starting: bool = False,
    ) -> bool:
        """Renew once, now (after a wipe, or as a held run starts); whether it is still held.

        Raises:
            StoreError: the store did not answer (the lease is unchanged).
        """
        if self.lost:
            return False
        sent = self.clock.monotonic()
        return self.answered(await self._renew(starting=starting), sent, victim, lost_flag)

    def _lose(self, reason: str, victim: Cancellable, lost_flag: Flag | None) -> None:
        self.lost_reason = reason
        if lost_flag is not None:
            lost_flag.set()
        log.warning(
            "lease lost; cancelling the run",
            extra={"job": self.job, "fence": self.fence, "reason": reason},
        )
        victim.cancel()


#: Dropped leases the keeper's heap may hold before it is compacted (when they are most).
COMPACT_AT = 1000


@dataclass(slots=True, eq=False)
class HeldLease:
    """A running handler's lease, as :class:`Renewals` keeps it."""

    lease: Lease
    victim: Cancellable
    lost_flag: Flag | None
    #: Its place in the keeper's heap (the order it was held in).
    order: int = 0
    done: bool = False
    #: In the keeper's heap, waiting for its first renewal to be due.
    queued: bool = True
    #: Set once its renewal task is started: that task's scope, and its end.
    renewing: anyio.CancelScope | None = None
    stopped: anyio.Event | None = None


class Renewals:
    """Start each running handler's lease renewal (:meth:`Lease.keep`) when it is first due.

    Most runs end long before a third of their ``lease_ttl``: they never get a renewal
    task, whose start and cancellation cost more than the rest of a short run's
    bookkeeping. One keeper task, alive while leases are held, sleeps until the earliest
    first renewal and starts ``Lease.keep`` for each run still going then. The lease's
    deadline is unchanged: the renewal starts before it (a third of the ttl, the deadline
    is at 90%), and a handler that blocked the loop past it is caught by
    :meth:`Lease.check_deadline` when it returns, as before.
    """

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        #: Where the keeper and the renewal tasks run: the agent's run group.
        self.task_group: TaskGroup | None = None
        # The heap holds (due, order) alone and the leases waiting for their first renewal
        # are looked up by order: a run that ended before it leaves nothing behind but a
        # pair of numbers (untracked by the GC) until the keeper pops it or a compaction
        # drops it. Held in the heap, each would keep its lease, victim and flag alive
        # that long, 10 s under the default lease_ttl: at a thousand runs a second, all
        # of them promoted to the GC's oldest generation, to be walked at every collection.
        self._heap: list[tuple[float, int]] = []
        self._queued: dict[int, HeldLease] = {}
        self._order = itertools.count()
        self._dropped = 0  # entries in the heap whose run ended before their first renewal
        self._keeper = False
        self._nap: anyio.CancelScope | None = None
        self._nap_until = math.inf
        #: Every lease held for a running handler (renewed or not yet): the ones to
        #: re-assert when Redis lost its data.
        self._live: set[HeldLease] = set()

    def hold(self, lease: Lease, victim: Cancellable, lost_flag: Flag | None) -> HeldLease:
        """Renew ``lease`` from its first renewal until :meth:`drop`; if lost, cancel ``victim``."""
        order = next(self._order)
        held = HeldLease(lease, victim, lost_flag, order)
        self._live.add(held)
        due = lease.first_renewal_mono
        heapq.heappush(self._heap, (due, order))
        self._queued[order] = held
        if not self._keeper:
            assert self.task_group is not None, "Renewals.task_group is set by Runner.start"
            self._keeper = True
            self.task_group.start_soon(self._keep, name="cronrace lease renewals")
        elif self._nap is not None and due < self._nap_until:
            self._nap.cancel()  # the keeper sleeps past this one's first renewal
        return held

    def drop_now(self, held: HeldLease) -> None:
        """Stop renewing ``held`` without waiting for its renewal task to end."""
        if held.done:
            return
        held.done = True
        self._live.discard(held)
        if held.renewing is not None:
            held.renewing.cancel()
        elif held.queued:
            # Still in the heap until its first renewal was due: with a long lease_ttl and
            # frequent runs, dropped entries would pile up there. Compact now and then.
            del self._queued[held.order]
            self._dropped += 1
            if self._dropped > COMPACT_AT and self._dropped * 2 > len(self._heap):
                queued = self._queued
                self._heap = [entry for entry in self._heap if entry[1] in queued]
                heapq.heapify(self._heap)
                self._dropped = 0

    async def drop(self, held: HeldLease) -> None:
        """Stop renewing ``held``; return once its renewal task (if any) has ended."""
        self.drop_now(held)
        if held.stopped is not None:
            await held.stopped.wait()

    async def reassert(self) -> bool:
        """Renew every held lease now: after a wipe, each one Redis lost is written back.

        Returns whether every one was answered (re-asserted, renewed, or found lost, which
        cancels its run). Leases held while it runs are renewed too, so none started before
        it returns is left out.
        """
        done: set[HeldLease] = set()
        answered = True
        while pending := [held for held in self._live if held not in done]:
            for held in pending:
                done.add(held)
                try:
                    await held.lease.renew_now(held.victim, held.lost_flag)
                except StoreError as exc:
                    answered = False
                    log.warning(
                        "could not re-assert a lease after the wipe",
                        extra={"job": held.lease.job, "fence": held.lease.fence, "error": str(exc)},
                    )
        return answered

    async def _keep(self) -> None:
        try:
            while self._heap:
                due, order = self._heap[0]
                held = self._queued.get(order)
                if held is None:  # dropped before its first renewal was due
                    heapq.heappop(self._heap)
                    self._dropped -= 1
                    continue
                now = self.clock.monotonic()
                if now < due:
                    with anyio.CancelScope() as nap:
                        self._nap, self._nap_until = nap, due
                        await self.clock.sleep(due - now)
                    self._nap, self._nap_until = None, math.inf
                    continue
                heapq.heappop(self._heap)
                del self._queued[order]
                held.queued = False
                scope, stopped = anyio.CancelScope(), anyio.Event()
                held.renewing, held.stopped = scope, stopped
                assert self.task_group is not None
                self.task_group.start_soon(
                    self._renew, held, scope, stopped, name="cronrace lease renewal"
                )
        finally:
            self._keeper = False

    @staticmethod
    async def _renew(held: HeldLease, scope: anyio.CancelScope, stopped: anyio.Event) -> None:
        try:
            with scope:
                await held.lease.keep(held.victim, held.lost_flag)
        finally:
            stopped.set()
