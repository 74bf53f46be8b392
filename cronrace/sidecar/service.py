"""The sidecar: jobs from a TOML file, each calling a target, served with metrics and probes.

A config file has one ``[agent]`` table (see :class:`~cronrace.settings.SidecarSettings`;
any field can be overridden by a ``CRONRACE_<FIELD>`` environment variable) and one
``[[jobs]]`` table per job, each with exactly one target table::

    [agent]
    store_url = "redis://127.0.0.1:6379/0"

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

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import TaskStatus
from pydantic import ValidationError

from cronrace.agent.core import Agent
from cronrace.errors import ConfigError, CronraceError, TargetError
from cronrace.model.job import Handler
from cronrace.settings import SidecarSettings, settings_problems
from cronrace.sidecar.streams import OtherRedis, StreamTarget
from cronrace.sidecar.targets import CommandTarget, HttpTarget
from cronrace.specs.jobspec import JobSpec, check_spec
from cronrace.web.metrics import PrometheusObserver
from cronrace.web.probes import MetricsServer


@dataclass(frozen=True, slots=True)
class SidecarConfig:
    """A checked config file."""

    path: Path
    agent: SidecarSettings
    jobs: tuple[JobSpec, ...]


def _check_jobs(jobs_raw: list[Any], allow_hosts: list[str], problems: list[str]) -> list[JobSpec]:
    jobs: list[JobSpec] = []
    seen: dict[str, int] = {}
    for index, raw in enumerate(jobs_raw, start=1):
        if isinstance(raw, dict) and isinstance(raw.get("name"), str):
            name = raw["name"]
            if name in seen:
                problems.append(
                    f"job {name!r}: name {name!r}: is also the name of job #{seen[name]}"
                )
            else:
                seen[name] = index
        spec, found = check_spec(JobSpec, index, raw, allow_hosts)
        problems.extend(found)
        if spec is not None:
            jobs.append(spec)
    return jobs


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


__all__ = ["JobSpec", "Sidecar", "SidecarConfig", "build_agent", "check_file", "load_config"]


def make_target(
    spec: JobSpec, agent: Agent, settings: SidecarSettings, other_redis: OtherRedis
) -> Handler:
    """Build the handler of one job spec (stream targets share ``other_redis``).

    Raises:
        TargetError: the target cannot be built (e.g. a host not allowed).
    """
    if spec.http is not None:
        return HttpTarget(spec.http, allow_hosts=settings.allow_hosts)
    if spec.command is not None:
        return CommandTarget(spec.command)
    if spec.stream is not None:
        return StreamTarget(spec.stream, agent_store=lambda: agent.store, other_redis=other_redis)
    raise ConfigError(f"job {spec.name!r}: needs exactly one target")


def make_stored_target(
    spec: JobSpec, agent: Agent, settings: SidecarSettings, other_redis: OtherRedis
) -> Handler:
    """Build a stored schedule's target, if this sidecar lets stored schedules use its kind.

    Raises:
        TargetError: the kind is not in ``stored_targets``, or the target is refused.
    """
    if spec.target_kind not in settings.stored_targets:
        raise TargetError(
            f"{spec.target_kind} targets from stored schedules are off on this sidecar "
            f"(whoever can write to the store could use them); add {spec.target_kind!r} to "
            "[agent] stored_targets to allow them"
        )
    return make_target(spec, agent, settings, other_redis)


def build_agent(config: SidecarConfig, observer: PrometheusObserver | None = None) -> Agent:
    """Create an agent with every job of ``config``."""
    agent = Agent(settings=config.agent, observer=observer)
    # Stream targets on another Redis keep one store per URL while the agent runs.
    other_redis = OtherRedis(timeout_s=config.agent.redis_timeout_s)
    agent.add_service(other_redis.serve)
    for spec in config.jobs:
        handler = make_target(spec, agent, config.agent, other_redis)
        agent.add_job(handler, spec.schedule, **spec.job_options())
    # Stored schedules with a target table run here too, checked by this file's allow_hosts.
    agent.target_factory = lambda spec: make_stored_target(spec, agent, config.agent, other_redis)
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

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Serve metrics and run the agent until :meth:`stop` or cancellation.

        Args:
            task_status: anyio's ``TaskGroup.start`` protocol, as :meth:`Agent.run`'s:
                ``await task_group.start(sidecar.run)`` returns once the agent is ready.
        """
        self.start_metrics()
        try:
            await self.agent.run(task_status=task_status)
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
