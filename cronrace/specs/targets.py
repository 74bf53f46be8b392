"""A sidecar job's target as data: ``[jobs.http]``, ``[jobs.command]``, ``[jobs.stream]``.

Each spec checks its table fully when a config file or a stored schedule is read, so that a
mistake is one line naming the job, the field and the value before anything runs. What a
target does at its tick is :mod:`cronrace.sidecar.targets` and
:mod:`cronrace.sidecar.streams`.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from cronrace.stores.urls import REDIS_SCHEMES, check_store_url, scheme_of

if TYPE_CHECKING:
    import httpx

#: Host names that always mean this machine; every other name must be allowed explicitly.
LOOPBACK_NAMES = frozenset({"localhost"})
#: Headers the HTTP target sets itself; a config may not override them.
RESERVED_HEADERS = frozenset(
    {"x-cronrace-job", "x-cronrace-tick", "x-cronrace-fence", "idempotency-key", "host"}
)
#: Environment variables the command target sets itself.
RESERVED_ENV = frozenset(
    {"CRONRACE_JOB", "CRONRACE_TICK", "CRONRACE_FENCE", "CRONRACE_NODE", "CRONRACE_IDEMPOTENCY_KEY"}
)

_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")


def _url(value: str) -> httpx.URL:
    """Parse a URL as the HTTP target will send it.

    httpx (and, through it, rich) is imported here, by the first HTTP spec read: an agent
    whose jobs are code, and every module of handlers, never pays for it.
    """
    import httpx

    return httpx.URL(value)


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an IP literal) is this machine's loopback."""
    host = host.lower().strip("[]")
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class HttpSpec(BaseModel):
    """``[jobs.http]``: one HTTP request per tick.

    Attributes:
        url: ``http://`` or ``https://``; the host must be loopback unless the agent's
            ``allow_hosts`` names it.
        method: GET, POST (default), PUT, PATCH or DELETE.
        headers: extra request headers (the cronrace ones cannot be overridden).
        body: the request body, sent as is.
        timeout_s: the whole request, connect to last byte.
        accept_status: the status codes that mean success; empty means any 2xx.
            Redirects are never followed.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str
    method: Literal["GET", "POST", "PUT", "PATCH", "DELETE"] = "POST"
    headers: dict[str, str] = Field(default_factory=dict)
    body: str | None = None
    timeout_s: float = Field(default=30.0, gt=0)
    accept_status: list[int] = Field(default_factory=list)

    @field_validator("url")
    @classmethod
    def _check_url(cls, value: str) -> str:
        from httpx import InvalidURL

        try:
            url = _url(value)
        except InvalidURL as exc:
            raise ValueError(f"is not a URL: {exc}") from None
        if url.scheme not in ("http", "https") or not url.host:
            raise ValueError("must be an http:// or https:// URL with a host")
        return value

    @field_validator("method", mode="before")
    @classmethod
    def _upper_method(cls, value: object) -> object:
        if isinstance(value, str) and value.upper() in _METHODS:
            return value.upper()
        return value

    @field_validator("headers")
    @classmethod
    def _check_headers(cls, value: dict[str, str]) -> dict[str, str]:
        for name, header in value.items():
            if not _HEADER_NAME.fullmatch(name):
                raise ValueError(f"header name {name!r} is not a valid HTTP token")
            if name.lower() in RESERVED_HEADERS:
                raise ValueError(f"header {name!r} is set by cronrace and cannot be overridden")
            if "\r" in header or "\n" in header:
                raise ValueError(f"header {name!r} has a line break in its value")
        return value

    @field_validator("accept_status")
    @classmethod
    def _check_status(cls, value: list[int]) -> list[int]:
        for code in value:
            if not 100 <= code <= 599:
                raise ValueError(f"status {code} is not an HTTP status code (100-599)")
        return value

    @property
    def host(self) -> str:
        return _url(self.url).host

    @property
    def safe_url(self) -> str:
        """The URL without its password, for logs, errors and run records."""
        url = _url(self.url)
        if not url.password:
            return self.url
        return str(url.copy_with(username=url.username, password="***"))  # noqa: S106 - a mask

    def host_problem(self, allow_hosts: Sequence[str]) -> str | None:
        """Why this URL may not be called from a sidecar, or None when it may."""
        if is_loopback(self.host) or self.host.lower() in allow_hosts:
            return None
        return (
            f"host {self.host!r} is not loopback; add it to the agent's allow_hosts "
            "if this sidecar may call it"
        )

    def accepts(self, status: int) -> bool:
        return status in self.accept_status if self.accept_status else 200 <= status < 300


class CommandSpec(BaseModel):
    """``[jobs.command]``: one process per tick, started from an argv list, never a shell.

    Attributes:
        argv: the program and its arguments, each passed literally.
        env: extra environment variables.
        inherit_env: start from the agent's environment (without its ``CRONRACE_*``
            variables, which may hold the Redis password); False starts from nothing.
        cwd: the working directory.
        timeout_s: the process group is killed after this long.
        kill_grace_s: between SIGTERM and SIGKILL when the group is killed.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    argv: list[str] = Field(min_length=1)
    env: dict[str, str] = Field(default_factory=dict)
    inherit_env: bool = True
    cwd: str | None = None
    timeout_s: float = Field(default=3600.0, gt=0)
    kill_grace_s: float = Field(default=3.0, ge=0)

    @field_validator("argv", mode="before")
    @classmethod
    def _no_shell_string(cls, value: object) -> object:
        if isinstance(value, str):  # pydantic reports ValueError only, not TypeError
            raise ValueError(  # noqa: TRY004
                'must be a list such as ["backup", "--full"]: a string is never given to a shell'
            )
        return value

    @field_validator("argv")
    @classmethod
    def _check_argv(cls, value: list[str]) -> list[str]:
        if not value[0]:
            raise ValueError("the program (first element) is empty")
        if any("\0" in arg for arg in value):
            raise ValueError("an argument contains a NUL byte")
        return value

    @field_validator("env")
    @classmethod
    def _check_env(cls, value: dict[str, str]) -> dict[str, str]:
        for name, item in value.items():
            if not _ENV_NAME.fullmatch(name):
                raise ValueError(f"{name!r} is not an environment variable name")
            if name in RESERVED_ENV:
                raise ValueError(f"{name!r} is set by cronrace and cannot be overridden")
            if "\0" in item:
                raise ValueError(f"{name!r} contains a NUL byte")
        return value


#: Entry fields cronrace sets; a stream target's ``fields`` cannot override them.
RESERVED_FIELDS = frozenset({"job", "tick", "fence", "node", "idempotency_key", "trigger_id"})


class StreamSpec(BaseModel):
    """``[jobs.stream]``: one stream entry per tick, the hand-off to a worker queue.

    Attributes:
        key: the stream's key.
        redis_url: the Redis holding it; default: the agent's own Redis.
        maxlen: trim the stream to about this many entries; default: never trim.
        fields: extra fields of every entry.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    key: str = Field(min_length=1, max_length=512)
    redis_url: str | None = None
    maxlen: int | None = Field(default=None, ge=1)
    fields: dict[str, str] = Field(default_factory=dict)

    @field_validator("key")
    @classmethod
    def _check_key(cls, value: str) -> str:
        if not value.isprintable() or value != value.strip():
            raise ValueError("use printable characters without surrounding spaces")
        return value

    @field_validator("redis_url")
    @classmethod
    def _check_url(cls, value: str | None) -> str | None:
        if value is not None:
            if scheme_of(value) not in REDIS_SCHEMES:
                raise ValueError("a stream target writes to Redis: give a redis:// URL")
            check_store_url(value)
        return value

    @field_validator("fields")
    @classmethod
    def _check_fields(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if name in RESERVED_FIELDS:
                raise ValueError(f"field {name!r} is set by cronrace and cannot be overridden")
        return value
