"""Running a decided tick: the handler, its lease, its record, its release.

A run is started as a task in the agent's run group; the scheduler never awaits it. One
task may run several ticks in a row under one lease: a queued tick handed on by
``release.lua`` (queue-one) or the next tick of a catch-up backlog (catch-up ``all``),
each with its own new fence.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import anyio
from redis.exceptions import RedisError

from cronrace.clock import Clock
from cronrace.errors import CronraceError
from cronrace.job import Job, RunContext
from cronrace.lease import Lease
from cronrace.observer import Observer
from cronrace.policies import Outcome, Overlap
from cronrace.records import RunRecord
from cronrace.store import AcquireReply, AcquireRequest, ReleaseReply, Store

log = logging.getLogger("cronrace.run")

#: How long shielded clean-up (the last record, the release) may take at shutdown.
CLEANUP_TIMEOUT_S = 5.0


def _now_ms() -> int:
    return int(time.time() * 1000)


def _error_text(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= 2000 else text[:1997] + "..."


class Runner:
    """Runs handlers for one agent and keeps count of the runs alive."""

    def __init__(
        self,
        *,
        store: Store,
        clock: Clock,
        node_id: str,
        owner: str,
        observer: Observer,
        hold_s: Callable[[], float],
        sync_threads: int = 2,
    ) -> None:
        self.store = store
        self.clock = clock
        self.node_id = node_id
        self.owner = owner
        self.observer = observer
        self._hold_s = hold_s
        self._job_hold_until_mono: dict[str, float] = {}
        self.active = 0
        self._idle: anyio.Event | None = None
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
        return max(self._hold_s(), self._job_hold_until_mono.get(job, 0.0) - self.clock.monotonic())

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

    async def run_sequence(
        self, job: Job, ticks: list[int], fence: int, granted_mono: float, trigger_id: str | None
    ) -> None:
        """Run ``ticks`` in order, the first with ``fence``; hand-ons extend the queue."""
        self.active += 1
        try:
            await self._sequence(job, deque(ticks), fence, granted_mono, trigger_id)
        except Exception:  # the outermost frame of a run: log it, keep the agent alive
            log.exception(
                "unexpected error around a run",
                extra={"job": job.name, "ticks": ticks, "fence": fence},
            )
        finally:
            self.active -= 1
            if not self.active and self._idle is not None:
                self._idle.set()
                self._idle = None

    async def _sequence(
        self,
        job: Job,
        ticks: deque[int],
        fence: int,
        granted_mono: float,
        trigger_id: str | None,
    ) -> None:
        leased = job.overlap is not Overlap.ALLOW
        lease = Lease(
            self.store,
            self.clock,
            job.name,
            fence,
            job.lease_ttl_s,
            granted_mono,
            observer=self.observer,
        )
        backlog, done = len(ticks), 0
        while ticks:
            tick_s = ticks.popleft()
            if backlog > 1:
                # A catch-up of many ticks can take long: say how far it is.
                done += 1
                log.info(
                    "catch-up progress",
                    extra={"job": job.name, "tick": tick_s, "run": done, "of": backlog},
                )
            record = await self._run_once(job, tick_s, lease, trigger_id, renew=leased)
            trigger_id = None
            if not leased:
                await self._record(job, record)
                if ticks:
                    next_fence = await self._fence_for_allowed_run(job, ticks[0])
                    if next_fence is None:
                        return
                    lease.rebase(next_fence, self.clock.monotonic())
                continue
            if lease.lost:
                await self._record(job, record)
                return
            next_tick = ticks[0] if ticks else 0
            sent = self.clock.monotonic()
            reply = await self._finish(job, record, lease.fence, next_tick)
            if reply is None or reply.decision != "run":
                if reply is not None and reply.decision == "not_owner":
                    log.warning(
                        "release refused: the lease had moved on",
                        extra={"job": job.name, "tick": tick_s, "fence": lease.fence},
                    )
                return
            if reply.hold_ms:
                self.hold_job(job.name, reply.hold_ms / 1000)
            lease.rebase(reply.fence, sent)
            if not ticks or ticks[0] != reply.tick_s:
                ticks.appendleft(reply.tick_s)
                trigger_id = reply.trigger_id  # a queued trigger runs as that trigger

    async def _finish(
        self, job: Job, record: RunRecord, fence: int, next_tick_s: int
    ) -> ReleaseReply | None:
        """Record the run and release its lease, retrying through a passing Redis error.

        Without the retry one stale pooled connection (Redis just restarted) would leave
        the lease to expire by itself and block the job for a whole ``lease_ttl``. A retry
        is safe: the release compares the fence, and writes the record only with it.
        """
        attempt = 0
        with anyio.CancelScope(shield=True), anyio.move_on_after(CLEANUP_TIMEOUT_S):
            while True:
                try:
                    return await self.store.finish(
                        record,
                        history=job.history,
                        release_fence=fence,
                        owner=self.owner,
                        lease_ttl_ms=job.lease_ttl_ms,
                        continue_tick_s=next_tick_s,
                        retried=attempt > 0,
                    )
                except (RedisError, OSError, CronraceError) as exc:
                    attempt += 1
                    log.warning(
                        "could not record or release a run; retrying",
                        extra={
                            "job": job.name,
                            "tick": record.tick_s,
                            "fence": fence,
                            "attempt": attempt,
                            "error": str(exc),
                        },
                    )
                    await anyio.sleep(min(1.0, 0.05 * 2**attempt))
        log.error(
            "gave up recording and releasing a run; the lease will expire by itself",
            extra={"job": job.name, "tick": record.tick_s, "fence": fence},
        )
        return None

    async def _fence_for_allowed_run(self, job: Job, tick_s: int) -> int | None:
        request = AcquireRequest(
            job=job.name,
            decide_tick_s=tick_s,
            mark_tick_s=tick_s,
            run_tick_s=tick_s,
            owner=self.owner,
            lease_ttl_ms=job.lease_ttl_ms,
            overlap=job.overlap.value,
            mode="trigger",
        )
        try:
            (reply,) = await self.store.acquire([request])
        except (RedisError, OSError, CronraceError) as exc:
            log.error("catch-up stopped: Redis failed", extra={"job": job.name, "error": str(exc)})
            return None
        if isinstance(reply, AcquireReply) and reply.decision == "run":
            return reply.fence
        return None

    async def _record(self, job: Job, record: RunRecord) -> None:
        with anyio.CancelScope(shield=True), anyio.move_on_after(CLEANUP_TIMEOUT_S):
            try:
                await self.store.record([record], history=job.history)
            except (RedisError, OSError) as exc:
                log.error(
                    "could not write a run record", extra={"job": job.name, "error": str(exc)}
                )

    async def _run_once(
        self, job: Job, tick_s: int, lease: Lease, trigger_id: str | None, *, renew: bool
    ) -> RunRecord:
        fence = lease.fence
        ctx = RunContext(
            job=job.name,
            tick_s=tick_s,
            fence=fence,
            node_id=self.node_id,
            trigger_id=trigger_id,
            _store=self.store,
        )
        outcome, error, detail = Outcome.OK, None, None
        started_ms = _now_ms()
        lag_s = self.clock.time() - tick_s
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
        try:
            async with anyio.create_task_group() as tg:
                handler_scope = anyio.CancelScope()
                if renew:
                    tg.start_soon(lease.keep, handler_scope)
                with handler_scope:
                    hold_s = self._job_hold_s(job.name)
                    if hold_s > 0:
                        log.warning(
                            "holding a new run: Redis lost its data, older runs may be alive",
                            extra={"job": job.name, "tick": tick_s, "hold_s": round(hold_s, 1)},
                        )
                        await self.clock.sleep(hold_s)
                    try:
                        detail = await self._call(job, ctx)
                    except Exception as exc:  # noqa: BLE001 - the handler's failure is the run's outcome
                        outcome, error = Outcome.ERROR, _error_text(exc)
                if lease.lost:
                    # Also when the handler returned: it finished after the lease was gone
                    # (a paused process resumes and runs on until its next checkpoint).
                    ctx._lost.set()
                    outcome, error = Outcome.LEASE_LOST, lease.lost_reason
                tg.cancel_scope.cancel()
        except anyio.get_cancelled_exc_class():
            ctx._lost.set()
            record = self._make_record(
                job, ctx, Outcome.CANCELLED, started_ms, "agent shut down", None
            )
            if renew and not lease.lost:
                await self._finish(job, record, lease.fence, 0)
            else:
                await self._record(job, record)
            raise
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
        return self._make_record(job, ctx, outcome, started_ms, error, detail)

    def _make_record(
        self,
        job: Job,
        ctx: RunContext,
        outcome: Outcome,
        started_ms: int,
        error: str | None,
        detail: Any,
    ) -> RunRecord:
        finished_ms = _now_ms()
        duration_s = (finished_ms - started_ms) / 1000
        interval_s = job.schedule.interval_s(ctx.tick_s)
        ratio = duration_s / interval_s if interval_s > 0 else 0.0
        self.last_ratio[job.name] = ratio
        fields = {
            "job": job.name,
            "tick": ctx.tick_s,
            "node": self.node_id,
            "fence": ctx.fence,
            "outcome": outcome.value,
            "duration_ms": round(duration_s * 1000, 1),
        }
        level = logging.INFO if outcome is Outcome.OK else logging.WARNING
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
        self.observer.run_finished(job.name, outcome.value, duration_s, ratio)
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
