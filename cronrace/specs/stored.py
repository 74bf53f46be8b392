"""A stored schedule's definition: checked like a ``[[jobs]]`` table, kept as JSON.

A stored schedule names a handler registered on the agents (``handler`` plus its
``args``, library) or carries a target table (``http``, ``command``, ``stream``,
sidecar), and the policies of any job. It is checked by :func:`cronrace.specs.jobspec.check_spec`,
the code that checks a config file's jobs, so the same definition is refused in both
places for the same reason (a host not allowed, argv not a list, a schedule that never
fires...). In Redis it is compact JSON without its name and without fields at their
defaults; its :meth:`~ScheduleSpec.digest` names one definition exactly.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import orjson
import tomli_w
from pydantic import Field, JsonValue, field_validator

from cronrace.errors import ConfigError, JobDefinitionError
from cronrace.model.job import Handler, Job, RunContext, job_name_problem
from cronrace.specs.jobspec import PARSED_LATER, JobSpec, check_spec

#: A definition (JSON) larger than this is refused: 10,000 schedules must fit in Redis.
MAX_DEFINITION_BYTES = 16_384


def _no_nulls(value: JsonValue, where: str) -> None:
    if value is None:
        raise ValueError(f"{where} is null; TOML (apply, export) has no null: leave it out")
    if isinstance(value, dict):
        for key, item in value.items():
            _no_nulls(item, f"{where}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _no_nulls(item, f"{where}[{index}]")


class ScheduleSpec(JobSpec):
    """A stored schedule: a job's fields plus a handler name and its args, or a target.

    Attributes:
        handler: the name a handler was registered under (``@agent.handler(name)``).
        args: JSON values handed to the handler as ``ctx.args``.
    """

    TABLE: ClassVar[str] = "schedules"
    TARGET_ALTERNATIVES: ClassVar[tuple[str, ...]] = ("handler",)

    handler: str | None = None
    args: dict[str, JsonValue] = Field(default_factory=dict)

    @field_validator("handler")
    @classmethod
    def _check_handler(cls, value: str | None) -> str | None:
        if value is not None and (problem := job_name_problem(value)):
            raise ValueError(problem)
        return value

    @field_validator("args")
    @classmethod
    def _check_args(cls, value: dict[str, JsonValue]) -> dict[str, JsonValue]:
        _no_nulls(value, "args")
        return value

    def definition(self) -> dict[str, Any]:
        """The fields that differ from their defaults, as JSON values (without the name)."""
        return self.model_dump(mode="json", exclude_defaults=True, exclude={"name"})

    def to_json(self) -> bytes:
        """The stored form: compact JSON, keys sorted (equal definitions, equal bytes)."""
        return orjson.dumps(self.definition(), option=orjson.OPT_SORT_KEYS)

    def digest(self) -> str:
        """A short hash of the whole definition, name included (16 hex digits)."""
        return hashlib.sha256(self.name.encode() + b"\0" + self.to_json()).hexdigest()[:16]

    def describe(self) -> str:
        """What it runs: ``handler send_report`` or the target's description."""
        if self.handler is not None:
            return f"handler {self.handler}"
        return self.describe_target()

    @classmethod
    def from_json(cls, name: str, raw: bytes, *, parse_schedule: bool = True) -> ScheduleSpec:
        """Read a stored definition (no checks against this node's settings).

        Args:
            name: the schedule's name (the hash field it is stored under).
            raw: the stored JSON.
            parse_schedule: False when the caller parses the schedule and zone next
                (:func:`build_job` does): a node reading 10,000 parses each once.

        Raises:
            ValueError: not JSON, or not a valid definition (garbage in Redis).
        """
        data = orjson.loads(raw)
        if not isinstance(data, dict):
            raise ValueError("the stored definition is not a JSON object")  # noqa: TRY004
        context = None if parse_schedule else {PARSED_LATER: True}
        return cls.model_validate({**data, "name": name}, context=context)


def check_schedule(raw: Mapping[str, Any], *, allow_hosts: list[str]) -> ScheduleSpec:
    """Check a definition fully, as a config file's job would be; return it.

    Raises:
        JobDefinitionError: one line with every problem, naming the schedule, the field
            and the value.
    """
    spec, problems = check_spec(ScheduleSpec, 1, dict(raw), allow_hosts)
    if spec is not None and not problems and len(spec.to_json()) > MAX_DEFINITION_BYTES:
        problems.append(
            f"job {spec.name!r}: definition is {len(spec.to_json())} bytes of JSON; "
            f"at most {MAX_DEFINITION_BYTES} (keep big data elsewhere and pass its key)"
        )
    if problems or spec is None:
        raise JobDefinitionError("; ".join(problems))
    return spec


def with_args(handler: Handler, args: Mapping[str, Any]) -> Handler:
    """Wrap ``handler`` so that its RunContext carries ``args`` (async stays async)."""
    frozen = dict(args)
    if inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(
        getattr(handler, "__call__", None)  # noqa: B004
    ):

        @functools.wraps(handler)
        async def run_async(ctx: RunContext) -> Any:
            ctx.args = frozen
            return await handler(ctx)

        return run_async

    @functools.wraps(handler)
    def run_sync(ctx: RunContext) -> Any:
        ctx.args = frozen
        return handler(ctx)

    return run_sync


def build_job(spec: ScheduleSpec, handler: Handler) -> Job:
    """The job a node runs for a stored schedule, its handler already resolved.

    Raises:
        CronraceError: the definition cannot run here (e.g. its zone is unknown to this
            node's tzdata).
    """
    runs = with_args(handler, spec.args) if spec.handler is not None else handler
    return Job.define(runs, spec.schedule, **spec.job_options())


def load_schedules(path: Path, *, allow_hosts: list[str]) -> list[ScheduleSpec]:
    """Read and check a file of ``[[schedules]]`` tables (``cronrace schedules apply``).

    Raises:
        ConfigError: every problem, one line each, starting with the file's path.
    """
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: is not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    problems = [
        f"{key!r}: unknown table; a schedules file has [[schedules]] only"
        for key in data
        if key != "schedules"
    ]
    tables = data.get("schedules", [])
    if not isinstance(tables, list):
        problems.append("schedules: is not an array of tables; write [[schedules]]")
        tables = []
    specs: list[ScheduleSpec] = []
    seen: set[str] = set()
    for index, raw in enumerate(tables, start=1):
        spec, found = check_spec(ScheduleSpec, index, raw, allow_hosts)
        problems.extend(found)
        if spec is not None and spec.name in seen:
            problems.append(f"job {spec.name!r}: name {spec.name!r}: appears twice")
        if spec is not None and not found:
            seen.add(spec.name)
            specs.append(spec)
    if problems:
        raise ConfigError([f"{path}: {line}" for line in problems])
    return specs


def dump_schedules(specs: list[ScheduleSpec]) -> str:
    """The ``[[schedules]]`` TOML of ``specs`` (what ``export`` prints; ``apply`` reads it)."""
    tables = [spec.model_dump(mode="json", exclude_defaults=True) for spec in specs]
    return tomli_w.dumps({"schedules": tables})
