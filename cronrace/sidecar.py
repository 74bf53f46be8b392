"""The sidecar: jobs from a TOML file, each calling a target, served with metrics and probes.

A config file has one ``[agent]`` table (see :class:`~cronrace.config.SidecarSettings`;
any field can be overridden by a ``CRONRACE_<FIELD>`` environment variable) and one
``[[jobs]]`` table per job, each with exactly one target table::

    [agent]
    redis_url = "redis://127.0.0.1:6379/0"

    [[jobs]]
    name = "cleanup"
    schedule = "*/5 * * * *"
    [jobs.http]
    url = "http://127.0.0.1:8000/tasks/cleanup"

:func:`load_config` reads and checks the whole file and raises one
:class:`~cronrace.errors.ConfigError` listing every problem, one line each, naming the
job, the field and the value. :class:`Sidecar` turns a checked config into a running agent.
"""

from __future__ import annotations

import json
import time
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from cronrace.agent import Agent
from cronrace.config import SidecarSettings, settings_problems, short_repr
from cronrace.errors import ConfigError, CronraceError, ScheduleError
from cronrace.job import JOB_NAME_PATTERN, Handler
from cronrace.metrics import MetricsServer, PrometheusObserver
from cronrace.policies import Catchup, Overlap
from cronrace.schedule import Schedule
from cronrace.targets import (
    CommandSpec,
    CommandTarget,
    HttpSpec,
    HttpTarget,
    StreamSpec,
    StreamTarget,
)

#: The target tables a job may have; exactly one of them.
TARGET_KINDS = ("http", "command", "stream")


class JobSpec(BaseModel):
    """One ``[[jobs]]`` table: the job's definition and its one target.

    The fields are those of :meth:`cronrace.Agent.add_job` (``lease_ttl`` and
    ``catchup_window`` in seconds), plus the target table.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    schedule: str
    timezone: str = "UTC"
    overlap: Overlap = Overlap.SKIP
    catchup: Catchup = Catchup.LATEST
    catchup_window: float = Field(default=300.0, ge=0)
    lease_ttl: float = Field(default=30.0, ge=0.1)
    max_catchup: int = Field(default=100, ge=1)
    history: int = Field(default=1000, ge=1)
    overrun_ratio: float = Field(default=0.8, ge=0)
    http: HttpSpec | None = None
    command: CommandSpec | None = None
    stream: StreamSpec | None = None

    @field_validator("name")
    @classmethod
    def _check_name(cls, value: str) -> str:
        if not JOB_NAME_PATTERN.fullmatch(value):
            raise ValueError(
                "use 1-128 letters, digits, '_', '.', '-', starting with a letter or digit"
            )
        return value

    @field_validator("schedule")
    @classmethod
    def _check_schedule(cls, value: str, info: ValidationInfo) -> str:
        # H hashes the job's name; a name that failed its own check still names the job.
        name = info.data.get("name")
        try:
            Schedule.parse(value, job=name if isinstance(name, str) else "job")
        except ScheduleError as exc:
            raise ValueError(exc.reason) from None
        return value

    @field_validator("timezone")
    @classmethod
    def _check_timezone(cls, value: str) -> str:
        try:
            Schedule.parse("@every 1s", value)
        except ScheduleError as exc:
            raise ValueError(exc.reason) from None
        return value

    @property
    def target_kind(self) -> str:
        """``http``, ``command`` or ``stream``."""
        kinds = [kind for kind in TARGET_KINDS if getattr(self, kind) is not None]
        if len(kinds) != 1:
            raise ConfigError(f"job {self.name!r}: needs exactly one target, has {kinds}")
        return kinds[0]

    def describe_target(self) -> str:
        """A short human description of the target, for ``validate`` and logs."""
        if self.http is not None:
            return f"http {self.http.method} {self.http.safe_url}"
        if self.command is not None:
            return "command " + json.dumps(self.command.argv)  # a list, never a shell line
        if self.stream is not None:
            return f"stream {self.stream.key}"
        return "none"


@dataclass(frozen=True, slots=True)
class SidecarConfig:
    """A checked config file."""

    path: Path
    agent: SidecarSettings
    jobs: tuple[JobSpec, ...]


def _job_label(index: int, raw: Mapping[str, Any]) -> str:
    name = raw.get("name")
    if isinstance(name, str) and name:
        return f"job {name!r}"
    return f"job #{index}"


def _check_jobs(jobs_raw: list[Any], allow_hosts: list[str], problems: list[str]) -> list[JobSpec]:
    jobs: list[JobSpec] = []
    seen: dict[str, int] = {}
    for index, raw in enumerate(jobs_raw, start=1):
        if not isinstance(raw, dict):
            problems.append(f"job #{index}: is not a table; write [[jobs]] entries")
            continue
        label = _job_label(index, raw)
        name = raw.get("name")
        if isinstance(name, str) and name in seen:
            problems.append(f"{label}: name {name!r}: is also the name of job #{seen[name]}")
        elif isinstance(name, str):
            seen[name] = index
        problems.extend(_target_problems(label, raw, allow_hosts))
        try:
            spec = JobSpec.model_validate(raw)
        except ValidationError as exc:
            problems.extend(settings_problems(exc, prefix=label))
            continue
        try:
            # The schedule and the zone are each valid; together they may never fire.
            Schedule.parse(
                spec.schedule, spec.timezone, job=spec.name, fires_after_s=int(time.time())
            )
        except ScheduleError as exc:
            problems.append(f"{label}: schedule {short_repr(spec.schedule)}: {exc.reason}")
        jobs.append(spec)
    return jobs


def _target_problems(label: str, raw: Mapping[str, Any], allow_hosts: list[str]) -> list[str]:
    """Problems of the target tables that field validation does not see."""
    kinds = [f"[jobs.{kind}]" for kind in TARGET_KINDS if kind in raw]
    if not kinds:
        return [
            f"{label}: target: is required; add one of [jobs.http], [jobs.command], [jobs.stream]"
        ]
    if len(kinds) > 1:
        return [f"{label}: targets {', '.join(kinds)}: a job has exactly one"]
    if "http" not in raw:
        return []
    try:
        http = HttpSpec.model_validate(raw["http"])
    except ValidationError:
        # The table's bad fields are reported with the job's other fields; its URL may
        # still be valid and not allowed, which must be said in the same run.
        table = raw["http"]
        try:
            http = HttpSpec.model_validate({"url": table.get("url")})
        except (ValidationError, AttributeError):
            return []
    if problem := http.host_problem(allow_hosts):
        return [f"{label}: http.url {http.safe_url!r}: {problem}"]
    return []


def load_config(path: str | Path, **overrides: Any) -> SidecarConfig:
    """Read and check a config file; report every problem at once.

    Args:
        path: the TOML file.
        **overrides: agent settings that beat both the file and the environment
            (command-line flags); None values are ignored.

    Raises:
        ConfigError: one line per problem, each starting with the file's path.
    """
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: is not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    problems: list[str] = [
        f"{key!r}: unknown table; a config has [agent] and [[jobs]]"
        for key in data
        if key not in ("agent", "jobs")
    ]
    agent_table = data.get("agent", {})
    if not isinstance(agent_table, dict):
        problems.append("agent: is not a table; write [agent]")
        agent_table = {}
    jobs_raw = data.get("jobs", [])
    if not isinstance(jobs_raw, list):
        problems.append("jobs: is not an array of tables; write [[jobs]]")
        jobs_raw = []
    elif not jobs_raw:
        problems.append("jobs: none defined; add a [[jobs]] table")
    settings: SidecarSettings | None = None
    try:
        settings = SidecarSettings.from_table(agent_table, **overrides)
    except ValidationError as exc:
        problems.extend(settings_problems(exc, prefix="agent"))
    if settings is not None:
        allow_hosts = settings.allow_hosts
    else:
        raw_hosts = agent_table.get("allow_hosts", [])
        allow_hosts = [str(host).lower() for host in raw_hosts if isinstance(raw_hosts, list)]
    jobs = _check_jobs(jobs_raw, allow_hosts, problems)
    if problems or settings is None:
        raise ConfigError([f"{path}: {line}" for line in problems])
    return SidecarConfig(path=path, agent=settings, jobs=tuple(jobs))


def make_target(spec: JobSpec, agent: Agent, settings: SidecarSettings) -> Handler:
    """Build the handler of one job spec.

    Raises:
        TargetError: the target cannot be built (e.g. a host not allowed).
    """
    if spec.http is not None:
        return HttpTarget(spec.http, allow_hosts=settings.allow_hosts)
    if spec.command is not None:
        return CommandTarget(spec.command)
    if spec.stream is not None:
        return StreamTarget(
            spec.stream, agent_store=lambda: agent.store, timeout_s=settings.redis_timeout_s
        )
    raise ConfigError(f"job {spec.name!r}: needs exactly one target")


def build_agent(config: SidecarConfig, observer: PrometheusObserver | None = None) -> Agent:
    """Create an agent with every job of ``config``."""
    agent = Agent(settings=config.agent, observer=observer)
    for spec in config.jobs:
        agent.add_job(
            make_target(spec, agent, config.agent),
            spec.schedule,
            name=spec.name,
            timezone=spec.timezone,
            overlap=spec.overlap,
            catchup=spec.catchup,
            lease_ttl=spec.lease_ttl,
            catchup_window=spec.catchup_window,
            max_catchup=spec.max_catchup,
            history=spec.history,
            overrun_ratio=spec.overrun_ratio,
        )
    return agent


class Sidecar:
    """An agent built from a config file, with its metrics and probe endpoint.

    Args:
        config: a checked config (see :func:`load_config`).
    """

    def __init__(self, config: SidecarConfig) -> None:
        self.config = config
        self.observer = PrometheusObserver()
        self.agent = build_agent(config, self.observer)
        self.observer.describe(self.agent.node_id, config.agent.namespace)
        bind = config.agent.metrics_bind
        self.metrics: MetricsServer | None = None
        if bind is not None:
            self.metrics = MetricsServer.for_agent(
                self.agent,
                self.observer,
                bind[0],
                bind[1],
                status_page=config.agent.status_page,
                actions=config.agent.status_page_actions,
            )

    @classmethod
    def from_file(cls, path: str | Path, **overrides: Any) -> Sidecar:
        """Load, check and build; raises ConfigError listing every problem."""
        return cls(load_config(path, **overrides))

    def start_metrics(self) -> None:
        """Serve ``/metrics``, ``/healthz``, ``/readyz`` (unless disabled).

        Raises:
            ConfigError: the address cannot be bound.
        """
        if self.metrics is None:
            return
        try:
            self.metrics.start()
        except OSError as exc:
            address = self.config.agent.metrics_address
            raise ConfigError(
                f"agent: metrics_address {address!r}: cannot listen: {exc.strerror or exc}"
            ) from None

    def stop_metrics(self) -> None:
        if self.metrics is not None:
            self.metrics.stop()

    def run_sync(self) -> None:
        """Serve metrics and run the agent until SIGTERM or SIGINT."""
        self.start_metrics()
        try:
            self.agent.run_sync()
        finally:
            self.stop_metrics()

    async def run(self) -> None:
        """Serve metrics and run the agent until :meth:`stop` or cancellation."""
        self.start_metrics()
        try:
            await self.agent.run()
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(self.stop_metrics)

    def stop(self) -> None:
        """Ask the agent to stop (runs get the shutdown grace)."""
        self.agent.stop()


def check_file(path: str | Path) -> SidecarConfig:
    """Load and check ``path`` and build every target (what ``cronrace validate`` does).

    Raises:
        ConfigError: every problem, one line each.
    """
    config = load_config(path)
    try:
        build_agent(config)
    except CronraceError as exc:
        raise ConfigError(f"{config.path}: {exc}") from None
    return config
