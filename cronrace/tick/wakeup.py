"""One wake-up of the tick loop, and stopping without losing what it won.

A wake-up sends its claims, decides the ticks it won (``acquire.lua``) and starts their
runs. Once the claims are sent, the ticks it wins are its alone: no other node will claim
them again. So:

- a graceful stop (the first SIGTERM) must not cut a wake-up short: :class:`StopGate`
  lets it interrupt the loops' *waits* only, and the wake-up in hand completes;
- a forced stop (a second SIGTERM, a second ``stop()``, ``run()`` cancelled, the grace
  over) may cut it short, and then :func:`account_for_cut_wakeup` finds out what it had
  won (reading the claims back, and the leases) and records each such tick as not run,
  releasing a lease granted for a run that never started. Never silence.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import anyio

from cronrace.errors import StoreError
from cronrace.model.policies import Outcome
from cronrace.model.records import RunRecord
from cronrace.runtime.clock import Clock
from cronrace.stores.contract import Store
from cronrace.stores.values import Claim, Owner
from cronrace.tick.decisions import Proposal, acquire_request, decide
from cronrace.tick.outbox import Outbox
from cronrace.tick.runner import Runner

log = logging.getLogger("cronrace.tick.loop")

#: How long a wake-up cut short by a forced stop may spend finding out what it had won.
ABORT_TIMEOUT_S = 2.0
#: A clock that moved by more than this against the monotonic one since the loop began to
#: nap (the wall clock stepped, a new estimate of the server's offset) ends the nap.
CLOCK_MOVED_S = 0.005


class Nap:
    """The tick loop's sleep between wake-ups, ended early by :meth:`wake` (a tick added,
    a membership change) or by a clock that moved (:meth:`check_clock`)."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._scope: anyio.CancelScope | None = None
        self._drift_s = 0.0

    async def sleep(self, seconds: float) -> None:
        """Sleep ``seconds`` on the clock, or until woken: one cancel scope, no task beside."""
        with anyio.CancelScope() as scope:
            self._scope = scope
            self._drift_s = self.clock.time() - self.clock.monotonic()
            try:
                await self.clock.sleep(seconds)
            finally:
                self._scope = None

    def wake(self) -> None:
        """End the nap now (if the loop naps)."""
        if self._scope is not None:
            self._scope.cancel()

    def check_clock(self) -> None:
        """End the nap if the wall clock moved against the monotonic one since it began.

        Two clock reads: a task that wakes anyway (the event-loop watchdog, about once a
        second) calls it, so the loop sleeps until its next tick rather than turning
        every second to look at the clock.
        """
        if self._scope is None:
            return
        moved_s = self.clock.time() - self.clock.monotonic() - self._drift_s
        if abs(moved_s) > CLOCK_MOVED_S:
            self._scope.cancel()


@dataclass(slots=True)
class WakeUp:
    """How far one wake-up got: what a forced stop must account for.

    Attributes:
        plans: what it raced for, one per job.
        claims: the claims it sent (or was about to send).
        winners: the plans whose claims it won, once the claims were answered.
        decided: set once every decision is in hand and every run registered with the
            runner (from then on the runner accounts for them).
        records: decision records not yet written.
    """

    plans: Sequence[Proposal]
    claims: list[Claim]
    winners: list[Proposal] | None = None
    decided: bool = False
    records: list[RunRecord] = field(default_factory=list)


class StopGate:
    """Lets a graceful stop interrupt waiting, never a wake-up in hand.

    The loops wrap each wait (a sleep, a blocking read) in :meth:`waiting`; :meth:`stop`
    cancels those waits only, so a wake-up whose claims were sent always gets to decide
    its ticks and start their runs. Only cancelling the loop itself cuts one short.
    """

    def __init__(self) -> None:
        self.stopping = False
        self._waits: set[anyio.CancelScope] = set()

    @contextmanager
    def waiting(self) -> Iterator[None]:
        """Wrap a wait that a graceful stop may end (the wait then returns quietly)."""
        with anyio.CancelScope() as scope:
            if self.stopping:
                scope.cancel()
            self._waits.add(scope)
            try:
                yield
            finally:
                self._waits.discard(scope)

    def stop(self) -> None:
        """End every wait now and every wait to come."""
        self.stopping = True
        for scope in self._waits:
            scope.cancel()


async def account_for_cut_wakeup(
    wakeup: WakeUp,
    *,
    store: Store,
    runner: Runner,
    outbox: Outbox,
    owner: Owner,
    node_id: str,
    clock: Clock,
) -> None:
    """Record every tick a wake-up cut short had won and not decided; release its grants.

    Which claims it won is read back when their answer had not come; whether the acquire
    ran is read from the lease (ours, for that tick: release it, with a ``cancelled``
    record carrying its fence) and the watermark. When Redis does not answer, each tick
    that may have been won is logged at ERROR instead.
    """
    winners = wakeup.winners
    try:
        if winners is None:
            won = await store.read_claims(wakeup.claims, owner)
            winners = [d for d, ok in zip(wakeup.plans, won, strict=True) if ok]
        states = {
            state.job: state for state in await store.job_states([d.job.name for d in winners])
        }
    except StoreError as exc:
        for d in wakeup.plans if winners is None else winners:
            log.error(
                "stopped by force while deciding; the tick may have been won and will not "
                "run, and Redis cannot be told",
                extra={"job": d.job.name, "tick": d.plan.claim_tick_s, "error": str(exc)},
            )
        return
    now_ms = int(clock.time() * 1000)
    for d in winners:
        state = states[d.job.name]
        ticks = list(d.plan.fire_ticks_s) or [d.plan.claim_tick_s]
        lease = state.lease
        if lease is not None and lease.owner == owner and lease.tick_s == ticks[0]:
            # The acquire ran and granted a lease: release it with the record, so that it
            # does not block the job for lease_ttl.
            runner.admit(d.job, ticks, lease.fence, clock.monotonic(), d.trigger_id)
            continue
        ran = (state.watermark_s or 0) >= d.plan.mark_tick_s and d.trigger_id is None
        if (
            not ran
            and d.trigger_id is None
            and await _decide_unrun(
                d, wakeup, store=store, runner=runner, owner=owner, node_id=node_id, clock=clock
            )
        ):
            continue
        why = (
            "the agent was stopped by force while the tick was decided, and the decision "
            "was lost (skipped, queued or paused)"
            if ran
            else "the agent was stopped by force before the tick was decided; not run"
        )
        log.warning(why, extra={"job": d.job.name, "tick": d.plan.claim_tick_s, "node": node_id})
        wakeup.records.append(
            RunRecord(
                d.job.name,
                d.plan.claim_tick_s,
                node_id,
                Outcome.CANCELLED,
                finished_ms=now_ms,
                trigger_id=d.trigger_id,
                error=why,
            )
        )
    await runner.release_unstarted()
    await outbox.write(wakeup.records, history=max(d.job.history for d in wakeup.plans))


async def _decide_unrun(
    d: Proposal,
    wakeup: WakeUp,
    *,
    store: Store,
    runner: Runner,
    owner: Owner,
    node_id: str,
    clock: Clock,
) -> bool:
    """Decide a won, undecided tick now, as the wake-up would have, and run nothing.

    Left undecided, the claim stays this node's and the next decision of the job, seeing
    the watermark below the tick, counts it again (missed, or fired late): a ``cancelled``
    record beside that was a tick recorded twice (the scheduler model with racers = 2 found
    it). Decided here, its records are the decision's (a catch-up's ``missed`` count, a
    skip) and a granted run is released unstarted, recorded ``cancelled`` with its fence.
    Returns False when the store did not answer: the caller records the tick as before.
    """
    try:
        (reply,) = await store.acquire([acquire_request(d, owner)])
    except StoreError:
        return False
    if isinstance(reply, Exception):
        return False
    verdict = decide(d, reply, node_id=node_id, now_ms=int(clock.time() * 1000))
    wakeup.records += verdict.records
    granted = verdict.start or verdict.unrun
    if granted is not None:
        runner.admit(d.job, list(granted.ticks), granted.fence, clock.monotonic())
    log.warning(
        "the agent was stopped by force before the tick was decided; decided now, not run",
        extra={"job": d.job.name, "tick": d.plan.claim_tick_s, "node": node_id},
    )
    return True
