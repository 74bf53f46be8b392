"""The agent: the job registry, and the parts that run it.

An :class:`Agent` is what users define jobs on and run. It is made of one part per role:
:mod:`cronrace.agent.lifecycle` (connect, run the loops, stop, shut down; hosted by
:mod:`cronrace.agent.hosting` in a task of its own or as the process), the
:mod:`cronrace.fleet.heartbeat` (server clock samples, the epoch, the live members),
:mod:`cronrace.runtime.readiness` (``/readyz``), and an
:class:`~cronrace.operate.client.OperatorClient` on its store, to which its operator
methods (pause, trigger, history, status) delegate; the CLI uses that
client on its own, without an agent.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import Any, Self, TypeVar, Unpack

import anyio
from anyio.abc import TaskStatus

from cronrace.agent import hosting
from cronrace.agent.lifecycle import Lifecycle
from cronrace.agent.schedule_sync import ScheduleSync
from cronrace.errors import JobDefinitionError, warn_renamed
from cronrace.fleet.definitions import FleetDefinitions, NodeDetails
from cronrace.fleet.heartbeat import Heartbeat
from cronrace.fleet.membership import Membership
from cronrace.model.job import Handler, Job, JobOptions, validate_job_name
from cronrace.model.records import JobStatus, NodeInfo, RunRecord
from cronrace.operate.client import OperatorClient
from cronrace.operate.schedules import TargetFactory
from cronrace.runtime.clock import Clock, ServerOffsetClock, SystemClock
from cronrace.runtime.observer import Observer
from cronrace.runtime.readiness import Readiness
from cronrace.runtime.watchdog import LoopWatchdog
from cronrace.settings import AgentSettings, is_embedded, load_settings
from cronrace.stores.contract import Store
from cronrace.stores.urls import open_store, server_name
from cronrace.stores.values import Owner
from cronrace.tick.loop import Scheduler
from cronrace.tick.runner import Runner

log = logging.getLogger("cronrace.agent.core")

F = TypeVar("F", bound=Callable[..., Any])


class Agent:
    """Fire recurring jobs exactly once per tick across every agent of a namespace.

    Args:
        store_url: where the fleet meets: a Redis (``redis://``, ``rediss://``, Sentinel,
            Cluster) or PostgreSQL (``postgresql://``) URL; default from
            ``CRONRACE_STORE_URL``, else the embedded in-process store ``memory://`` (one
            process only).
        node_id: this node's name in claims, leases and logs; default host-pid-random.
        namespace: the fleet's name in the store; fleets with different namespaces ignore
            each other.
        settings: complete settings (instead of the three above and the environment).
        clock: the base clock (tests pass a skewed or fake one).
        observer: receives events, e.g. ``cronrace.web.metrics.PrometheusObserver``.
        redis_url: deprecated: the name ``store_url`` had before PostgreSQL (a
            :class:`~cronrace.CronraceDeprecationWarning`).
    """

    def __init__(
        self,
        *,
        store_url: str | None = None,
        node_id: str | None = None,
        namespace: str | None = None,
        settings: AgentSettings | None = None,
        clock: Clock | None = None,
        observer: Observer | None = None,
        redis_url: str | None = None,
    ) -> None:
        if redis_url is not None:
            warn_renamed("Agent(redis_url=...)", "Agent(store_url=...)")
            store_url = store_url if store_url is not None else redis_url
        self.settings = settings or load_settings(
            store_url=store_url, node_id=node_id, namespace=namespace
        )
        base = clock if clock is not None else SystemClock()
        self.clock: Clock = ServerOffsetClock(base) if self.settings.clock == "redis" else base
        self._observer = observer or Observer()
        self.owner = Owner.new(self.settings.node_id)
        self._jobs: dict[str, Job] = {}
        self._handlers: dict[str, Handler] = {}
        self._store: Store | None = None
        self.watchdog = LoopWatchdog(threshold_s=self.settings.loop_lag_threshold_s)
        #: Ready or not, and why (``/readyz``).
        self.readiness = Readiness(
            self.node_id,
            self.observer,
            self.watchdog,
            self._refusal,
            server=server_name(self.settings.store_url),
        )
        #: The racers' view of the fleet, read with every heartbeat (membership.py).
        self.membership = Membership(
            self.settings.node_id, self.settings.racer_setting, self.settings.heartbeat_s
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
        self._services: list[Callable[[], Coroutine[Any, Any, None]]] = []
        #: Builds the handler of a stored schedule's target table (set by the sidecar).
        self.target_factory: TargetFactory | None = None
        #: Connects, runs the loops, stops and shuts down (lifecycle.py).
        self.lifecycle = Lifecycle(self)
        self._running: AbstractAsyncContextManager[None] | None = None

    @property
    def observer(self) -> Observer:
        """Receives the agent's events (metrics plug in here)."""
        return self._observer

    @observer.setter
    def observer(self, observer: Observer) -> None:
        # Replaced after construction by `cronrace run --metrics-address`: every part
        # that reports must see the new one.
        self._observer = observer
        self.readiness.observer = observer
        self.heartbeat.observer = observer

    # -- defining jobs -------------------------------------------------------------------

    @property
    def node_id(self) -> str:
        return self.settings.node_id

    @property
    def jobs(self) -> dict[str, Job]:
        """The jobs defined on this agent, by name."""
        return dict(self._jobs)

    def job(self, schedule: str, **options: Unpack[JobOptions]) -> Callable[[F], F]:
        """Register the decorated function as a job; see :meth:`add_job` for the arguments."""

        def register(handler: F) -> F:
            self.add_job(handler, schedule, **options)
            return handler

        return register

    def add_job(self, handler: Handler, schedule: str, **options: Unpack[JobOptions]) -> Job:
        """Register ``handler`` to run on ``schedule``.

        Args:
            handler: an async function (or a sync one, run in a worker thread) taking a
                :class:`~cronrace.RunContext`.
            schedule: 5-field cron, 6-field cron with seconds first, an alias such as
                ``@hourly``, or ``@every 30s``.
            **options: name, timezone, overlap, catchup, lease_ttl (s), catchup_window (s),
                max_catchup, history, overrun_ratio: see :class:`~cronrace.model.job.JobOptions`.

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

    @property
    def services(self) -> tuple[Callable[[], Coroutine[Any, Any, None]], ...]:
        """What :meth:`add_service` added, in order."""
        return tuple(self._services)

    def add_service(self, service: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Run ``service()`` in the agent's event loop while it runs (from connection on).

        Services run beside the heartbeat and are cancelled when the agent stops (after
        its runs); the metrics and the status page use this to read the store in the loop.
        """
        self._services.append(service)

    # -- readiness and the store -----------------------------------------------------------

    @property
    def ready(self) -> bool:
        """Whether the store answered the last heartbeat, its scripts or schema are ready,
        and it refuses none of the calls this agent makes."""
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
        """This agent's store (opened on first use; nothing is sent before its first call)."""
        if self._store is None:
            if is_embedded(self.settings.store_url):
                log.warning(
                    "using the embedded in-process store: it serves this process only; "
                    "set CRONRACE_STORE_URL to share ticks across a fleet"
                )
            self._store = open_store(
                self.settings.store_url,
                self.settings.namespace,
                max_connections=self.settings.max_connections,
                timeout_s=self.settings.redis_timeout_s,
            )
            self._store.access.on_refused = self.readiness.refused
            self._store.access.on_allowed = self.readiness.allowed
        return self._store

    def hold_s(self) -> float:
        """Seconds new runs must still wait after the store was found to have lost its data."""
        return self.heartbeat.hold_s()

    def _next_tick(self, job: str) -> int | None:
        return self.scheduler.next_tick.get(job) if self.scheduler is not None else None

    # -- lifecycle (lifecycle.py, hosting.py) -------------------------------------------

    @property
    def scheduler(self) -> Scheduler | None:
        """The tick loop while :meth:`run` runs (None before)."""
        return self.lifecycle.scheduler

    @property
    def runner(self) -> Runner | None:
        """What runs handlers while :meth:`run` runs (None before)."""
        return self.lifecycle.runner

    @property
    def sync(self) -> ScheduleSync | None:
        """This node's side of the stored schedules while :meth:`run` runs (None before)."""
        return self.lifecycle.sync

    @property
    def fleet(self) -> FleetDefinitions | None:
        """The fleet's published definitions while :meth:`run` runs (None before)."""
        return self.lifecycle.fleet

    def stop(self) -> None:
        """Ask :meth:`run` to stop: the first call gracefully, a second one at once.

        The first call starts no new wake-up; a wake-up whose claims were sent still
        decides its ticks and starts their runs, which then get ``shutdown_grace_s``. A
        second call cancels whatever is left (still recording every won tick).
        """
        self.lifecycle.stop()

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Run until :meth:`stop` is called or the task is cancelled.

        Start it with ``await task_group.start(agent.run)`` to wait until it is ready: the
        scripts are loaded, the first heartbeat is taken, the jobs are published, and a
        manual trigger made from then on is seen.

        Args:
            task_status: anyio's ``TaskGroup.start`` protocol; ``started()`` is called once
                the agent is connected and its loops are about to start.

        Raises:
            StoreUnavailableError: the store could not be reached within the start-up
                timeout.
        """
        await self.lifecycle.run(task_status=task_status)

    async def __aenter__(self) -> Self:
        """Start the agent in the background; return once it is ready.

        For a web app's lifespan or any service with its own event loop::

            async with agent:
                ...  # serve; the agent claims, runs and renews meanwhile

        Raises:
            StoreAccessError: the store refused us (password, ACL permission or grant,
                certificate, schema): at once.
            StoreUnavailableError: the store could not be reached within
                ``startup_timeout_s``.
            RuntimeError: the agent is running already.
        """
        if self._running is not None:
            raise RuntimeError(f"agent {self.node_id!r} is running already")
        running = hosting.running(self.lifecycle)
        await running.__aenter__()
        self._running = running
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Stop gracefully (as :meth:`stop`) and wait until the agent has shut down."""
        running, self._running = self._running, None
        assert running is not None, "__aexit__ without __aenter__"
        await running.__aexit__(exc_type, exc, traceback)

    def run_sync(self) -> None:
        """Run until SIGTERM or SIGINT; a second signal stops at once, as a second :meth:`stop`.

        Logs go to stderr (``log_format``, ``log_level``) unless the program configured
        logging itself: a script that only calls ``run_sync()`` still shows its ticks.

        Raises:
            StoreUnavailableError: the store could not be reached within the start-up
                timeout.
        """
        hosting.run_sync(self.lifecycle)

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
        """Close the store's connections (for operator use outside :meth:`run`)."""
        if self._store is not None:
            await self._store.aclose()
            self._store = None
