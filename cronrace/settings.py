"""Agent settings: from keyword arguments, ``CRONRACE_*`` environment variables, or TOML.

``AgentSettings`` is what an :class:`~cronrace.Agent` runs with. ``SidecarSettings`` adds
what the sidecar process needs (the metrics address, the HTTP host allow-list) and reads
the ``[agent]`` table of a config file below the environment, so a container can keep one
file and override any field with ``CRONRACE_<FIELD>``.
"""

from __future__ import annotations

import ipaddress
import os
import re
import secrets
import socket
from collections.abc import Mapping
from contextvars import ContextVar
from typing import Any

from pydantic import AliasChoices, Field, ValidationError, ValidationInfo, field_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from cronrace.errors import ConfigError, warn_renamed
from cronrace.fleet.racer_setting import Racers
from cronrace.stores.urls import check_store_url
from cronrace.stores.urls import is_embedded as is_embedded  # re-exported: agent, cli
from cronrace.stores.urls import redact_url as redact_url  # re-exported: cli, targets

ENV_PREFIX = "CRONRACE_"
HOST_PATTERN = re.compile(r"^[a-z0-9_](?:[a-z0-9_-]{0,62})(?:\.[a-z0-9_-]{1,63})*$")
NAMESPACE_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
#: ``store_url`` is also read under its name before PostgreSQL, ``redis_url`` (and
#: ``CRONRACE_REDIS_URL``), with a :class:`CronraceDeprecationWarning`; the new name wins
#: where both are given to one source.
STORE_URL_NAMES = AliasChoices("store_url", "redis_url", "CRONRACE_STORE_URL", "CRONRACE_REDIS_URL")
STORE_URL_HELP = (
    "redis://, rediss:// (TLS), unix://, redis+sentinel://, redis+cluster:// (and their "
    "rediss+ forms), postgresql:// (PostgreSQL, `pip install 'cronrace[postgres]'`), or "
    "memory:// (embedded, one process)"
)


def default_node_id() -> str:
    """Return ``<host>-<pid>-<random>``: unique per process, readable in logs."""
    host = socket.gethostname().split(".")[0] or "node"
    return f"{host}-{os.getpid()}-{secrets.token_hex(3)}"


class _OneName(PydanticBaseSettingsSource):
    """A source whose ``redis_url`` is read as ``store_url`` (its own ``store_url`` wins), so
    that every source gives the store's URL under one key and the sources' priority holds:
    a flag named ``--redis-url`` still beats ``CRONRACE_STORE_URL``, which beats the file.

    Args:
        old: how the deprecation warning names ``redis_url`` in this source; None: no
            warning here. The keyword arguments of ``AgentSettings(...)`` itself are not
            warned about yet: the scheduler model's tests still pass ``redis_url=``
            (tests/model/scheduler.py); ``Agent(redis_url=...)`` and ``load_settings`` warn.
        new: how it names ``store_url`` there.
    """

    def __init__(
        self,
        settings_cls: type[BaseSettings],
        inner: PydanticBaseSettingsSource,
        old: str | None = None,
        new: str = "store_url",
    ):
        super().__init__(settings_cls)
        self.inner = inner
        self.old, self.new = old, new

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        data = dict(self.inner())
        if "redis_url" in data:
            if self.old is not None:
                warn_renamed(self.old, self.new, stacklevel=4)
            older = data.pop("redis_url")
            data.setdefault("store_url", older)
        return data


class _Environment(PydanticBaseSettingsSource):
    """The ``CRONRACE_*`` variables, warning when ``CRONRACE_REDIS_URL`` is among them."""

    def __init__(self, settings_cls: type[BaseSettings], inner: PydanticBaseSettingsSource):
        super().__init__(settings_cls)
        self.inner = inner

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        names = {name.upper() for name in os.environ}
        if f"{ENV_PREFIX}REDIS_URL" in names:
            new = f"{ENV_PREFIX}STORE_URL"
            ignored = f" ({new} is set, and wins)" if new in names else ""
            warn_renamed(f"{ENV_PREFIX}REDIS_URL{ignored}", new, stacklevel=4)
        return dict(self.inner())


class AgentSettings(BaseSettings):
    """How one agent process connects and behaves.

    Every field can be set as ``CRONRACE_<FIELD>`` in the environment.
    """

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid")

    store_url: str = Field(
        default="memory://", validation_alias=STORE_URL_NAMES, description=STORE_URL_HELP
    )
    node_id: str = Field(
        default_factory=default_node_id,
        description="this node's name in claims, leases and logs; unique per process",
    )
    namespace: str = Field(
        default="cronrace",
        description="key prefix (a Redis store) or row scope (PostgreSQL): fleets with "
        "different namespaces share one store without seeing each other; 1-64 letters, "
        "digits, '_', '.', '-'",
    )
    heartbeat_s: float = Field(
        default=2.0,
        gt=0,
        description="heartbeat, clock-offset and epoch check period, in seconds; a member "
        "silent for 1.5 heartbeats counts as departed",
    )
    shutdown_grace_s: float = Field(
        default=30.0,
        ge=0,
        description="on SIGTERM: start no new wake-up, finish deciding the one in hand and "
        "wait for runs, all within this long, then cancel (a second signal cancels at once)",
    )
    clock: str = Field(
        default="redis",
        pattern="^(redis|local)$",
        description="'redis': schedule on the store server's clock (offset estimated "
        "NTP-style with each heartbeat), so a node with a skewed clock fires neither early "
        "nor late; 'local': trust this machine's clock",
    )
    skew_tolerance_s: float = Field(
        default=5.0,
        ge=0,
        description="added to a job's catchup_window for the lifetime of its claims",
    )
    live_grace_s: float = Field(
        default=1.0,
        ge=0,
        description="a tick at most this late is on time; a later one is missed and goes "
        "to the job's catch-up policy",
    )
    undecided_claim_s: float = Field(
        default=3.0,
        gt=0,
        description="how long a won claim lives undecided (D): a winner that dies before "
        "deciding holds its tick this long, then the next in line claims it (latency, "
        "not safety)",
    )
    startup_timeout_s: float = Field(
        default=10.0,
        ge=0,
        description="give up (exit 3) when the store is unreachable at start-up this long, "
        "naming the last error; a refusal (password, permission, certificate) fails at once "
        "(exit 4)",
    )
    redis_timeout_s: float = Field(
        default=5.0,
        gt=0,
        description="how long one store call may wait: to connect, for a free pooled "
        "connection, and for its reply (one timer per pipeline); a call past it is "
        "unanswered and read back or retried",
    )
    max_connections: int = Field(
        default=16,
        ge=2,
        description="size of the node's connection pool to the store",
    )
    sync_handler_threads: int = Field(
        default=2,
        ge=1,
        description="how many plain-def handlers may run at once, each in a worker thread "
        "(CPU-bound threads take the GIL from the event loop and delay lease renewals)",
    )
    loop_lag_threshold_s: float = Field(
        default=5.0,
        gt=0,
        description="an event loop this late (a handler blocking it) makes /healthz answer "
        "503 and logs an ERROR",
    )
    claim_replicas: int = Field(
        default=0,
        ge=0,
        description="Redis: when > 0, a won claim runs only once this many replicas "
        "confirm it (WAIT), else it is recorded skipped:not_replicated",
    )
    claim_replicas_timeout_ms: int = Field(
        default=100,
        ge=1,
        description="how long the WAIT of claim_replicas may block, in milliseconds",
    )
    racers: str = Field(
        default="all",
        description="how many live nodes race for each tick: 'all' or an integer k >= 1",
    )
    racer_groups: str = Field(
        default="jobs",
        description="with racers = k: place each job's racers alone ('jobs') or the jobs "
        "in this many groups, so that at most k x groups nodes race at once",
    )
    strict_handlers: bool = Field(
        default=False,
        description="refuse stored schedules naming a handler no live node has registered",
    )
    log_format: str = Field(
        default="text",
        pattern="^(text|json)$",
        description="'text': one line of key=value fields per event; 'json': one JSON "
        "object per line",
    )
    log_level: str = Field(
        default="INFO",
        description="the level of the logging run_sync and the CLI configure (DEBUG, INFO, "
        "WARNING, ERROR), unless the program configured logging itself",
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (
            _OneName(settings_cls, init_settings),
            _Environment(settings_cls, env_settings),
            file_secret_settings,
        )

    @field_validator("namespace")
    @classmethod
    def _check_namespace(cls, value: str) -> str:
        if not NAMESPACE_PATTERN.fullmatch(value):
            raise ValueError("use 1-64 letters, digits, '_', '.', '-'")
        return value

    @field_validator("node_id")
    @classmethod
    def _check_node_id(cls, value: str) -> str:
        if not value or ":" in value or len(value) > 200 or not value.isprintable():
            raise ValueError("use 1-200 printable characters without ':'")
        return value

    @field_validator("racers", mode="before")
    @classmethod
    def _check_racers(cls, value: object) -> str:
        try:
            return str(Racers.parse(value))
        except ValueError:
            raise ValueError("use 'all' or an integer >= 1") from None

    @field_validator("racer_groups", mode="before")
    @classmethod
    def _check_racer_groups(cls, value: object, info: ValidationInfo) -> str:
        try:
            groups = Racers.parse_groups(value)
        except ValueError:
            raise ValueError("use 'jobs' or an integer >= 1") from None
        if groups is not None and info.data.get("racers", "all") == "all":
            raise ValueError("groups place k racers: set racers to an integer k too")
        return "jobs" if groups is None else str(groups)

    @property
    def racer_count(self) -> int | None:
        """How many nodes race for each tick; None: all of them."""
        return Racers.parse(self.racers).k

    @property
    def racer_setting(self) -> Racers:
        """The ``racers`` and ``racer_groups`` settings together."""
        return Racers.parse(self.racers, self.racer_groups)

    @field_validator("store_url")
    @classmethod
    def _check_url(cls, value: str) -> str:
        check_store_url(value)
        return value

    @property
    def redis_url(self) -> str:
        """Deprecated: the store's URL under its older name; read :attr:`store_url`."""
        warn_renamed("AgentSettings.redis_url", "store_url")
        return self.store_url


def load_settings(**overrides: object) -> AgentSettings:
    """Build settings from the environment and ``overrides``; one ConfigError per problem.

    ``redis_url=`` is read as ``store_url=``, with a :class:`CronraceDeprecationWarning`.
    """
    given = {key: value for key, value in overrides.items() if value is not None}
    if "redis_url" in given:
        warn_renamed("redis_url", "store_url")
        given.setdefault("store_url", given.pop("redis_url"))
    try:
        return AgentSettings(**given)  # type: ignore[arg-type]
    except ValidationError as exc:
        raise ConfigError(settings_problems(exc, prefix="agent")) from None


#: What to say about a required field that was not given, after "is required".
MISSING_HINTS = {
    "store_url": (
        ": set it in [agent] or as CRONRACE_STORE_URL. The embedded store is not a default "
        "here (each replica would run every job): for one process alone, write "
        'store_url = "memory://"'
    ),
}


def settings_problems(exc: ValidationError, *, prefix: str) -> list[str]:
    """Turn a pydantic ValidationError into one line per problem: where, field, value, why.

    Args:
        exc: the validation error.
        prefix: what the fields belong to, e.g. ``agent`` or ``job 'backup'``.
    """
    lines = []
    for error in exc.errors():
        where = ".".join(str(part) for part in error["loc"]) or "settings"
        kind = error["type"]
        if kind == "missing":
            lines.append(f"{prefix}: {where}: is required{MISSING_HINTS.get(where, '')}")
            continue
        raw = error.get("input")
        if str(error["loc"][-1]) in ("store_url", "redis_url", "url") and isinstance(raw, str):
            raw = redact_url(raw)  # a bad URL may still carry a good password
        value = short_repr(raw)
        source = ""
        if prefix == "agent" and len(error["loc"]) == 1:
            name = str(error["loc"][0]).upper()
            names = [name, "REDIS_URL"] if name == "STORE_URL" else [name]
            variable = next(
                (f"{ENV_PREFIX}{n}" for n in names if f"{ENV_PREFIX}{n}" in os.environ), ""
            )
            if variable:
                source = f" (from {variable})"
        if kind == "extra_forbidden":
            lines.append(f"{prefix}: {where} {value}{source}: unknown field")
            continue
        message = str(error["msg"]).removeprefix("Value error, ")
        message = message[:1].lower() + message[1:]
        lines.append(f"{prefix}: {where} {value}{source}: {message}")
    return lines


def short_repr(value: object, limit: int = 80) -> str:
    """Return ``repr(value)``, cut to ``limit`` characters for an error line."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# -- the sidecar's [agent] table ----------------------------------------------------------

#: The file's ``[agent]`` table while :meth:`SidecarSettings.from_table` builds settings.
_FILE_TABLE: ContextVar[Mapping[str, Any] | None] = ContextVar("cronrace_file_table", default=None)


class _FileTableSource(PydanticBaseSettingsSource):
    """The ``[agent]`` table of a config file, as the lowest-priority settings source."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return (_FILE_TABLE.get() or {}).get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return dict(_FILE_TABLE.get() or {})


def parse_address(text: str) -> tuple[str, int]:
    """Split ``host:port`` (``[::1]:9464`` for IPv6) into host and port.

    Raises:
        ValueError: the text is not ``host:port`` with a port in 0-65535.
    """
    host, sep, port_text = text.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not sep or not host or not port_text.isdigit() or int(port_text) > 65535:
        raise ValueError("use host:port, e.g. 127.0.0.1:9464 or [::1]:9464; 'off' disables")
    return host, int(port_text)


class SidecarSettings(AgentSettings):
    """The agent settings of a sidecar: the file's ``[agent]`` table, then the environment.

    Sources, highest priority first: keyword arguments (command-line flags),
    ``CRONRACE_*`` environment variables, the config file's ``[agent]`` table, defaults.
    Unlike the library's, ``store_url`` has no default: replicas of a sidecar that fell back
    to the embedded store would each run every job, so ``memory://`` must be asked for.
    """

    store_url: str = Field(
        validation_alias=STORE_URL_NAMES,
        description="redis://, rediss:// (TLS), unix://, postgresql://; memory:// (embedded, "
        "one process) only when written out",
    )

    metrics_address: str = Field(
        default="127.0.0.1:9464",
        description="host:port of /metrics, /healthz and /readyz; 'off' disables them",
    )
    allow_hosts: list[str] = Field(
        default_factory=list,
        description="hosts HTTP targets may call besides loopback (exact names or IPs)",
    )
    status_page: bool = Field(
        default=True, description="serve the status page at / of metrics_address"
    )
    status_page_actions: bool = Field(
        default=False, description="show pause, resume and trigger buttons on the status page"
    )
    stored_targets: list[str] = Field(
        default_factory=lambda: ["http", "stream"],
        description="target kinds stored schedules (in the store) may use here; 'command' "
        "lets whoever writes to the store run programs on this host, so it must be listed",
    )

    @field_validator("stored_targets")
    @classmethod
    def _check_stored_targets(cls, value: list[str]) -> list[str]:
        for kind in value:
            if kind not in ("http", "command", "stream"):
                raise ValueError(f"{kind!r} is not a target kind: use http, command, stream")
        return value

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (
            _OneName(settings_cls, init_settings),
            _Environment(settings_cls, env_settings),
            _OneName(
                settings_cls, _FileTableSource(settings_cls), "[agent] redis_url", "store_url"
            ),
        )

    @classmethod
    def from_table(cls, table: Mapping[str, Any], **overrides: Any) -> SidecarSettings:
        """Build settings from a file's ``[agent]`` table, the environment and ``overrides``.

        Raises:
            pydantic.ValidationError: some field is invalid (every problem at once).
        """
        token = _FILE_TABLE.set(table)
        try:
            return cls(**{key: value for key, value in overrides.items() if value is not None})
        finally:
            _FILE_TABLE.reset(token)

    @field_validator("metrics_address")
    @classmethod
    def _check_metrics_address(cls, value: str) -> str:
        if value.strip().lower() in ("", "off"):
            return "off"
        parse_address(value)
        return value

    @field_validator("allow_hosts")
    @classmethod
    def _check_allow_hosts(cls, value: list[str]) -> list[str]:
        hosts = [host.strip("[]").lower() for host in value]
        for host in hosts:
            if not HOST_PATTERN.fullmatch(host) and not _is_ip(host):
                raise ValueError(f"{host!r} is not a host name or IP address (no ports, no paths)")
        return hosts

    @property
    def metrics_bind(self) -> tuple[str, int] | None:
        """Where to serve metrics and probes, or None when disabled."""
        if self.metrics_address == "off":
            return None
        return parse_address(self.metrics_address)


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True
