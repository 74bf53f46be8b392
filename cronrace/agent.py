"""The agent: the job registry and its lifecycle.

``Agent.run()`` owns every task it starts (anyio task groups): the heartbeat
(:mod:`cronrace.heartbeat`: server clock offset, the node set, the Redis epoch), the outbox
writer (records Redis could not take yet), the control reader (:mod:`cronrace.control`:
manual triggers), the tick loop, and the runs. Its operator methods (pause, trigger,
history, status) delegate to an :class:`~cronrace.operator.OperatorClient` sharing its
store, which the CLI uses on its own.

Stopping (the first :meth:`Agent.stop`, or SIGTERM) starts no new wake-up, but a wake-up
whose claims were sent decides its ticks and starts their runs; the runs then get
``shutdown_grace_s``, and are cancelled after it (they record ``cancelled`` and release
their leases). A second stop (or signal), or cancelling ``run()``, cuts all of that short:
every tick won but not yet decided or started is still recorded, and a lease granted to
a run that never started is released.
"""

from __future__ import annotations

import contextlib
import logging
import signal
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import anyio
from anyio.abc import TaskStatus

from cronrace.clock import Clock, ServerOffsetClock, SystemClock
from cronrace.config import AgentSettings, load_settings, redact_url
from cronrace.control import ControlReader
from cronrace.errors import (
    JobDefinitionError,
    RedisAccessError,
    RedisDataError,
    RedisUnavailableError,
    StoreError,
)
from cronrace.fleetdefs import FleetDefinitions, JobDefinition, NodeDetails, job_definition
from cronrace.heartbeat import Heartbeat
from cronrace.job import Handler, Job, validate_job_name
from cronrace.logs import configure_logging
from cronrace.membership import Membership
from cronrace.observer import Observer
from cronrace.operator import OperatorClient
from cronrace.outbox import Outbox
from cronrace.policies import Catchup, Overlap
from cronrace.racers import Racers
from cronrace.readiness import Readiness
from cronrace.records import JobStatus, NodeInfo, RunRecord
from cronrace.retry import Retry, backoff_s
from cronrace.runner import CLEANUP_TIMEOUT_S, Runner
from cronrace.scheduler import Scheduler
from cronrace.schedules import ScheduleSync, TargetFactory
from cronrace.store import Owner, Store
from cronrace.watchdog import LoopWatchdog

log = logging.getLogger("cronrace.agent")

F = TypeVar("F", bound=Callable[..., Any])


class Agent:
    """Fire recurring jobs exactly once per tick across every agent of a namespace.

    Args:
        redis_url: where the fleet meets; default from ``CRONRACE_REDIS_URL``, else the
            embedded in-process store ``memory://`` (one process only).
        node_id: this node's name in claims, leases and logs; default host-pid-random.
        namespace: the key prefix; fleets with different namespaces ignore each other.
        settings: complete settings (instead of the three above and the environment).
        clock: the base clock (tests pass a skewed or fake one).
        observer: receives events, e.g. ``cronrace.metrics.PrometheusObserver``.
    """

    def __init__(
        self,
        *,
        redis_url: str | None = None,
        node_id: str | None = None,
        namespace: str | None = None,
        settings: AgentSettings | None = None,
        clock: Clock | None = None,
        observer: Observer | None = None,
    ) -> None:
        self.settings = settings or load_settings(
            redis_url=redis_url, node_id=node_id, namespace=namespace
        )
        base = clock if clock is not None else SystemClock()
        self.clock: Clock = ServerOffsetClock(base) if self.settings.clock == "redis" else base
        self.observer = observer or Observer()
        self.owner = Owner.new(self.settings.node_id)
        self._jobs: dict[str, Job] = {}
        self._handlers: dict[str, Handler] = {}
        self._store: Store | None = None
        self._stop_requested = False
        self._stop_event: anyio.Event | None = None
        self._forced = False
        self._force_scopes: list[anyio.CancelScope] = []
        self.watchdog = LoopWatchdog(threshold_s=self.settings.loop_lag_threshold_s)
        #: Ready or not, and why (``/readyz``).
        self.readiness = Readiness(self.node_id, self.observer, self.watchdog, self._refusal)
        #: The racers' view of the fleet, read with every heartbeat (membership.py).
        self.membership = Membership(
            self.settings.node_id, Racers.parse(self.settings.racers), self.settings.heartbeat_s
        )
        #: The heartbeat: clock samples, the epoch, and the fleet's live membership.
        self.heartbeat = Heartbeat(
            node_id=self.node_id,
            heartbeat_s=self.settings.heartbeat_s,
            clock=self.clock,
            observer=self.observer,
            readiness=self.readiness,
            jobs=self._jobs,
            membership=self.membership,
        )
        #: The operator API on this agent's store (what the CLI uses without an agent).
        self.operator = OperatorClient(
            self.settings,
            store=lambda: self.store,
            clock=self.clock,
            jobs=self._jobs,
            handlers=self._handlers,
            next_tick=self._next_tick,
        )
        #: Stored schedules: ``await agent.schedules.add(...)`` and the rest.
        self.schedules = self.operator.schedules
        self.scheduler: Scheduler | None = None
        self.runner: Runner | None = None
        self._services: list[Callable[[], Coroutine[Any, Any, None]]] = []
        #: Builds the handler of a stored schedule's target table (set by the sidecar).
        self.target_factory: TargetFactory | None = None
        self.sync: ScheduleSync | None = None
        self.fleet: FleetDefinitions | None = None
        self._definitions: dict[str, JobDefinition] = {}

    # -- defining jobs -------------------------------------------------------------------

    @property
    def node_id(self) -> str:
        return self.settings.node_id

    @property
    def jobs(self) -> dict[str, Job]:
        """The jobs defined on this agent, by name."""
        return dict(self._jobs)

    def job(
        self,
        schedule: str,
        *,
        name: str | None = None,
        timezone: str = "UTC",
        overlap: Overlap | str = Overlap.SKIP,
        catchup: Catchup | str = Catchup.LATEST,
        lease_ttl: float = 30.0,
        catchup_window: float = 300.0,
        max_catchup: int = 100,
        history: int = 1000,
        overrun_ratio: float = 0.8,
    ) -> Callable[[F], F]:
        """Register the decorated function as a job; see :meth:`add_job` for the arguments."""

        def register(handler: F) -> F:
            self.add_job(
                handler,
                schedule,
                name=name,
                timezone=timezone,
                overlap=overlap,
                catchup=catchup,
                lease_ttl=lease_ttl,
                catchup_window=catchup_window,
                max_catchup=max_catchup,
                history=history,
                overrun_ratio=overrun_ratio,
            )
            return handler

        return register

    def add_job(self, handler: Handler, schedule: str, **options: Any) -> Job:
        """Register ``handler`` to run on ``schedule``.

        Args:
            handler: an async function (or a sync one, run in a worker thread) taking a
                :class:`~cronrace.RunContext`.
            schedule: 5-field cron, 6-field cron with seconds first, an alias such as
                ``@hourly``, or ``@every 30s``.
            **options: name, timezone, overlap, catchup, lease_ttl (s), catchup_window (s),
                max_catchup, history, overrun_ratio.

        Raises:
            JobDefinitionError: a field is invalid or the name is taken.
            ScheduleError: the schedule or time zone is invalid.
        """
        job = Job.define(handler, schedule, **options)
        if job.name in self._jobs:
            raise JobDefinitionError(f"job {job.name!r}: name {job.name!r} is already defined")
        self._jobs[job.name] = job
        return job

    def handler(self, name: str) -> Callable[[F], F]:
        """Register the decorated function as the handler stored schedules call ``name``."""

        def register(handler: F) -> F:
            self.add_handler(name, handler)
            return handler

        return register

    def add_handler(self, name: str, handler: Handler) -> None:
        """Register ``handler`` under ``name``: stored schedules naming it run it here.

        Raises:
            JobDefinitionError: the name is invalid or taken, or the handler not callable.
        """
        validate_job_name(name)
        if not callable(handler):
            raise JobDefinitionError(f"handler {name!r}: {handler!r} is not callable")
        if name in self._handlers:
            raise JobDefinitionError(f"handler {name!r}: name {name!r} is already registered")
        self._handlers[name] = handler

    @property
    def handlers(self) -> dict[str, Handler]:
        """The handlers stored schedules may name on this agent, by name."""
        return dict(self._handlers)

    def add_service(self, service: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Run ``service()`` in the agent's event loop while it runs (from connection on).

        Services run beside the heartbeat and are cancelled when the agent stops (after
        its runs); the metrics and the status page use this to read Redis in the loop.
        """
        self._services.append(service)

    # -- readiness and the store -----------------------------------------------------------

    @property
    def ready(self) -> bool:
        """Whether Redis answered the last heartbeat, the scripts are loaded, and Redis
        refuses none of the commands this agent sends."""
        return self.readiness.ready

    def readiness_problem(self) -> str | None:
        """Why this agent is not ready (one line), or None when it is (``/readyz``).

        Safe to call from any thread (the metrics server's).
        """
        return self.readiness.problem()

    def liveness_problem(self) -> str | None:
        """Why this agent is not alive (one line), or None when it is (``/healthz``).

        Alive means its event loop answers: a handler that blocks the loop (``time.sleep``
        in an ``async def``) stops claims and renewals, and only a restart helps. Safe to
        call from any thread (the metrics server's).
        """
        return self.watchdog.problem()

    def _refusal(self) -> str | None:
        return self._store.access.problem() if self._store is not None else None

    @property
    def store(self) -> Store:
        """The Redis access of this agent (created on first use)."""
        if self._store is None:
            if self.settings.redis_url.startswith("memory://"):
                log.warning(
                    "using the embedded in-process store: it serves this process only; "
                    "set CRONRACE_REDIS_URL to share ticks across a fleet"
                )
            self._store = Store.from_url(
                self.settings.redis_url,
                self.settings.namespace,
                max_connections=self.settings.max_connections,
                timeout_s=self.settings.redis_timeout_s,
            )
            self._store.access.on_refused = self.readiness.refused
            self._store.access.on_allowed = self.readiness.allowed
        return self._store

    def hold_s(self) -> float:
        """Seconds new runs must still wait after Redis was found to have lost its data."""
        return self.heartbeat.hold_s()

    def _next_tick(self, job: str) -> int | None:
        return self.scheduler.next_tick.get(job) if self.scheduler is not None else None

    # -- lifecycle -----------------------------------------------------------------------

    def stop(self) -> None:
        """Ask :meth:`run` to stop: the first call gracefully, a second one at once.

        The first call starts no new wake-up; a wake-up whose claims were sent still
        decides its ticks and starts their runs, which then get ``shutdown_grace_s``. A
        second call cancels whatever is left (still recording every won tick).
        """
        if self._stop_requested:
            self._forced = True
            for scope in self._force_scopes:
                scope.cancel()
            return
        self._stop_requested = True
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
            RedisUnavailableError: Redis could not be reached within the start-up timeout.
        """
        self._stop_event = anyio.Event()
        if self._stop_requested:
            self._stop_event.set()
        store = self.store
        self.readiness.running = True
        self.heartbeat.left = False
        outbox = Outbox(store, self.clock, retry_delay_s=backoff_s, observer=self.observer)
        runner = self._prepare(store, outbox)
        control = ControlReader(
            store=store,
            clock=self.clock,
            observer=self.observer,
            node_id=self.node_id,
            redis_timeout_s=self.settings.redis_timeout_s,
        )
        try:
            await self._connect(store, control)
            scheduler = self._start_scheduler(store, runner, outbox)
            async with anyio.create_task_group() as services:
                services.start_soon(self.heartbeat.run, store, self._after_beat)
                for service in self._services:
                    services.start_soon(self._run_service, service)
                services.start_soon(self._watch_loop)
                services.start_soon(outbox.run)
                task_status.started()
                await self._lifecycle(scheduler, runner, control)
                services.cancel_scope.cancel()
        finally:
            await self._shut_down(store, runner, outbox)

    def _prepare(self, store: Store, outbox: Outbox) -> Runner:
        """Build what a run needs before connecting: the stored schedules, the runner."""
        self.sync = ScheduleSync(
            store, self.node_id, self._handlers, self._jobs, self.target_factory
        )
        self.fleet = FleetDefinitions(store, self.node_id, self.observer)
        self._definitions = {name: job_definition(job) for name, job in self._jobs.items()}
        self.runner = Runner(
            store=store,
            clock=self.clock,
            node_id=self.node_id,
            owner=self.owner,
            observer=self.observer,
            outbox=outbox,
            hold_s=self.hold_s,
            sync_threads=self.settings.sync_handler_threads,
        )
        return self.runner

    def _start_scheduler(self, store: Store, runner: Runner, outbox: Outbox) -> Scheduler:
        assert self.sync is not None
        self.scheduler = Scheduler(
            jobs={**self._jobs, **self.sync.jobs},
            store=store,
            clock=self.clock,
            settings=self.settings,
            owner=self.owner,
            runner=runner,
            outbox=outbox,
            observer=self.observer,
            set_ready=self.readiness.set_reachable,
            membership=self.membership,
        )
        self.sync.attach(self.scheduler)
        log.info(
            "agent started",
            extra={"node": self.node_id, "jobs": len(self._jobs), "namespace": self.namespace},
        )
        return self.scheduler

    async def _shut_down(self, store: Store, runner: Runner, outbox: Outbox) -> None:
        """Release what never started, flush the outbox, leave the node set, close."""
        with anyio.CancelScope(shield=True), anyio.move_on_after(CLEANUP_TIMEOUT_S):
            # Only a forced stop leaves runs granted but never started.
            await runner.release_unstarted()
            await outbox.flush()
        outbox.give_up("Redis did not take it before the agent exited")
        with (
            anyio.CancelScope(shield=True),
            anyio.move_on_after(2),
            contextlib.suppress(StoreError),
        ):
            await store.leave(self.node_id)
        with anyio.CancelScope(shield=True), anyio.move_on_after(2):
            await self.aclose()
        self.readiness.stopped()
        log.info("agent stopped", extra={"node": self.node_id})

    @property
    def namespace(self) -> str:
        return self.settings.namespace

    async def _lifecycle(
        self, scheduler: Scheduler, runner: Runner, control: ControlReader
    ) -> None:
        """Run the loops until a stop, finish the wake-up in hand, then the runs' grace.

        ``shutdown_grace_s`` bounds both: a wake-up still deciding when it is over (its
        acquire retried while Redis is away) is cut short like a forced stop.
        """
        assert self._stop_event is not None
        async with anyio.create_task_group() as runs:
            self._force_scopes.append(runs.cancel_scope)
            async with anyio.create_task_group() as loops:
                self._force_scopes.append(loops.cancel_scope)
                if self._forced:
                    runs.cancel_scope.cancel()
                loops.start_soon(scheduler.run, runs)
                loops.start_soon(control.run, scheduler, self.sync, runs)
                await self._stop_event.wait()
                grace_over = anyio.current_time() + self.settings.shutdown_grace_s
                log.info(
                    "stopping: no new wake-ups; deciding the one in hand",
                    extra={"node": self.node_id},
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
                await self.heartbeat.leave(scheduler.store)
            log.info(
                "stopping: no new claims; waiting for runs",
                extra={
                    "node": self.node_id,
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
        where = redact_url(self.settings.redis_url)
        with anyio.move_on_after(self.settings.startup_timeout_s) as scope:
            while True:
                try:
                    await store.load_scripts()
                    await control.check()
                    await self.heartbeat.beat(store)
                    await store.register_jobs({n: job.spec() for n, job in self._jobs.items()})
                    if self.sync is not None:
                        await self.sync.reload("start-up")
                    return
                except RedisAccessError:
                    raise
                except RedisDataError as exc:  # a failover passes (unavailable); this not
                    raise RedisUnavailableError(f"Redis at {where} refused: {exc}") from exc
                except RedisUnavailableError as exc:
                    last_error = str(exc) or type(exc).__name__
                    log.warning("Redis not reachable yet", extra={"error": last_error})
                    await retry.wait()
        if scope.cancelled_caught:
            raise RedisUnavailableError(
                f"Redis at {where} unreachable for {self.settings.startup_timeout_s:g}s at "
                f"start-up; last error: {last_error}"
            )

    async def _after_beat(self, reconnected: bool) -> None:
        """Publish what this node runs, compare with the fleet, follow stored schedules."""
        if self.sync is None or self.fleet is None:
            return
        details = NodeDetails(
            self.node_id,
            self._definitions,
            tuple(sorted(self._handlers)),
            self.target_factory is not None,
            dict(self.sync.refused),
            self.settings.racers,
        )
        version: int | None = None
        try:
            version = await self.fleet.exchange(details, int(self.clock.time() * 1000))
            self.membership.alike(self.fleet.fingerprints)
        except RedisDataError as exc:  # garbage under a fleet key: ticks must not care
            log.error("fleet definitions exchange failed", extra={"error": str(exc)})
        if reconnected:
            await self.sync.reload("reconnected")
        else:
            await self.sync.check_version(version)

    async def _run_service(self, service: Callable[[], Coroutine[Any, Any, None]]) -> None:
        try:
            await service()
        except Exception:  # the outermost frame of a service: the agent and its jobs go on
            log.exception("service failed", extra={"service": getattr(service, "__name__", "?")})

    async def _watch_loop(self) -> None:
        """Run the event-loop watchdog that ``/healthz`` reads."""
        self.observer.loop_watched(self.watchdog.lag_s)
        self.watchdog.on_stall = self.observer.loop_stalled
        await self.watchdog.run()

    def run_sync(self) -> None:
        """Run until SIGTERM or SIGINT; a second signal stops at once, as a second :meth:`stop`.

        Logs go to stderr (``log_format``, ``log_level``) unless the program configured
        logging itself: a script that only calls ``run_sync()`` still shows its ticks.

        Raises:
            RedisUnavailableError: Redis could not be reached within the start-up timeout.
        """
        if not logging.getLogger().handlers and not logging.getLogger("cronrace").handlers:
            configure_logging(self.settings.log_format, self.settings.log_level)
        try:
            anyio.run(self._run_with_signals)
        except BaseExceptionGroup as group:
            # The signal watcher's task group wraps what run() raised; callers (the CLI)
            # expect the error itself, e.g. RedisUnavailableError, not a group of one.
            if len(group.exceptions) == 1:
                raise group.exceptions[0] from None
            raise

    async def _run_with_signals(self) -> None:
        async with anyio.create_task_group() as tg:
            await tg.start(self._watch_signals)
            await self.run()
            tg.cancel_scope.cancel()

    async def _watch_signals(self, *, task_status: TaskStatus[None]) -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            task_status.started()
            async for signum in signals:
                name = signal.Signals(signum).name
                if self._stop_requested:
                    log.warning(
                        "second signal: cancelling now; won ticks are still recorded",
                        extra={"signal": name},
                    )
                else:
                    log.info("signal received; shutting down gracefully", extra={"signal": name})
                self.stop()

    # -- operator controls (delegated to the operator client) -------------------------------

    async def pause(self, job: str) -> None:
        """Pause ``job`` on every node: its ticks are recorded ``skipped:paused``."""
        await self.operator.pause(job)

    async def resume(self, job: str) -> None:
        """Resume a paused job on every node."""
        await self.operator.resume(job)

    async def trigger(self, job: str) -> str:
        """Ask the fleet for one immediate run of ``job``; see :meth:`OperatorClient.trigger`."""
        return await self.operator.trigger(job)

    async def trigger_claimant(self, job: str, trigger_id: str) -> str | None:
        """Return the node that claimed a manual trigger, or None while none has."""
        return await self.operator.trigger_claimant(job, trigger_id)

    async def history(self, job: str, limit: int = 20) -> list[RunRecord]:
        """Return the newest ``limit`` run records of ``job``, newest tick first."""
        return await self.operator.history(job, limit)

    async def nodes(self) -> list[NodeInfo]:
        """Return the live nodes of this namespace."""
        return await self.operator.nodes()

    async def jobs_status(self) -> list[JobStatus]:
        """Describe every job of the namespace; see :meth:`OperatorClient.jobs_status`."""
        return await self.operator.jobs_status()

    async def fleet_details(self) -> list[NodeDetails]:
        """What every live node publishes: job digests, handlers, refused stored schedules."""
        return await self.operator.fleet_details()

    async def aclose(self) -> None:
        """Close the Redis connections (for operator use outside :meth:`run`)."""
        if self._store is not None:
            await self._store.aclose()
            self._store = None
