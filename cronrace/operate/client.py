"""The operator client: read and control a fleet from any process, through its store.

``cronrace status``, ``history``, ``pause``, ``trigger`` and the ``schedules`` commands use
an :class:`OperatorClient` of their own, without building an :class:`~cronrace.Agent`; an
agent's operator methods delegate to one that shares its store and knows its jobs. Every
read costs a fixed number of round trips, however many jobs the namespace holds.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from types import TracebackType
from typing import Self

import anyio

from cronrace.errors import NoLiveNodeError, UnknownJobError
from cronrace.fleet.definitions import NodeDetails, disagreements, live_details, stored_problems
from cronrace.fleet.heartbeat import heartbeat_ttl_ms
from cronrace.model.job import Handler, Job
from cronrace.model.records import JobStatus, NodeInfo, RunRecord, one_per_tick
from cronrace.operate.schedules import Schedules
from cronrace.runtime.clock import Clock, SystemClock
from cronrace.settings import AgentSettings
from cronrace.specs.stored import ScheduleSpec
from cronrace.stores.contract import Store
from cronrace.stores.urls import open_store
from cronrace.stores.values import JobState
from cronrace.timing.schedule import Schedule

log = logging.getLogger("cronrace.operate.client")

#: The fields of a stored schedule's definition that ``jobs_status`` shows.
SPEC_FIELDS = {"schedule", "timezone", "overlap", "catchup"}
#: How long closing the client's own connections may take.
CLOSE_TIMEOUT_S = 2.0


class OperatorClient:
    """Read and control the jobs of one namespace: pause, resume, trigger, history, status.

    Use it as ``async with OperatorClient(settings) as client: ...``, or call
    :meth:`aclose` when done.

    Args:
        settings: where the store is, the namespace, timeouts, ``heartbeat_s`` (which says
            how long a node's heartbeat lives).
        store: returns the store to use (an agent's); default: a store of the client's
            own, opened on first use and closed by :meth:`aclose`.
        clock: what "now" is when computing next ticks; default the system clock.
        jobs: jobs defined in this process (an agent's), known before they are published.
        handlers: handler names registered in this process (stored schedules' checks).
        next_tick: the running scheduler's next tick of a job, when it has one.
    """

    def __init__(
        self,
        settings: AgentSettings,
        *,
        store: Callable[[], Store] | None = None,
        clock: Clock | None = None,
        jobs: Mapping[str, Job] | None = None,
        handlers: Mapping[str, Handler] | None = None,
        next_tick: Callable[[str], int | None] | None = None,
    ) -> None:
        self.settings = settings
        self.clock: Clock = clock if clock is not None else SystemClock()
        self._store_of = store
        self._own_store: Store | None = None
        self._jobs: Mapping[str, Job] = jobs if jobs is not None else {}
        self._handlers: Mapping[str, Handler] = handlers if handlers is not None else {}
        self._next_tick = next_tick
        #: Stored schedules: ``await client.schedules.add(...)`` and the rest.
        self.schedules = Schedules(self)

    @property
    def store(self) -> Store:
        """The store this client reads and writes through."""
        if self._store_of is not None:
            return self._store_of()
        if self._own_store is None:
            self._own_store = open_store(
                self.settings.store_url,
                self.settings.namespace,
                max_connections=self.settings.max_connections,
                timeout_s=self.settings.redis_timeout_s,
            )
        return self._own_store

    @property
    def jobs(self) -> dict[str, Job]:
        """The jobs defined in this process (none for a client of its own), by name."""
        return dict(self._jobs)

    @property
    def handlers(self) -> dict[str, Handler]:
        """The handlers registered in this process, by name."""
        return dict(self._handlers)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        with anyio.CancelScope(shield=True), anyio.move_on_after(CLOSE_TIMEOUT_S):
            await self.aclose()

    async def aclose(self) -> None:
        """Close the client's own connections (an agent's store stays open)."""
        if self._own_store is not None:
            await self._own_store.aclose()
            self._own_store = None

    # -- controls ----------------------------------------------------------------------

    async def known(self, job: str) -> str:
        """Return ``job`` if the namespace knows it (code, config or stored schedule).

        Raises:
            UnknownJobError: no node defines it and no stored schedule has the name.
        """
        if job in self._jobs or job in await self.store.known_jobs():
            return job
        if (await self.store.schedules.read([job]))[1].get(job) is not None:
            return job
        raise UnknownJobError(f"job {job!r}: no such job in namespace {self.settings.namespace!r}")

    async def pause(self, job: str) -> None:
        """Pause ``job`` on every node: its ticks are recorded ``skipped:paused``."""
        await self.store.set_paused(await self.known(job), True)

    async def resume(self, job: str) -> None:
        """Resume a paused job on every node."""
        await self.store.set_paused(await self.known(job), False)

    async def trigger(self, job: str) -> str:
        """Ask the fleet for one immediate run of ``job`` (same lease and overlap policy).

        Returns:
            The trigger id, found again in the run record's ``trigger_id``.

        Raises:
            NoLiveNodeError: no node of the namespace is alive to see the request (nodes
                read requests made while they run, so it would never run).
        """
        name = await self.known(job)
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

    # -- reads -------------------------------------------------------------------------

    async def history(self, job: str, limit: int = 20) -> list[RunRecord]:
        """Return the newest ``limit`` run records of ``job``, newest tick first.

        A run's result replaces its ``granted`` record (:func:`one_per_tick`); a long
        run's result comes after the skips of the ticks it overlapped: read more than
        asked and sort by tick.
        """
        records = await self.store.history(await self.known(job), _read_for(limit))
        return _newest_ticks(records, limit)

    async def latest_runs(self, jobs: Sequence[str], limit: int) -> dict[str, list[RunRecord]]:
        """Return each job's newest ``limit`` run records, newest tick first; one round trip."""
        found = await self.store.histories(list(jobs), _read_for(limit))
        return {job: _newest_ticks(records, limit) for job, records in found.items()}

    async def nodes(self) -> list[NodeInfo]:
        """Return the live nodes of this namespace, newest heartbeat first."""
        ttl_ms = heartbeat_ttl_ms(self.settings.heartbeat_s)
        rows = await self.store.nodes(heartbeat_ttl_ms=ttl_ms)
        published = await self.store.fleet.read_details([row.node_id for row in rows])
        racers = {
            node: NodeDetails.from_json(node, raw).racers for node, raw in published.items() if raw
        }
        return [replace(row, racers=racers.get(row.node_id, "?")) for row in rows]

    async def fleet_details(self) -> list[NodeDetails]:
        """What every live node publishes: job digests, handlers, refused stored schedules."""
        ttl_ms = heartbeat_ttl_ms(self.settings.heartbeat_s)
        return await live_details(self.store, heartbeat_ttl_ms=ttl_ms)

    async def jobs_status(self) -> list[JobStatus]:
        """Describe every job of the namespace: definition, next tick, lease, counters.

        Stored schedules are listed too; ``problem`` says when live nodes define a job
        differently, or when no live node runs a stored schedule. A fixed number of round
        trips, however many jobs: states and last records are read in one pipeline each.
        """
        stored = {spec.name: spec for spec in await self.schedules.list()}
        names = sorted(set(self._jobs) | set(await self.store.known_jobs()) | set(stored))
        fleet = await self.fleet_details()
        problems = {
            d.job: f"live nodes define it differently: {d.describe()}" for d in disagreements(fleet)
        }
        problems.update(stored_problems(stored, fleet))
        states = await self.store.job_states(names)
        last = {
            name: _newest_ticks(records, 1)
            for name, records in (await self.store.histories(names, _read_for(1))).items()
        }
        now_s = int(self.clock.time())
        return [
            self._status(state, stored, last[state.job], problems.get(state.job), now_s)
            for state in states
        ]

    def _status(
        self,
        state: JobState,
        stored: Mapping[str, ScheduleSpec],
        last: Sequence[RunRecord],
        problem: str | None,
        now_s: int,
    ) -> JobStatus:
        job = self._jobs.get(state.job)
        source = "stored" if job is None and state.job in stored else "code"
        spec = job.spec() if job is not None else state.spec
        if source == "stored":
            spec = stored[state.job].model_dump(mode="json", include=SPEC_FIELDS)
        next_tick = self._next_tick(state.job) if self._next_tick is not None else None
        if next_tick is None:  # None also when its tick math fails (the scheduler logs why)
            next_tick = _next_from_spec(state.job, spec, now_s)
        counters = state.counters
        return JobStatus(
            job=state.job,
            schedule=spec.get("schedule", "?"),
            timezone=spec.get("timezone", "?"),
            next_tick_s=next_tick,
            last_tick_s=state.cursor_s,
            last_outcome=last[0].outcome.value if last else None,
            lease_owner=state.lease.owner.node_id if state.lease else None,
            lease_fence=state.lease.fence if state.lease else None,
            paused=state.paused,
            skipped=counters.get("skipped_overlap", 0) + counters.get("skipped_paused", 0),
            missed=counters.get("missed", 0),
            overlap=spec.get("overlap", "?"),
            catchup=spec.get("catchup", "?"),
            source=source,
            problem=problem,
        )


def _read_for(limit: int) -> int:
    """How many records to read to find the newest ``limit`` ticks (see ``history``)."""
    return 2 * limit + 10


def _newest_ticks(records: list[RunRecord], limit: int) -> list[RunRecord]:
    records = one_per_tick(records)
    records.sort(key=lambda record: record.tick_s, reverse=True)  # stable: ties by write
    return records[:limit]


def _next_from_spec(job: str, spec: Mapping[str, str], now_s: int) -> int | None:
    try:
        schedule = Schedule.parse(spec["schedule"], spec.get("timezone", "UTC"), job=job)
        return schedule.next_tick(now_s)
    except (KeyError, ValueError):
        return None
