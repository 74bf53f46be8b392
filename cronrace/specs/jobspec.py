"""A job written as data: a ``[[jobs]]`` table of a config file, or a stored schedule.

Both are checked here, by the same rules, so that a stored schedule is refused exactly when
the same job in a config file would be: every field, the target table (exactly one; the
HTTP host loopback or allowed, argv a list), and whether the schedule ever fires in its
zone. :func:`check_spec` returns every problem at once, one line each, naming the job,
the field and the value.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any, ClassVar, TypeVar, cast

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from cronrace.errors import ConfigError, ScheduleError
from cronrace.model.job import (
    DEFAULT_CATCHUP,
    DEFAULT_OVERLAP,
    JOB_DEFAULTS,
    JOB_OPTION_NAMES,
    JobOptions,
    job_name_problem,
)
from cronrace.model.policies import Catchup, Overlap
from cronrace.settings import settings_problems, short_repr
from cronrace.specs.targets import CommandSpec, HttpSpec, StreamSpec
from cronrace.timing.schedule import Schedule

#: The target tables a job may have; exactly one of them.
TARGET_KINDS = ("http", "command", "stream")

Spec = TypeVar("Spec", bound="JobSpec")

#: Validation context key: the schedule and zone are parsed by the caller right after
#: (building the job parses them anyway), so the model need not parse them twice.
PARSED_LATER = "schedule_parsed_later"


class JobSpec(BaseModel):
    """One ``[[jobs]]`` table: the job's definition and its one target.

    The fields are those of :meth:`cronrace.Agent.add_job` (``lease_ttl`` and
    ``catchup_window`` in seconds), plus the target table.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    #: The TOML array of tables these specs are written in.
    TABLE: ClassVar[str] = "jobs"
    #: What may stand instead of a target table (a stored schedule's handler).
    TARGET_ALTERNATIVES: ClassVar[tuple[str, ...]] = ()

    # The options of cronrace.model.job.JobOptions, with its defaults and Job.define's limits.
    name: str = Field(description="the job's name; part of every key or row of the job")
    schedule: str = Field(
        description="5-field cron, 6-field cron with seconds first, an alias (@hourly, "
        "@daily, @weekly, @monthly, @yearly) or @every <duration>; H, L, W, # and wrapping "
        "ranges as described in the schedule language"
    )
    timezone: str = JOB_DEFAULTS["timezone"]
    overlap: Overlap = DEFAULT_OVERLAP
    catchup: Catchup = DEFAULT_CATCHUP
    catchup_window: float = Field(default=JOB_DEFAULTS["catchup_window"], ge=0)
    lease_ttl: float = Field(default=JOB_DEFAULTS["lease_ttl"], ge=0.1)
    max_catchup: int = Field(default=JOB_DEFAULTS["max_catchup"], ge=1)
    history: int = Field(default=JOB_DEFAULTS["history"], ge=1)
    overrun_ratio: float = Field(default=JOB_DEFAULTS["overrun_ratio"], ge=0)
    http: HttpSpec | None = None
    command: CommandSpec | None = None
    stream: StreamSpec | None = None

    @field_validator("name")
    @classmethod
    def _check_name(cls, value: str) -> str:
        if problem := job_name_problem(value):
            raise ValueError(problem)
        return value

    @field_validator("schedule")
    @classmethod
    def _check_schedule(cls, value: str, info: ValidationInfo) -> str:
        if info.context and info.context.get(PARSED_LATER):
            return value
        # H hashes the job's name; a name that failed its own check still names the job.
        name = info.data.get("name")
        try:
            Schedule.parse(value, job=name if isinstance(name, str) else "job")
        except ScheduleError as exc:
            raise ValueError(exc.reason) from None
        return value

    @field_validator("timezone")
    @classmethod
    def _check_timezone(cls, value: str, info: ValidationInfo) -> str:
        if info.context and info.context.get(PARSED_LATER):
            return value
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

    def job_options(self) -> JobOptions:
        """The keyword arguments of :meth:`cronrace.Agent.add_job` this spec sets."""
        options: dict[str, Any] = {key: getattr(self, key) for key in JOB_OPTION_NAMES}
        return cast(JobOptions, options)


def _label(index: int, raw: Mapping[str, Any]) -> str:
    name = raw.get("name")
    if isinstance(name, str) and name:
        return f"job {name!r}"
    return f"job #{index}"


def check_spec(
    model: type[Spec], index: int, raw: object, allow_hosts: list[str]
) -> tuple[Spec | None, list[str]]:
    """Check one table; return the spec (None when unusable) and every problem.

    Args:
        model: :class:`JobSpec` or a subclass (a stored schedule).
        index: the table's place in its file (1-based), to name a table without a name.
        raw: the table as read from TOML (or built from arguments).
        allow_hosts: the hosts HTTP targets may call besides loopback.
    """
    if not isinstance(raw, dict):
        return None, [f"job #{index}: is not a table; write [[{model.TABLE}]] entries"]
    label = _label(index, raw)
    problems = target_problems(model, label, raw, allow_hosts)
    try:
        spec = model.model_validate(raw)
    except ValidationError as exc:
        return None, problems + settings_problems(exc, prefix=label)
    try:
        # The schedule and the zone are each valid; together they may never fire.
        Schedule.parse(spec.schedule, spec.timezone, job=spec.name, fires_after_s=int(time.time()))
    except ScheduleError as exc:
        problems.append(f"{label}: schedule {short_repr(spec.schedule)}: {exc.reason}")
    return spec, problems


def target_problems(
    model: type[JobSpec], label: str, raw: Mapping[str, Any], allow_hosts: list[str]
) -> list[str]:
    """Problems of the target tables that field validation does not see."""
    table = model.TABLE
    kinds = [f"[{table}.{kind}]" for kind in TARGET_KINDS if kind in raw]
    kinds += [field for field in model.TARGET_ALTERNATIVES if raw.get(field) is not None]
    if not kinds:
        wanted = ", ".join(
            [*model.TARGET_ALTERNATIVES, *(f"[{table}.{kind}]" for kind in TARGET_KINDS)]
        )
        return [f"{label}: target: is required; add one of {wanted}"]
    if len(kinds) > 1:
        return [f"{label}: targets {', '.join(kinds)}: a job has exactly one"]
    if "http" not in raw:
        return []
    try:
        http = HttpSpec.model_validate(raw["http"])
    except ValidationError:
        # The table's bad fields are reported with the job's other fields; its URL may
        # still be valid and not allowed, which must be said in the same run.
        table_raw = raw["http"]
        try:
            http = HttpSpec.model_validate({"url": table_raw.get("url")})
        except (ValidationError, AttributeError):
            return []
    if problem := http.host_problem(allow_hosts):
        return [f"{label}: http.url {http.safe_url!r}: {problem}"]
    return []
