"""The agent: the job registry, its lifecycle, and the operator controls.

``Agent.run()`` owns every task it starts (anyio task groups): the heartbeat (server clock
offset, node registration, the Redis epoch), the outbox writer (records Redis could not
take yet), the control reader (manual triggers), the tick loop, and the runs.

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
import secrets
import signal
from collections.abc import Callable, Coroutine
from dataclasses import replace
from typing import Any, TypeVar

import anyio
from anyio.abc import TaskGroup, TaskStatus

from cronrace.clock import Clock, ServerOffsetClock, SystemClock
from cronrace.config import AgentSettings, load_settings, redact_url
from cronrace.errors import (
    JobDefinitionError,
    NoLiveNodeError,
    RedisAccessError,
    RedisDataError,
    RedisUnavailableError,
    StoreError,
    UnknownJobError,
)
from cronrace.fleetdefs import (
    FleetDefinitions,
    JobDefinition,
    NodeDetails,
    disagreements,
    job_definition,
    live_details,
    stored_problems,
)
from cronrace.job import Handler, Job, validate_job_name
from cronrace.logs import configure_logging
from cronrace.membership import Membership
from cronrace.observer import Observer
from cronrace.outbox import Outbox
from cronrace.policies import Catchup, Overlap
from cronrace.racers import Racers
from cronrace.records import JobStatus, NodeInfo, RunRecord
from cronrace.runner import CLEANUP_TIMEOUT_S, Runner
from cronrace.scheduler import Scheduler, backoff_s
from cronrace.schedules import Schedules, ScheduleSync, TargetFactory
from cronrace.store import Owner, Store
from cronrace.watchdog import LoopWatchdog

log = logging.getLogger("cronrace.agent")

F = TypeVar("F", bound=Callable[..., Any])

#: The fields of a job's definition that ``jobs_status`` shows.
SPEC_FIELDS = {"schedule", "timezone", "overlap", "catchup"}
#: A node's heartbeat lives this many heartbeat periods.
HEARTBEAT_TTL_PERIODS = 3
#: Prune dead members from the live set every this many heartbeats.
PRUNE_EVERY_BEATS = 10
#: Retry a refused command at the longest back-off (it will not pass by itself, but the
#: operator may fix the ACL or the password; readiness stays failed meanwhile).
BACKOFF_ATTEMPTS_MAX = 10


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
        self._store: Store | None = None
        self._stop_requested = False
        self._stop_event: anyio.Event | None = None
        self._forced = False
        self._force_scopes: list[anyio.CancelScope] = []
        self._ready = False
        self._reachable = False
        self._unreachable_why = "Redis unreachable"
        self._not_ready_why = "not started"
        self.watchdog = LoopWatchdog(threshold_s=self.settings.loop_lag_threshold_s)
        self._epoch: str | None = None
        self._control_from: str | None = None
        self._beats = 0
        self._left = False
        #: The racers' view of the fleet, read with every heartbeat (membership.py).
        self.membership = Membership(
            self.settings.node_id, Racers.parse(self.settings.racers), self.settings.heartbeat_s
        )
        self._hold_until_mono = 0.0
        self.scheduler: Scheduler | None = None
        self.runner: Runner | None = None
        self._services: list[Callable[[], Coroutine[Any, Any, None]]] = []
        self._handlers: dict[str, Handler] = {}
        #: Stored schedules: ``await agent.schedules.add(...)`` and the rest.
        self.schedules = Schedules(self)
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

    # -- lifecycle -----------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        """Whether Redis answered the last heartbeat, the scripts are loaded, and Redis
        refuses none of the commands this agent sends."""
        return self._ready

    def readiness_problem(self) -> str | None:
        """Why this agent is not ready (one line), or None when it is (``/readyz``).

        Safe to call from any thread (the metrics server's).
        """
        lag = self.liveness_problem()
        if lag is not None:
            return lag
        return None if self._ready else self._not_ready_why

    def liveness_problem(self) -> str | None:
        """Why this agent is not alive (one line), or None when it is (``/healthz``).

        Alive means its event loop answers: a handler that blocks the loop (``time.sleep``
        in an ``async def``) stops claims and renewals, and only a restart helps. Safe to
        call from any thread (the metrics server's).
        """
        return self.watchdog.problem()

    def _set_ready(self, ready: bool, *, why: str = "Redis unreachable") -> None:
        self._reachable = ready
        if not ready:
            self._unreachable_why = why
        self._publish_readiness()

    def _publish_readiness(self) -> None:
        """Ready = reachable and nothing refused; log and report when that changes."""
        refused = self._store.access.problem() if self._store is not None else None
        why = refused or (None if self._reachable else self._unreachable_why)
        ready = why is None
        if why is not None:
            self._not_ready_why = why
        if ready != self._ready:
            self._ready = ready
            self.observer.ready(ready)
            log.log(
                logging.INFO if ready else logging.ERROR,
                "ready" if ready else f"not ready: {why}",
                extra={"node": self.node_id},
            )

    def _refused(self, label: str, error: RedisAccessError, first: bool) -> None:
        """Redis refused a command (the store's access watch calls this)."""
        self.observer.redis_refused(error.command, error.cause)
        # An operator agent (never run) raises the error to its caller, who reports it.
        if first and self._stop_event is not None:
            log.error(
                "Redis refused a command; this is not an outage and will not pass by itself",
                extra={
                    "node": self.node_id,
                    "refused": label,
                    "command": error.command,
                    "cause": error.cause,
                    "error": str(error),
                },
            )
            self._publish_readiness()

    def _allowed(self, label: str) -> None:
        """A command Redis refused went through again."""
        log.info("Redis allows it again", extra={"node": self.node_id, "refused": label})
        self._publish_readiness()

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
            self._store.access.on_refused = self._refused
            self._store.access.on_allowed = self._allowed
        return self._store

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

    def hold_s(self) -> float:
        """Seconds new runs must still wait after Redis was found to have lost its data."""
        return max(0.0, self._hold_until_mono - self.clock.monotonic())

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
        self._left = False
        store = self.store
        self.sync = ScheduleSync(
            store, self.node_id, self._handlers, self._jobs, self.target_factory
        )
        self.fleet = FleetDefinitions(store, self.node_id, self.observer)
        self._definitions = {name: job_definition(job) for name, job in self._jobs.items()}
        outbox = Outbox(store, self.clock, retry_delay_s=backoff_s, observer=self.observer)
        self.runner = runner = Runner(
            store=store,
            clock=self.clock,
            node_id=self.node_id,
            owner=self.owner,
            observer=self.observer,
            outbox=outbox,
            hold_s=self.hold_s,
            sync_threads=self.settings.sync_handler_threads,
        )
        try:
            await self._connect(store)
            self.scheduler = Scheduler(
                jobs={**self._jobs, **self.sync.jobs},
                store=store,
                clock=self.clock,
                settings=self.settings,
                owner=self.owner,
                runner=runner,
                outbox=outbox,
                observer=self.observer,
                set_ready=self._set_ready,
                membership=self.membership,
            )
            self.sync.attach(self.scheduler)
            log.info(
                "agent started",
                extra={
                    "node": self.node_id,
                    "jobs": len(self._jobs),
                    "namespace": self.settings.namespace,
                },
            )
            async with anyio.create_task_group() as services:
                services.start_soon(self._heartbeat_loop)
                for service in self._services:
                    services.start_soon(self._run_service, service)
                services.start_soon(self._watch_loop)
                services.start_soon(outbox.run)
                task_status.started()
                await self._lifecycle(self.scheduler, runner)
                services.cancel_scope.cancel()
        finally:
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
            self._ready = False
            self.observer.ready(False)
            log.info("agent stopped", extra={"node": self.node_id})

    async def _lifecycle(self, scheduler: Scheduler, runner: Runner) -> None:
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
                loops.start_soon(self._control_loop, runs)
                await self._stop_event.wait()
                grace_over = anyio.current_time() + self.settings.shutdown_grace_s
                log.info(
                    "stopping: no new wake-ups; deciding the one in hand",
                    extra={"node": self.node_id},
                )
                loops.cancel_scope.deadline = grace_over
                scheduler.stop()
            # No claim comes from this node any more: leave the live set now rather than
            # after the runs' grace, so that the ticks it was a racer for go to the others
            # at their next heartbeat (racers = k) and none waits for it as preferred.
            self._left = True
            with (
                anyio.CancelScope(shield=True),
                anyio.move_on_after(2),
                contextlib.suppress(StoreError),
            ):
                await self.store.leave(self.node_id)
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

    async def _connect(self, store: Store) -> None:
        """Load the scripts, take the first heartbeat and publish the jobs; or give up.

        A refusal (wrong password, a missing ACL permission, a certificate that does not
        verify) fails at once: retrying cannot fix it. Anything else is retried until
        ``startup_timeout_s``, and the error then names the last cause.
        """
        attempt = 0
        last_error = "no answer"
        with anyio.move_on_after(self.settings.startup_timeout_s) as scope:
            while True:
                try:
                    await store.load_scripts()
                    # Manual triggers come through XREAD: a user who may not run it would
                    # otherwise fire every scheduled tick and silently drop every trigger.
                    # The control loop reads on from here: a trigger made once this agent
                    # reports ready is never before its position (it used to take its own
                    # position later, and miss a trigger made in between).
                    self._control_from = await store.control_position()
                    await store.read_control(self._control_from, block_ms=1)
                    await self._beat(store)
                    await store.register_jobs(
                        {name: job.spec() for name, job in self._jobs.items()}
                    )
                    if self.sync is not None:
                        await self.sync.reload("start-up")
                    break
                except RedisAccessError:
                    raise
                except RedisDataError as exc:  # a failover passes (unavailable); this not
                    raise RedisUnavailableError(
                        f"Redis at {self._redacted_url()} refused: {exc}"
                    ) from exc
                except RedisUnavailableError as exc:
                    last_error = str(exc) or type(exc).__name__
                    log.warning("Redis not reachable yet", extra={"error": last_error})
                    await anyio.sleep(backoff_s(attempt))
                    attempt += 1
        if scope.cancelled_caught:
            raise RedisUnavailableError(
                f"Redis at {self._redacted_url()} unreachable for "
                f"{self.settings.startup_timeout_s:g}s at start-up; last error: {last_error}"
            )

    def _redacted_url(self) -> str:
        return redact_url(self.settings.redis_url)

    async def _beat(self, store: Store) -> None:
        base = self.clock.base if isinstance(self.clock, ServerOffsetClock) else self.clock
        ttl_ms = int(self.settings.heartbeat_s * HEARTBEAT_TTL_PERIODS * 1000)
        candidate = secrets.token_hex(8)
        sent_wall, sent_mono = base.time(), base.monotonic()
        reply = await store.heartbeat(
            self.node_id,
            now_ms=int(self.clock.time() * 1000),
            ttl_ms=ttl_ms,
            epoch_candidate=candidate,
            prune=self._beats % PRUNE_EVERY_BEATS == 0,
        )
        self._beats += 1
        self.membership.update(reply.members, now_ms=int(self.clock.time() * 1000), ttl_ms=ttl_ms)
        self.observer.membership(len(self.membership.ring.members))
        rtt = base.monotonic() - sent_mono
        if isinstance(self.clock, ServerOffsetClock):
            self.clock.add_sample(
                sent_wall_s=sent_wall, received_wall_s=sent_wall + rtt, server_s=reply.server_time_s
            )
        if self._epoch is not None and reply.epoch != self._epoch:
            hold = max((job.lease_ttl_s for job in self._jobs.values()), default=0.0)
            self._hold_until_mono = self.clock.monotonic() + hold
            log.critical(
                "Redis lost its data (epoch changed): fences were re-seeded from the server "
                "clock; new runs wait one lease_ttl because runs started before may be alive",
                extra={
                    "node": self.node_id,
                    "old_epoch": self._epoch,
                    "epoch": reply.epoch,
                    "hold_s": hold,
                },
            )
            await store.register_jobs({name: job.spec() for name, job in self._jobs.items()})
        self._epoch = reply.epoch
        self._set_ready(True)

    async def _run_service(self, service: Callable[[], Coroutine[Any, Any, None]]) -> None:
        try:
            await service()
        except Exception:  # the outermost frame of a service: the agent and its jobs go on
            log.exception("service failed", extra={"service": getattr(service, "__name__", "?")})

    async def _heartbeat_loop(self) -> None:
        attempt = 0
        while True:
            await self.clock.sleep(self.settings.heartbeat_s if not attempt else backoff_s(attempt))
            if self._left:  # stopping: it left the live set and must not join it again
                continue
            try:
                await self._beat(self.store)
                await self._after_beat(reconnected=attempt > 0)
                attempt = 0
            except RedisAccessError:
                # Logged, counted and made readiness fail where it was translated; keep
                # beating slowly: the operator may fix the ACL or the password meanwhile.
                attempt = BACKOFF_ATTEMPTS_MAX
                self.observer.redis_error("heartbeat")
            except StoreError as exc:
                attempt += 1
                self.observer.redis_error("heartbeat")
                self._set_ready(False, why=f"Redis unreachable: {exc}")
                log.warning("heartbeat failed", extra={"node": self.node_id, "error": str(exc)})

    async def _after_beat(self, *, reconnected: bool) -> None:
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
        except RedisDataError as exc:  # garbage under a fleet key: ticks must not care
            log.error("fleet definitions exchange failed", extra={"error": str(exc)})
        if reconnected:
            await self.sync.reload("reconnected")
        else:
            await self.sync.check_version(version)

    async def fleet_details(self) -> list[NodeDetails]:
        """What every live node publishes: job digests, handlers, refused stored schedules."""
        ttl_ms = int(self.settings.heartbeat_s * HEARTBEAT_TTL_PERIODS * 1000)
        return await live_details(self.store, heartbeat_ttl_ms=ttl_ms)

    async def _watch_loop(self) -> None:
        """Run the event-loop watchdog that ``/healthz`` reads."""
        self.observer.loop_watched(self.watchdog.lag_s)
        self.watchdog.on_stall = self.observer.loop_stalled
        await self.watchdog.run()

    async def _control_loop(self, runs: TaskGroup) -> None:
        """Read manual trigger requests and race for them like for a tick."""
        assert self.scheduler is not None
        gate = self.scheduler.gate
        position: str | None = self._control_from
        attempt = 0
        while not gate.stopping:
            entries: list[tuple[str, dict[str, str]]] = []
            try:
                with gate.waiting():
                    if position is None:
                        position = await self.store.control_position()
                    # Block as long as the socket timeout allows: each wait costs Redis one
                    # command per node, and a trigger wakes it at once anyway.
                    block_ms = max(500, int((self.settings.redis_timeout_s - 1) * 1000))
                    entries = await self.store.read_control(position, block_ms=block_ms)
                attempt = 0
            except RedisAccessError:
                # Logged, counted and made readiness fail where it was translated: manual
                # triggers cannot run while Redis refuses this, and /readyz says so.
                self.observer.redis_error("control")
                with gate.waiting():
                    await self.clock.sleep(backoff_s(BACKOFF_ATTEMPTS_MAX))
                continue
            except StoreError as exc:
                attempt += 1
                self.observer.redis_error("control")
                if attempt == 1:  # the heartbeat reports the outage; say once that triggers wait
                    log.warning(
                        "control read failed; manual triggers wait until it works",
                        extra={"node": self.node_id, "error": str(exc)},
                    )
                with gate.waiting():
                    await self.clock.sleep(backoff_s(attempt))
                continue
            if gate.stopping:
                # Every node reads every trigger: the ones still running race for these.
                return
            for entry_id, fields in entries:
                position = entry_id
                if fields.get("op") == "schedules" and self.sync is not None:
                    with contextlib.suppress(StoreError):  # the heartbeat catches up
                        await self.sync.on_notice(fields)
                job = self.scheduler.jobs.get(fields.get("job", ""))
                if fields.get("op") == "trigger" and job is not None:
                    log.info("manual trigger", extra={"job": job.name, "trigger": fields.get("id")})
                    await self.scheduler.fire_trigger(job, fields.get("id", entry_id), runs)

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

            async def watch(*, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
                with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                    task_status.started()
                    async for signum in signals:
                        if self._stop_requested:
                            log.warning(
                                "second signal: cancelling now; won ticks are still recorded",
                                extra={"signal": signal.Signals(signum).name},
                            )
                        else:
                            log.info(
                                "signal received; shutting down gracefully",
                                extra={"signal": signal.Signals(signum).name},
                            )
                        self.stop()

            await tg.start(watch)
            await self.run()
            tg.cancel_scope.cancel()

    # -- operator controls (work from any process on the same Redis) ----------------------

    async def _known(self, job: str) -> str:
        if job in self._jobs or job in await self.store.known_jobs():
            return job
        if (await self.store.schedules.read([job]))[1].get(job) is not None:
            return job  # a stored schedule
        raise UnknownJobError(f"job {job!r}: no such job in namespace {self.settings.namespace!r}")

    async def pause(self, job: str) -> None:
        """Pause ``job`` on every node: its ticks are recorded ``skipped:paused``."""
        await self.store.set_paused(await self._known(job), True)

    async def resume(self, job: str) -> None:
        """Resume a paused job on every node."""
        await self.store.set_paused(await self._known(job), False)

    async def trigger(self, job: str) -> str:
        """Ask the fleet for one immediate run of ``job`` (same lease and overlap policy).

        Returns:
            The trigger id, found again in the run record's ``trigger_id``.

        Raises:
            NoLiveNodeError: no node of the namespace is alive to see the request (nodes
                read requests made while they run, so it would never run).
        """
        name = await self._known(job)
        if not await self.nodes():
            raise NoLiveNodeError(
                f"job {name!r}: no live node in namespace {self.settings.namespace!r}, so "
                "nothing would run this trigger (nodes see only the triggers made while "
                "they run); start an agent that defines the job"
            )
        return await self.store.request_trigger(name)

    async def trigger_claimant(self, job: str, trigger_id: str) -> str | None:
        """Return the node that claimed a manual trigger, or None while none has."""
        return await self.store.trigger_claimant(job, trigger_id)

    async def history(self, job: str, limit: int = 20) -> list[RunRecord]:
        """Return the newest ``limit`` run records of ``job``, newest tick first.

        Records are written when a decision is final, so a long run's record comes after
        the skips of the ticks it overlapped: read more than asked and sort by tick.
        """
        records = await self.store.history(await self._known(job), 2 * limit + 10)
        records.sort(key=lambda record: record.tick_s, reverse=True)  # stable: ties by write
        return records[:limit]

    async def nodes(self) -> list[NodeInfo]:
        """Return the live nodes of this namespace."""
        ttl_ms = int(self.settings.heartbeat_s * HEARTBEAT_TTL_PERIODS * 1000)
        rows = await self.store.nodes(heartbeat_ttl_ms=ttl_ms)
        published = await self.store.fleet.read_details([row.node_id for row in rows])
        racers = {
            node: NodeDetails.from_json(node, raw).racers for node, raw in published.items() if raw
        }
        return [replace(row, racers=racers.get(row.node_id, "?")) for row in rows]

    async def jobs_status(self) -> list[JobStatus]:
        """Describe every job of the namespace: definition, next tick, lease, counters.

        Stored schedules are listed too; ``problem`` says when live nodes define a job
        differently, or when no live node runs a stored schedule.
        """
        stored = {spec.name: spec for spec in await self.schedules.list()}
        names = sorted(set(self._jobs) | set(await self.store.known_jobs()) | set(stored))
        fleet = await self.fleet_details()
        problems = {
            d.job: f"live nodes define it differently: {d.describe()}" for d in disagreements(fleet)
        }
        problems.update(stored_problems(stored, fleet))
        states = await self.store.job_states(names)
        out = []
        for state in states:
            job = self._jobs.get(state.job)
            spec = job.spec() if job is not None else state.spec
            if job is None and state.job in stored:
                spec = stored[state.job].model_dump(mode="json", include=SPEC_FIELDS)
            last = await self.store.history(state.job, 1)
            next_tick = None
            if self.scheduler is not None and state.job in self.scheduler.next_tick:
                next_tick = self.scheduler.next_tick[state.job]
            else:  # None when its tick math fails (the scheduler logs why)
                next_tick = _next_from_spec(state.job, spec, int(self.clock.time()))
            counters = state.counters
            out.append(
                JobStatus(
                    job=state.job,
                    schedule=spec.get("schedule", "?"),
                    timezone=spec.get("timezone", "?"),
                    next_tick_s=next_tick,
                    last_tick_s=state.watermark_s,
                    last_outcome=last[0].outcome.value if last else None,
                    lease_owner=state.lease.owner.node_id if state.lease else None,
                    lease_fence=state.lease.fence if state.lease else None,
                    paused=state.paused,
                    skipped=counters.get("skipped_overlap", 0) + counters.get("skipped_paused", 0),
                    missed=counters.get("missed", 0),
                    overlap=spec.get("overlap", "?"),
                    catchup=spec.get("catchup", "?"),
                    source="stored" if job is None and state.job in stored else "code",
                    problem=problems.get(state.job),
                )
            )
        return out

    async def aclose(self) -> None:
        """Close the Redis connections (for operator use outside :meth:`run`)."""
        if self._store is not None:
            await self._store.aclose()
            self._store = None


def _next_from_spec(job: str, spec: dict[str, str], now_s: int) -> int | None:
    from cronrace.schedule import Schedule

    try:
        schedule = Schedule.parse(spec["schedule"], spec.get("timezone", "UTC"), job=job)
        return schedule.next_tick(now_s)
    except (KeyError, ValueError):
        return None
