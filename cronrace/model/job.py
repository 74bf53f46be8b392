"""A job's definition and the context its handler receives.

A job is validated once, when it is defined: a bad name, schedule, time zone, policy or
setting raises a :class:`~cronrace.errors.CronraceError` whose message names the job, the
field and the value. Nothing a user configured is silently changed.
"""

from __future__ import annotations

import functools
import inspect
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, Protocol, TypedDict, Unpack, runtime_checkable

from cronrace.errors import CronraceError, JobDefinitionError
from cronrace.model.policies import Catchup, Overlap
from cronrace.model.records import utc_from_s
from cronrace.timing.schedule import Schedule

JOB_NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")

Handler = Callable[["RunContext"], Awaitable[Any]] | Callable[["RunContext"], Any]


class PolicyOptions(TypedDict, total=False):
    """A job's options besides its name, handler and schedule: the one list of them.

    :class:`JobOptions` adds the name (jobs in code and ``[[jobs]]`` tables); stored
    schedules (:meth:`cronrace.operate.schedules.Schedules.add`) add their target instead.
    ``[[jobs]]`` tables and stored schedules (:class:`cronrace.specs.jobspec.JobSpec`) have the
    same fields and defaults (:data:`JOB_DEFAULTS`).

    Keys:
        timezone: the IANA zone cron fields are read in.
        overlap: ``skip``, ``queue_one``, ``replace`` or ``allow`` (a run still alive).
        catchup: ``latest``, ``skip`` or ``all`` (ticks nobody attempted in time).
        lease_ttl: seconds a run's lease lives without renewal.
        catchup_window: seconds late a tick may still be attempted.
        max_catchup: the most missed ticks ``catchup = all`` fires.
        history: how many run records the job keeps (approximately).
        overrun_ratio: warn when a run outlasts this share of the interval.
    """

    timezone: str
    overlap: Overlap | str
    catchup: Catchup | str
    lease_ttl: float
    catchup_window: float
    max_catchup: int
    history: int
    overrun_ratio: float


class JobOptions(PolicyOptions, total=False):
    """The keywords of :meth:`cronrace.Agent.job`, :meth:`cronrace.Agent.add_job` and
    :meth:`Job.define`: :class:`PolicyOptions` and the name.

    Keys:
        name: the job's name; default the handler's ``__name__``.
    """

    name: str | None


#: Each option's default (``name``'s is the handler's ``__name__``).
JOB_DEFAULTS: Final = JobOptions(
    timezone="UTC",
    overlap=Overlap.SKIP,
    catchup=Catchup.LATEST,
    lease_ttl=30.0,
    catchup_window=300.0,
    max_catchup=100,
    history=1000,
    overrun_ratio=0.8,
)
DEFAULT_OVERLAP: Final = Overlap(JOB_DEFAULTS["overlap"])
DEFAULT_CATCHUP: Final = Catchup(JOB_DEFAULTS["catchup"])
#: The options' names: the name, then the policies in their documented order.
JOB_OPTION_NAMES: Final = ("name", *PolicyOptions.__annotations__)


#: What a job name (or a handler name) may be, said to whoever gave a bad one.
JOB_NAME_RULE = "use 1-128 letters, digits, '_', '.', '-', starting with a letter or digit"


def job_name_problem(name: object) -> str | None:
    """Why ``name`` is not a valid job or handler name, or None when it is."""
    if isinstance(name, str) and JOB_NAME_PATTERN.fullmatch(name):
        return None
    return JOB_NAME_RULE


def validate_job_name(name: object) -> str:
    """Return ``name`` if it is a valid job name, else raise JobDefinitionError."""
    problem = job_name_problem(name)
    if problem is not None:
        raise JobDefinitionError(f"job {name!r}: name {name!r} is invalid: {problem}")
    assert isinstance(name, str)
    return name


def _policy(enum: type[Overlap] | type[Catchup], job: str, field_name: str, value: object) -> Any:
    try:
        return enum(str(value)) if isinstance(value, str) else enum(value)  # type: ignore[arg-type]
    except ValueError:
        allowed = ", ".join(member.value for member in enum)
        raise JobDefinitionError(
            f"job {job!r}: {field_name} {value!r} is not one of: {allowed}"
        ) from None


def _positive(job: str, field_name: str, value: object, *, minimum: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < minimum:
        raise JobDefinitionError(
            f"job {job!r}: {field_name} {value!r} must be a number >= {minimum}"
        )
    return float(value)


@runtime_checkable
class FencedWriter(Protocol):
    """Where :meth:`RunContext.fenced_set` writes: a store that offers fenced writes."""

    async def fenced_set(self, key: str, value: str | bytes, fence: int, ttl_ms: int = 0) -> bool:
        """Write ``value`` under ``key`` unless a higher fence wrote it before."""
        ...


@dataclass(frozen=True, slots=True)
class Job:
    """One recurring job: a name, a schedule, a handler and its policies.

    Attributes:
        name: unique within the namespace; part of every Redis key of the job.
        schedule: when it fires.
        handler: an async or sync callable taking a :class:`RunContext`.
        overlap: what to do with a tick while the previous run is alive.
        catchup: what to do with missed ticks.
        lease_ttl_s: how long a run's lease lives without renewal.
        catchup_window_s: how late a tick may still be attempted.
        max_catchup: the most missed ticks ``Catchup.ALL`` fires.
        history: how many run records the job's stream keeps (approximately).
        overrun_ratio: warn when a run lasts longer than this fraction of the interval.
    """

    name: str
    schedule: Schedule
    handler: Handler
    overlap: Overlap = DEFAULT_OVERLAP
    catchup: Catchup = DEFAULT_CATCHUP
    lease_ttl_s: float = JOB_DEFAULTS["lease_ttl"]
    catchup_window_s: float = JOB_DEFAULTS["catchup_window"]
    max_catchup: int = JOB_DEFAULTS["max_catchup"]
    history: int = JOB_DEFAULTS["history"]
    overrun_ratio: float = JOB_DEFAULTS["overrun_ratio"]
    is_async: bool = field(default=True)

    @property
    def lease_ttl_ms(self) -> int:
        return int(self.lease_ttl_s * 1000)

    @classmethod
    def define(cls, handler: Handler, schedule: str, **options: Unpack[JobOptions]) -> Job:
        """Validate every field and build the job; raise a CronraceError naming the field.

        Args:
            handler: an async or sync callable taking a :class:`RunContext`.
            schedule: the schedule expression.
            **options: see :class:`JobOptions`; the others take :data:`JOB_DEFAULTS`.
        """
        name = options.get("name")
        job_name = validate_job_name(name if name is not None else getattr(handler, "__name__", ""))
        unknown = sorted(set(options) - set(JOB_OPTION_NAMES))
        if unknown:
            raise JobDefinitionError(
                f"job {job_name!r}: unknown option(s) {', '.join(unknown)}; the options are "
                f"{', '.join(JOB_OPTION_NAMES)}"
            )
        given: JobOptions = {**JOB_DEFAULTS, **options}
        timezone, overlap, catchup = given["timezone"], given["overlap"], given["catchup"]
        lease_ttl, catchup_window = given["lease_ttl"], given["catchup_window"]
        max_catchup, history = given["max_catchup"], given["history"]
        if not callable(handler):
            raise JobDefinitionError(f"job {job_name!r}: handler {handler!r} is not callable")
        try:
            # Checked from the wall clock: "never fires" spans decades, not seconds of skew.
            parsed = Schedule.parse(
                schedule, timezone, job=job_name, fires_after_s=int(time.time())
            )
        except CronraceError:
            raise
        except Exception as exc:  # zoneinfo oddities must still name the job
            raise JobDefinitionError(f"job {job_name!r}: schedule {schedule!r}: {exc}") from exc
        if isinstance(max_catchup, bool) or not isinstance(max_catchup, int) or max_catchup < 1:
            raise JobDefinitionError(f"job {job_name!r}: max_catchup {max_catchup!r} must be >= 1")
        if isinstance(history, bool) or not isinstance(history, int) or history < 1:
            raise JobDefinitionError(f"job {job_name!r}: history {history!r} must be >= 1")
        return cls(
            name=job_name,
            schedule=parsed,
            handler=handler,
            overlap=_policy(Overlap, job_name, "overlap", overlap),
            catchup=_policy(Catchup, job_name, "catchup", catchup),
            lease_ttl_s=_positive(job_name, "lease_ttl", lease_ttl, minimum=0.1),
            catchup_window_s=_positive(job_name, "catchup_window", catchup_window, minimum=0),
            max_catchup=max_catchup,
            history=history,
            overrun_ratio=_positive(job_name, "overrun_ratio", given["overrun_ratio"], minimum=0),
            is_async=inspect.iscoroutinefunction(handler)
            or inspect.iscoroutinefunction(getattr(handler, "__call__", None)),  # noqa: B004
        )

    def spec(self) -> dict[str, str]:
        """Describe the job for operators (published in Redis at start-up)."""
        try:
            return dict(_remembered_spec(self))
        except TypeError:  # a handler that cannot be hashed: described every time
            return _spec(self)


#: Sized for the jobs of one process, as their digests are (fleet/definitions.py): a Job is
#: frozen and its spec a pure value of it, so agents of one process that define the same
#: jobs (a benchmark's hundred simulated nodes, each publishing 10,000 at its start) make
#: each spec once. Handed out as copies.
@functools.lru_cache(maxsize=1 << 16)
def _remembered_spec(job: Job) -> dict[str, str]:
    return _spec(job)


def _spec(job: Job) -> dict[str, str]:
    return {
        "schedule": job.schedule.expr,
        "timezone": job.schedule.timezone,
        "overlap": job.overlap.value,
        "catchup": job.catchup.value,
        "lease_ttl_s": f"{job.lease_ttl_s:g}",
        "catchup_window_s": f"{job.catchup_window_s:g}",
    }


class LostFlag:
    """Set once when a run loses its lease; read by its handler, in any thread.

    A plain attribute, not a ``threading.Event``: the event loop sets it and a handler's
    thread reads it, each access whole under the GIL, and nobody waits on it. The Event's
    lock and condition cost about 3 µs per run on the winner's path.
    """

    __slots__ = ("_set",)

    def __init__(self) -> None:
        self._set = False

    def set(self) -> None:
        self._set = True

    def is_set(self) -> bool:
        return self._set


class Flag(Protocol):
    """What the agent sets when a lease is lost (a :class:`LostFlag`, or an Event)."""

    def set(self) -> None: ...

    def is_set(self) -> bool: ...


@dataclass(slots=True)
class RunContext:
    """What a handler receives: which run this is, and the means to write safely.

    Attributes:
        job: the job name.
        tick_s: the scheduled instant, UTC epoch seconds.
        fence: the fencing token of this run, strictly increasing per job. Pass it on to
            whatever the run writes, so that a stale run's late writes can be refused.
        node_id: the node running it.
        trigger_id: set when the run was triggered by hand.
        args: the stored schedule's ``args`` (empty for jobs defined in code).
    """

    job: str
    tick_s: int
    fence: int
    node_id: str
    trigger_id: str | None = None
    args: Mapping[str, Any] = field(default_factory=dict)
    _store: FencedWriter | None = field(default=None, repr=False)
    _lost: LostFlag = field(default_factory=LostFlag, repr=False)

    @property
    def tick(self) -> datetime:
        """The scheduled instant as an aware UTC datetime."""
        return utc_from_s(self.tick_s)

    @property
    def lease_lost(self) -> bool:
        """Whether this run lost its lease (sync handlers should poll it and stop)."""
        return self._lost.is_set()

    @property
    def idempotency_key(self) -> str:
        """``<job>:<tick>``: the same for every attempt at the same tick."""
        return f"{self.job}:{self.tick_s}"

    async def fenced_set(self, key: str, value: str | bytes, *, ttl_ms: int = 0) -> bool:
        """Write ``value`` under ``key`` in the agent's store unless a newer run already did.

        On Redis the highest fence that wrote ``key`` is kept beside it, in the same Cluster
        slot: ``<key>:cronrace-fence`` when ``key`` has a hash tag, else
        ``<key>{<key>}:cronrace-fence``. On PostgreSQL ``key`` is a row of the schema's
        ``fenced_values`` table, with its fence.

        Returns:
            True when written; False when a run with a higher fence wrote first.
        """
        if self._store is None:
            raise CronraceError(
                f"job {self.job!r}: fenced_set needs a store with fenced writes "
                "(Redis or PostgreSQL)"
            )
        return await self._store.fenced_set(key, value, self.fence, ttl_ms)
