"""An agent's lifecycle: connect, run the loops, stop gracefully or at once, shut down.

:meth:`Lifecycle.run` owns every task it starts (anyio task groups): the heartbeat
(:mod:`cronrace.fleet.heartbeat`), the outbox writer (records the store could not take yet), the
agent's services, the loop watchdog, the control reader (:mod:`cronrace.agent.control`), the tick
loop, and the runs.

Stopping (the first :meth:`Lifecycle.stop`, or SIGTERM, :mod:`cronrace.agent.hosting`)
starts no new wake-up, but a wake-up whose claims were sent decides its ticks and starts
their runs; the node leaves the live set at once, and the runs then get
``shutdown_grace_s`` and are cancelled after it (they record ``cancelled`` and release
their leases). A second stop (or signal), or
cancelling ``run()``, cuts all of that short: every tick won but not yet decided or
started is still recorded, and a lease granted to a run that never started is released.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Protocol

import anyio
from anyio.abc import TaskStatus

from cronrace.agent.control import ControlReader
from cronrace.agent.schedule_sync import ScheduleSync
from cronrace.errors import RedisAccessError, RedisDataError, RedisUnavailableError, StoreError
from cronrace.fleet.definitions import FleetDefinitions, JobDefinition, NodeDetails, job_definition
from cronrace.runtime.clock import SystemClock
from cronrace.runtime.retry import Retry
from cronrace.settings import redact_url
from cronrace.stores.contract import FailoverFollower, Store
from cronrace.tick.loop import Scheduler
from cronrace.tick.outbox import Outbox
from cronrace.tick.runner import CLEANUP_TIMEOUT_S, Runner

if TYPE_CHECKING:
    from collections.abc import Mapping

    from cronrace.fleet.heartbeat import Heartbeat
    from cronrace.fleet.membership import Membership
    from cronrace.model.job import Handler, Job
    from cronrace.operate.schedules import TargetFactory
    from cronrace.runtime.clock import Clock
    from cronrace.runtime.observer import Observer
    from cronrace.runtime.readiness import Readiness
    from cronrace.runtime.watchdog import LoopWatchdog
    from cronrace.settings import AgentSettings
    from cronrace.stores.values import FleetReply, FleetRequest, Owner

log = logging.getLogger("cronrace.agent.core")


class AgentParts(Protocol):
    """What a :class:`Lifecycle` runs: the parts an :class:`~cronrace.Agent` is made of.

    A protocol rather than the agent itself, so that the lifecycle depends on the parts and
    the agent on the lifecycle, never both ways; attributes rather than a frozen snapshot,
    because some are set after the agent is built (the sidecar's ``target_factory``, the
    observer ``cronrace run --metrics-address`` puts in).
    """

    settings: AgentSettings
    clock: Clock
    owner: Owner
    heartbeat: Heartbeat
    readiness: Readiness
    membership: Membership
    watchdog: LoopWatchdog
    target_factory: TargetFactory | None

    @property
    def node_id(self) -> str: ...

    @property
    def observer(self) -> Observer: ...

    @property
    def store(self) -> Store: ...

    @property
    def jobs(self) -> Mapping[str, Job]: ...

    @property
    def handlers(self) -> Mapping[str, Handler]: ...

    @property
    def services(self) -> tuple[Callable[[], Coroutine[Any, Any, None]], ...]: ...

    def hold_s(self) -> float: ...

    async def aclose(self) -> None: ...


class Lifecycle:
    """Runs one agent: what :meth:`Agent.run` and :meth:`Agent.stop` do (``async with
    agent`` and ``run_sync`` run it through :mod:`cronrace.agent.hosting`).

    While it runs it holds the parts of the run (the scheduler, the runner, the stored
    schedules' sync, the fleet's definitions) that metrics and tests read through the agent.
    """

    def __init__(self, agent: AgentParts) -> None:
        self.agent = agent
        self.stop_requested = False
        self.forced = False
        self._stop_event: anyio.Event | None = None
        self._force_scopes: list[anyio.CancelScope] = []
        self.scheduler: Scheduler | None = None
        self.runner: Runner | None = None
        self.sync: ScheduleSync | None = None
        self.fleet: FleetDefinitions | None = None
        self._alike_live: frozenset[str] | None = None
        self._definitions: dict[str, JobDefinition] = {}
        self._details: NodeDetails | None = None
        #: Whether a heartbeat put this node in the live set (else it has none to leave).
        self._joined = False

    def stop(self) -> None:
        """Ask :meth:`run` to stop: the first call gracefully, a second one at once.

        The first call starts no new wake-up; a wake-up whose claims were sent still
        decides its ticks and starts their runs, which then get ``shutdown_grace_s``. A
        second call cancels whatever is left (still recording every won tick).
        """
        if self.stop_requested:
            self.forced = True
            for scope in self._force_scopes:
                scope.cancel()
            return
        self.stop_requested = True
        if self._stop_event is not None:
            self._stop_event.set()

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Run until :meth:`stop` is called or the task is cancelled.

        Start it with ``await task_group.start(agent.run)`` to wait until it is ready: the
        scripts are loaded, the first heartbeat is taken, the jobs are published, and a
        manual trigger made from then on is seen.

        Args:
            task_status: anyio's ``TaskGroup.start`` protocol; ``started()`` is called once
                the agent is connected and its loops are about to start.

        Raises:
            StoreUnavailableError: the store could not be reached within the start-up timeout.
        """
        self._stop_event = anyio.Event()
        self._joined = False
        if self.stop_requested:
            self._stop_event.set()
        store = self.agent.store
        self.agent.readiness.running = True
        self.agent.heartbeat.left = False
        outbox = Outbox(store, self.agent.clock, observer=self.agent.observer)
        runner = self._prepare(store, outbox)
        control = ControlReader(
            store=store,
            clock=self.agent.clock,
            observer=self.agent.observer,
            node_id=self.agent.node_id,
            redis_timeout_s=self.agent.settings.redis_timeout_s,
        )
        try:
            await self._connect(store, control)
            scheduler = self._start_scheduler(store, runner, outbox)
            await self._exchange_at_start()
            async with anyio.create_task_group() as services:
                services.start_soon(
                    self.agent.heartbeat.run, store, self._after_beat, self._fleet_request
                )
                for service in self.agent.services:
                    services.start_soon(self._run_service, service)
                services.start_soon(self._watch_loop)
                services.start_soon(outbox.run)
                # Sentinel's announcements of a new primary, followed at once.
                if isinstance(store, FailoverFollower):
                    services.start_soon(store.follow_failovers)
                task_status.started()
                await self._loops(scheduler, runner, control)
                services.cancel_scope.cancel()
        finally:
            await self._shut_down(store, runner, outbox)

    def _prepare(self, store: Store, outbox: Outbox) -> Runner:
        """Build what a run needs before connecting: the stored schedules, the runner."""
        self.sync = ScheduleSync(
            store,
            self.agent.node_id,
            self.agent.handlers,
            self.agent.jobs,
            self.agent.target_factory,
        )
        self.fleet = FleetDefinitions(store, self.agent.node_id, self.agent.observer)
        self._definitions = {name: job_definition(job) for name, job in self.agent.jobs.items()}
        self._details = None
        self.runner = Runner(
            store=store,
            clock=self.agent.clock,
            node_id=self.agent.node_id,
            owner=self.agent.owner,
            observer=self.agent.observer,
            outbox=outbox,
            hold_s=self.agent.hold_s,
            hold_released=self.agent.heartbeat.hold_released,
            sync_threads=self.agent.settings.sync_handler_threads,
        )
        # After a wipe the heartbeat re-asserts the leases of this node's runs.
        self.agent.heartbeat.reassert = self.runner.renewals.reassert
        return self.runner

    def _start_scheduler(self, store: Store, runner: Runner, outbox: Outbox) -> Scheduler:
        assert self.sync is not None
        self.scheduler = Scheduler(
            jobs={**self.agent.jobs, **self.sync.jobs},
            store=store,
            clock=self.agent.clock,
            settings=self.agent.settings,
            owner=self.agent.owner,
            runner=runner,
            outbox=outbox,
            observer=self.agent.observer,
            set_ready=self.agent.readiness.set_reachable,
            membership=self.agent.membership,
        )
        self.sync.attach(self.scheduler)
        # The watchdog wakes at least once a second anyway: it looks at the clock for the
        # loop, which then sleeps until its next tick instead of turning every second.
        self.agent.watchdog.on_wake = self.scheduler.watch_clock()
        log.info(
            "agent started",
            extra={
                "node": self.agent.node_id,
                "jobs": len(self.agent.jobs),
                "namespace": self.agent.settings.namespace,
            },
        )
        return self.scheduler

    async def _shut_down(self, store: Store, runner: Runner, outbox: Outbox) -> None:
        """Release what never started, flush the outbox, leave the node set, close."""
        with anyio.CancelScope(shield=True), anyio.move_on_after(CLEANUP_TIMEOUT_S):
            # Only a forced stop leaves runs granted but never started.
            await runner.release_unstarted()
            await outbox.flush()
        outbox.give_up("the store did not take it before the agent exited")
        if self._joined:  # a node that never reached the store has no entry to take back
            with (
                anyio.CancelScope(shield=True),
                anyio.move_on_after(2),
                contextlib.suppress(StoreError),
            ):
                await store.leave(self.agent.node_id)
        with anyio.CancelScope(shield=True), anyio.move_on_after(2):
            await self.agent.aclose()
        self.agent.readiness.stopped()
        log.info("agent stopped", extra={"node": self.agent.node_id})

    async def _loops(self, scheduler: Scheduler, runner: Runner, control: ControlReader) -> None:
        """Run the loops until a stop, finish the wake-up in hand, then the runs' grace.

        ``shutdown_grace_s`` bounds both: a wake-up still deciding when it is over (its
        acquire retried while the store is away) is cut short like a forced stop.
        """
        assert self._stop_event is not None
        async with anyio.create_task_group() as runs:
            self._force_scopes.append(runs.cancel_scope)
            async with anyio.create_task_group() as loops:
                self._force_scopes.append(loops.cancel_scope)
                if self.forced:
                    runs.cancel_scope.cancel()
                loops.start_soon(scheduler.run, runs)
                loops.start_soon(control.run, scheduler, self.sync, runs)
                await self._stop_event.wait()
                grace_over = anyio.current_time() + self.agent.settings.shutdown_grace_s
                log.info(
                    "stopping: no new wake-ups; deciding the one in hand",
                    extra={"node": self.agent.node_id},
                )
                loops.cancel_scope.deadline = grace_over
                scheduler.stop()
            # No claim comes from this node any more: leave the live set now rather than
            # after the runs' grace (racers = k: its ticks go to the others at once).
            with (
                anyio.CancelScope(shield=True),
                anyio.move_on_after(2),
                contextlib.suppress(StoreError),
            ):
                await self.agent.heartbeat.leave(scheduler.store)
            log.info(
                "stopping: no new claims; waiting for runs",
                extra={
                    "node": self.agent.node_id,
                    "running": runner.active,
                    "grace_s": round(max(0.0, grace_over - anyio.current_time()), 3),
                },
            )
            with anyio.move_on_after(max(0.0, grace_over - anyio.current_time())):
                await runner.wait_idle()
            runs.cancel_scope.cancel()
        self._force_scopes.clear()

    async def _connect(self, store: Store, control: ControlReader) -> None:
        """Load the scripts, take the first heartbeat and publish the jobs; or give up.

        A refusal (wrong password, a missing ACL permission, a certificate that does not
        verify) fails at once: retrying cannot fix it. Anything else is retried until
        ``startup_timeout_s``, and the error then names the last cause.
        """
        # Real time, as the start-up timeout is: a fake clock must not stretch either.
        retry = Retry(SystemClock())
        last_error = "no answer"
        where = redact_url(self.agent.settings.store_url)
        server = self.agent.readiness.server
        with anyio.move_on_after(self.agent.settings.startup_timeout_s) as scope:
            while True:
                try:
                    await store.prepare()
                    await control.check()
                    await self.agent.heartbeat.beat(store)
                    self._joined = True
                    await store.register_jobs({n: job.spec() for n, job in self.agent.jobs.items()})
                    if self.sync is not None:
                        await self.sync.reload("start-up")
                    return
                except RedisAccessError:
                    raise
                except RedisDataError as exc:  # a failover passes (unavailable); this not
                    raise RedisUnavailableError(f"{server} at {where} refused: {exc}") from exc
                except RedisUnavailableError as exc:
                    last_error = str(exc) or type(exc).__name__
                    log.warning(f"{server} not reachable yet", extra={"error": last_error})
                    await retry.wait()
        if scope.cancelled_caught:
            raise RedisUnavailableError(
                f"{server} at {where} unreachable for "
                f"{self.agent.settings.startup_timeout_s:g}s at start-up; last error: {last_error}"
            )

    async def _exchange_at_start(self) -> None:
        """Publish what this node runs and read what the others do, before its first tick.

        Racers are placed among the members alike to this node (membership.py): until it
        has read them, a node races every job, and the next exchange rides with the
        heartbeat a period later. A node of a fleet with 10,000 jobs would claim every
        job's ticks for that period after each start. Failing, it waits for that beat.
        """
        if self.sync is None or self.fleet is None:
            return
        membership = self.agent.membership
        now_ms, live = int(self.agent.clock.time() * 1000), membership.live
        try:
            await self.fleet.exchange(self._details_now(self.sync), now_ms, live)
        except StoreError as exc:
            log.warning("fleet definitions not read at start", extra={"error": str(exc)})
            return
        self._alike_live = live
        membership.alike(self.fleet.fingerprints, now_ms)

    def _fleet_request(self) -> FleetRequest | None:
        """What this node publishes, sent with the next heartbeat (one round trip for both)."""
        if self.sync is None or self.fleet is None:
            return None
        return self.fleet.request(self._details_now(self.sync))

    async def _after_beat(self, reconnected: bool, exchanged: FleetReply | None) -> None:
        """Compare what this node runs with the fleet, follow stored schedules."""
        if self.sync is None or self.fleet is None:
            return
        version: int | None = None
        try:
            now_ms = int(self.agent.clock.time() * 1000)
            membership = self.agent.membership
            live = membership.live
            # None: garbage made the exchange fail with the beat (the store logged it).
            if exchanged is not None:
                version = await self.fleet.absorb(exchanged, now_ms, live)
            if self.fleet.changed or live is not self._alike_live:
                self._alike_live = live
                membership.alike(self.fleet.fingerprints, now_ms)
        except RedisDataError as exc:  # garbage under a fleet key: ticks must not care
            log.error("fleet definitions exchange failed", extra={"error": str(exc)})
        # The beat's read and its exchange are in: the ring changes now, once (held by
        # the heartbeat, membership.py), not after the stored schedules' round trips.
        self.agent.membership.settle()
        if reconnected:
            await self.sync.reload("reconnected")
        else:
            await self.sync.check_version(version)

    def _details_now(self, sync: ScheduleSync) -> NodeDetails:
        """What this node publishes: the same object while none of it changed, so that the
        exchange reuses its fingerprint (O(jobs) to compute) rather than hashing every
        job's definition at every heartbeat."""
        handlers = tuple(sorted(self.agent.handlers))
        targets = self.agent.target_factory is not None
        racers = str(self.agent.settings.racer_setting)
        last = self._details
        if (
            last is None
            or last.handlers != handlers
            or last.targets != targets
            or last.refused != sync.refused
            or last.racers != racers
        ):
            last = self._details = NodeDetails(
                self.agent.node_id, self._definitions, handlers, targets, dict(sync.refused), racers
            )
        return last

    async def _run_service(self, service: Callable[[], Coroutine[Any, Any, None]]) -> None:
        try:
            await service()
        except Exception:  # the outermost frame of a service: the agent and its jobs go on
            log.exception("service failed", extra={"service": getattr(service, "__name__", "?")})

    async def _watch_loop(self) -> None:
        """Run the event-loop watchdog that ``/healthz`` reads."""
        self.agent.observer.loop_watched(self.agent.watchdog.lag_s)
        self.agent.watchdog.on_stall = self.agent.observer.loop_stalled
        await self.agent.watchdog.run()
