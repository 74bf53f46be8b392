"""Running a decided tick: the handler, its lease, its record, its release.

A run is started as a task in the agent's run group; the scheduler never awaits it. One
task may run several ticks in a row under one lease: a queued tick handed on by
``end_run.lua`` (queue-one) or the next tick of a catch-up backlog (catch-up ``all``),
each with its own new fence.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import anyio
import anyio.lowlevel
from anyio.abc import TaskGroup

from cronrace.errors import StoreError, error_text
from cronrace.model.job import FencedWriter, Job, RunContext
from cronrace.model.policies import Outcome, Overlap
from cronrace.model.records import RunRecord
from cronrace.protocol import Release
from cronrace.runtime import tracing
from cronrace.runtime.clock import Clock
from cronrace.runtime.observer import Observer
from cronrace.stores.contract import Store
from cronrace.stores.values import Owner
from cronrace.tick.cancel import HandlerCancel
from cronrace.tick.lease import Lease, Renewals
from cronrace.tick.outbox import Outbox
from cronrace.tick.releases import Releases
from cronrace.tick.tasks import RunTasks
from cronrace.tick.unrun import Grant, UnrunRuns

log = logging.getLogger("cronrace.run")

#: How long shielded clean-up (the last record, the release) may take at shutdown.
CLEANUP_TIMEOUT_S = 5.0
#: How often a run held after a wipe looks whether the hold may end early.
HOLD_POLL_S = 0.05
#: How long before its hold ends a held run confirms its lease (at most a 20th of the
#: lease_ttl: an older run that has not re-asserted by then is past its own deadline).
HOLD_CONFIRM_EARLY_S = 0.1


class Runner(UnrunRuns):
    """Runs handlers for one agent and keeps count of the runs alive."""

    def __init__(
        self,
        *,
        store: Store,
        clock: Clock,
        node_id: str,
        owner: Owner,
        observer: Observer,
        outbox: Outbox,
        hold_s: Callable[[], float],
        hold_released: Callable[[float], bool] = lambda _granted_mono: False,
        sync_threads: int = 2,
    ) -> None:
        self.store = store
        self.clock = clock
        self.node_id = node_id
        self.owner = owner
        self.observer = observer
        self.outbox = outbox
        self._hold_s = hold_s
        # Asked once: a runtime protocol check costs more than the rest of a run's context.
        self._fenced_writer = store if isinstance(store, FencedWriter) else None
        self._hold_released = hold_released
        self._job_hold_until_mono: dict[str, float] = {}
        self.active = 0
        self._idle: anyio.Event | None = None
        self._unstarted: set[Grant] = set()
        self.releases = Releases(store, clock, owner, outbox)
        self.renewals = Renewals(clock)
        self.tasks = RunTasks()
        self.last_ratio: dict[str, float] = {}
        # Busy sync handlers hold the GIL in turns with the event loop, which then waits a
        # switch interval (5 ms) at every wake-up. Measured per loop wake-up with N
        # CPU-bound threads: N=1 p50 5.5 ms; N=2 max 20 ms; N=4 max 36 ms; N=8 p50 48 ms,
        # max 190 ms, and 0.6 s leases were lost. The slowest renewal of a 2 s lease with
        # 8 busy jobs: 428 ms at 2 threads, 784 ms (and losses) at 4. Default: 2 threads.
        self._threads = anyio.CapacityLimiter(sync_threads)

    def hold_job(self, job: str, hold_s: float) -> None:
        """Make new runs of ``job`` wait ``hold_s`` before their handler starts.

        A grant tells how long (``hold_ms``) when Redis lost the job's data: runs started
        before may still be alive for up to one lease_ttl.
        """
        until = self.clock.monotonic() + hold_s
        if until > self._job_hold_until_mono.get(job, 0.0):
            self._job_hold_until_mono[job] = until

    def _job_hold_s(self, job: str) -> float:
        until = self._job_hold_until_mono.get(job)
        if until is None:  # the common case: no hold of this job (asked by every run)
            return self._hold_s()
        return max(self._hold_s(), until - self.clock.monotonic())

    @property
    def sync_handlers_running(self) -> int:
        """How many sync handlers are running in worker threads right now."""
        return int(self._threads.borrowed_tokens)

    async def wait_idle(self) -> None:
        """Return once no run is alive."""
        while self.active:
            if self._idle is None:
                self._idle = anyio.Event()
            await self._idle.wait()

    def admit(
        self,
        job: Job,
        ticks: list[int],
        fence: int,
        granted_mono: float,
        trigger_id: str | None = None,
        fences: list[int] | None = None,
    ) -> Grant:
        """Register a granted run before its task starts (see :class:`Grant`).

        ``fences``: under ``allow``, one per tick (each runs apart, with no lease)."""
        grant = Grant(job, ticks, fence, granted_mono, trigger_id, fences or [])
        self._unstarted.add(grant)
        return grant

    def start(self, grant: Grant, runs: TaskGroup) -> None:
        """Start the grant's run as a task owned by ``runs`` (tick/tasks.py); its lease
        renewals start there too."""
        self.renewals.task_group = runs
        self.tasks.start(self.run_sequence(grant), f"cronrace run {grant.job.name}", runs)

    async def run_sequence(self, grant: Grant) -> None:
        """Run the grant's ticks in order, the first with its fence; hand-ons extend them."""
        if grant not in self._unstarted:
            return  # a forced stop got to it first: released and recorded as never started
        self._unstarted.discard(grant)
        self.active += 1
        # One coroutine for the whole sequence (each run in flight holds every frame of
        # its await chain until its release is answered, for the GC to walk); ``ticks``
        # is the grant's own list, taken from the front (a catch-up has at most
        # max_catchup of them).
        job, ticks, trigger_id = grant.job, grant.ticks, grant.trigger_id
        leased = job.overlap is not Overlap.ALLOW
        try:
            lease = Lease(
                self.store,
                self.clock,
                job.name,
                grant.fence,
                job.lease_ttl_s,
                grant.granted_mono,
                observer=self.observer,
                owner=self.owner,
            )
            backlog, done = len(ticks), 0
            try:
                while ticks:
                    tick_s = ticks.pop(0)
                    if backlog > 1:
                        # A catch-up of many ticks can take long: say how far it is.
                        done += 1
                        log.info(
                            "catch-up progress",
                            extra={"job": job.name, "tick": tick_s, "run": done, "of": backlog},
                        )
                    record = await self._run_once(job, tick_s, lease, trigger_id, renew=leased)
                    go_on, trigger_id = await self._after_run(
                        job, record, lease, ticks, grant.fences, leased=leased
                    )
                    if not go_on:
                        return
            except anyio.get_cancelled_exc_class():
                self._keep_unrun(job, ticks)
                raise
        except Exception:  # the outermost frame of a run: log it, keep the agent alive
            log.exception(
                "unexpected error around a run",
                extra={"job": job.name, "ticks_left": ticks, "fence": grant.fence},
            )
        finally:
            self.active -= 1
            if not self.active and self._idle is not None:
                self._idle.set()
                self._idle = None

    async def _after_run(
        self,
        job: Job,
        record: RunRecord,
        lease: Lease,
        ticks: list[int],
        fences: list[int],
        *,
        leased: bool,
    ) -> tuple[bool, str | None]:
        """Record a run, release or hand on its lease.

        Returns:
            Whether the sequence goes on, and the trigger id of its next run (a queued
            trigger handed on by the release runs as that trigger).
        """
        if not leased:
            # allow: no lease; each tick was granted its own fence by the decision.
            await self.outbox.write([record], history=job.history)
            if ticks:
                if fences:
                    fences.pop(0)
                if not fences:
                    self._keep_unrun(job, ticks)
                    return False, None
                lease.rebase(fences[0], self.clock.monotonic())
            return True, None
        if lease.lost:
            # Ended once the lease has surely run out, never before: a sync handler's
            # thread may still be running. Its record then says how it ended, unless a
            # decision met the lapsed lease first and recorded the run abandoned (or a
            # replace recorded it lease_lost): one result either way.
            await self.clock.sleep(max(0.0, lease.expiry_mono - self.clock.monotonic()))
            await self.releases.finish(
                job,
                record,
                lease.fence,
                until_mono=self.clock.monotonic() + lease.ttl_s,
                hand_on=False,
            )
            return False, None
        sent = self.clock.monotonic()
        reply = await self.releases.finish(job, record, lease.fence, until_mono=lease.expiry_mono)
        if reply is None or reply.decision is not Release.HANDED_ON:
            if reply is not None and reply.decision is Release.NOT_OWNER:
                log.warning(
                    "release refused: the lease had moved on",
                    extra={"job": job.name, "tick": record.tick_s, "fence": lease.fence},
                )
            return False, None
        if reply.hold_ms:
            self.hold_job(job.name, reply.hold_ms / 1000)
        lease.rebase(reply.fence, sent)
        if not ticks or ticks[0] != reply.tick_s:
            ticks.insert(0, reply.tick_s)
            return True, reply.trigger_id  # a queued trigger runs as that trigger
        return True, None

    async def _run_once(
        self, job: Job, tick_s: int, lease: Lease, trigger_id: str | None, *, renew: bool
    ) -> RunRecord:
        fence = lease.fence
        lease.tick_s = tick_s
        ctx = RunContext(
            job=job.name,
            tick_s=tick_s,
            fence=fence,
            node_id=self.node_id,
            trigger_id=trigger_id,
            _store=self._fenced_writer,
        )
        now_s = self.clock.time()  # the shared clock, as _now_ms reads it
        started_ms = int(now_s * 1000)
        lag_s = now_s - tick_s
        if log.isEnabledFor(logging.INFO):  # its fields cost more than the check, every run
            log.info(
                "run started",
                extra={
                    "job": job.name,
                    "tick": tick_s,
                    "node": self.node_id,
                    "fence": fence,
                    "lag_ms": round(lag_s * 1000, 1),
                    "trigger": trigger_id,
                },
            )
        self.observer.run_started(job.name, lag_s)
        with tracing.run_span(job.name, tick_s, fence, self.node_id, lag_s, trigger_id) as span:
            try:
                outcome, error, detail, held_ms = await self._handle(job, ctx, lease, renew=renew)
            except anyio.get_cancelled_exc_class():
                ctx._lost.set()
                span.ended(Outcome.CANCELLED, "agent shut down", lease.renewals)
                record = self._make_record(
                    job, ctx, Outcome.CANCELLED, started_ms, "agent shut down", None
                )
                with anyio.CancelScope(shield=True), anyio.move_on_after(CLEANUP_TIMEOUT_S):
                    if renew and not lease.lost:
                        await self.releases.finish(
                            job, record, lease.fence, until_mono=lease.expiry_mono, hand_on=False
                        )
                    else:
                        await self.outbox.write([record], history=job.history)
                raise
            span.ended(outcome, error, lease.renewals)
        if lease.renewals:
            log.debug(
                "lease renewals",
                extra={
                    "job": job.name,
                    "fence": fence,
                    "renewals": lease.renewals,
                    "slowest_ms": round(lease.slowest_renewal_s * 1000, 1),
                },
            )
        # A held run started when its hold ended: the hold is no part of its duration
        # (it would read as an overrun).
        return self._make_record(job, ctx, outcome, started_ms + held_ms, error, detail)

    async def _handle(
        self, job: Job, ctx: RunContext, lease: Lease, *, renew: bool
    ) -> tuple[Outcome, str | None, Any, int]:
        """Call the handler under its lease (renewed beside it once due).

        Returns the outcome, the error, the detail, and how long (ms) the run was held
        before its handler started (Redis lost the job's data).
        """
        outcome, error, detail, held_ms = Outcome.OK, None, None, 0
        # A lost lease cancels what runs under it as an anyio scope would (tick/cancel.py).
        handler_scope = HandlerCancel()
        held = self.renewals.hold(lease, handler_scope, ctx._lost) if renew else None
        called = False
        try:
            with handler_scope:
                hold_s = self._job_hold_s(job.name)
                if hold_s > 0:
                    log.warning(
                        "holding a new run: Redis lost its data, older runs may be alive",
                        extra={"job": job.name, "tick": ctx.tick_s, "hold_s": round(hold_s, 1)},
                    )
                    held_from_ms = self._now_ms()
                    until = self.clock.monotonic() + hold_s
                    # The renewal that confirms the lease is sent a moment before the hold
                    # ends, so that its round trip does not make the run later still.
                    early_s = min(HOLD_CONFIRM_EARLY_S, lease.ttl_s / 20) if renew else 0.0
                    await self._wait_hold(lease, hold_s - early_s)
                    if renew:  # whether an older run took the lease back meanwhile
                        await self._confirm_after_hold(lease, handler_scope, ctx)
                        await self._wait_hold(lease, until - self.clock.monotonic(), say=False)
                    held_ms = self._now_ms() - held_from_ms
                if not lease.lost:  # a lost lease cancelled this scope: never call then
                    called = True
                    try:
                        detail = await self._call(job, ctx)
                    except Exception as exc:  # noqa: BLE001 - the handler's failure is the run's outcome
                        outcome, error = Outcome.ERROR, error_text(exc)
        except BaseException:
            if held is not None:
                self.renewals.drop_now(held)
            raise
        if held is not None:
            self.renewals.drop_now(held)
            if held.stopped is not None:  # its renewal task had started: wait for its verdict
                await held.stopped.wait()
        # Looked at once the renewal task has stopped, so that its verdict is in; and
        # whatever the handler did: a handler that blocked the event loop past the
        # deadline, or a paused process that resumed, ran without a lease.
        if renew and lease.check_deadline():
            ctx._lost.set()
            outcome, error = Outcome.LEASE_LOST, lease.lost_reason
            if not called:
                # Held after a wipe, it never started: a run alive since before the wipe
                # re-asserted its lease (the overlap policy's skip), or the hold outlived
                # the lease's deadline.
                outcome = Outcome.SKIPPED_OVERLAP
                error = f"never started after the wipe hold: {lease.lost_reason}"
        return outcome, error, detail, held_ms

    async def _wait_hold(self, lease: Lease, hold_s: float, *, say: bool = True) -> None:
        """Wait out a wipe hold, or until every live node re-asserted its runs' leases."""
        until = self.clock.monotonic() + hold_s
        while (left := until - self.clock.monotonic()) > 0:
            if self._hold_released(lease.granted_mono):
                if not say:
                    return
                log.info(
                    "wipe hold ended early: every live node re-asserted its runs' leases",
                    extra={"job": lease.job, "fence": lease.fence, "left_s": round(left, 2)},
                )
                return
            await self.clock.sleep(min(left, HOLD_POLL_S))

    async def _confirm_after_hold(
        self, lease: Lease, victim: HandlerCancel, ctx: RunContext
    ) -> None:
        """Renew a held run's lease as it starts; lose it (cancelling ``victim``) if taken.

        A run alive since before the wipe that re-asserted its lease during the hold took
        it from this unstarted grant (renew_lease.lua). Retried until the lease's deadline when
        the store does not answer; past it the lease counts as lost.
        """
        while not lease.check_deadline():
            try:
                await lease.renew_now(victim, ctx._lost, starting=True)
                return
            except StoreError as exc:
                log.warning(
                    "held run could not confirm its lease; retrying",
                    extra={"job": lease.job, "fence": lease.fence, "error": str(exc)},
                )
                await self.clock.sleep(HOLD_POLL_S)
        victim.cancel()

    def _make_record(
        self,
        job: Job,
        ctx: RunContext,
        outcome: Outcome,
        started_ms: int,
        error: str | None,
        detail: Any,
    ) -> RunRecord:
        finished_ms = self._now_ms()
        duration_s = (finished_ms - started_ms) / 1000
        interval_s = job.schedule.interval_s(ctx.tick_s)
        ratio = duration_s / interval_s if interval_s > 0 else 0.0
        self.last_ratio[job.name] = ratio
        level = logging.INFO if outcome is Outcome.OK else logging.WARNING
        if log.isEnabledFor(level):
            fields = {
                "job": job.name,
                "tick": ctx.tick_s,
                "node": self.node_id,
                "fence": ctx.fence,
                "outcome": outcome.value,
                "duration_ms": round(duration_s * 1000, 1),
            }
            log.log(level, "run finished", extra={**fields, "error": error} if error else fields)
        if job.overrun_ratio and ratio > job.overrun_ratio:
            log.warning(
                "run is overrunning its schedule",
                extra={
                    "job": job.name,
                    "duration_s": round(duration_s, 3),
                    "interval_s": interval_s,
                    "ratio": round(ratio, 2),
                    "threshold": job.overrun_ratio,
                },
            )
        self.observer.run_finished(job.name, outcome, duration_s, ratio)
        if detail is not None and not isinstance(detail, str | int | float | bool | dict | list):
            detail = str(detail)
        return RunRecord(
            job=job.name,
            tick_s=ctx.tick_s,
            node=self.node_id,
            outcome=outcome,
            fence=ctx.fence,
            started_ms=started_ms,
            finished_ms=finished_ms,
            error=error,
            trigger_id=ctx.trigger_id,
            detail=detail,
        )

    async def _call(self, job: Job, ctx: RunContext) -> Any:
        if job.is_async:
            return await job.handler(ctx)
        # A thread cannot be cancelled: on lease loss the handler is abandoned (it can
        # poll ctx.lease_lost) and the run is recorded without waiting for it.
        return await anyio.to_thread.run_sync(
            job.handler, ctx, abandon_on_cancel=True, limiter=self._threads
        )
