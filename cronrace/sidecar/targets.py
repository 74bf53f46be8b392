"""Sidecar targets: what a job defined in a config file does at its tick.

A target is an async callable taking the :class:`~cronrace.RunContext`, so the agent runs
it like any handler. Each one passes the job, the tick and the run's fence on, so that the
receiving side can refuse a stale holder (DESIGN.md section 9):

=========  ===============================================================================
http       headers ``X-Cronrace-Job``, ``X-Cronrace-Tick``, ``X-Cronrace-Fence`` and
           ``Idempotency-Key: <job>:<tick>``
command    environment ``CRONRACE_JOB``, ``CRONRACE_TICK``, ``CRONRACE_FENCE``
stream     entry fields ``job``, ``tick``, ``fence`` (:mod:`cronrace.sidecar.streams`)
=========  ===============================================================================

A target that fails raises :class:`~cronrace.errors.TargetError`; its one-line message is
the run record's error. What a target returns is the run record's ``detail``.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
import signal
import subprocess
from collections.abc import Sequence
from typing import Any, Literal

import anyio
import httpx
from anyio.abc import ByteReceiveStream, Process
from pydantic import BaseModel, ConfigDict, Field, field_validator

from cronrace.errors import TargetError
from cronrace.model.job import RunContext

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
#: How much of a response body or a command's output is kept for the run record.
KEEP_CHARS = 1000
#: After a command exits, how long its output may still be drained.
DRAIN_AFTER_EXIT_S = 0.5
#: How long a killed process group gets to disappear before we stop waiting.
REAP_TIMEOUT_S = 5.0

_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")


def _tail(text: str, limit: int = KEEP_CHARS) -> str:
    return text if len(text) <= limit else "..." + text[-limit:]


# -- http ---------------------------------------------------------------------------------


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
        try:
            url = httpx.URL(value)
        except httpx.InvalidURL as exc:
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
        return httpx.URL(self.url).host

    @property
    def safe_url(self) -> str:
        """The URL without its password, for logs, errors and run records."""
        url = httpx.URL(self.url)
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


class HttpTarget:
    """Send one HTTP request per run, carrying the job, tick and fence as headers."""

    def __init__(self, spec: HttpSpec, *, allow_hosts: Sequence[str] = ()) -> None:
        problem = spec.host_problem(allow_hosts)
        if problem is not None:
            raise TargetError(f"http url {spec.safe_url!r}: {problem}")
        self.spec = spec

    def headers(self, ctx: RunContext) -> dict[str, str]:
        """The request headers of the run ``ctx``."""
        return {
            "User-Agent": "cronrace",
            **self.spec.headers,
            "X-Cronrace-Job": ctx.job,
            "X-Cronrace-Tick": str(ctx.tick_s),
            "X-Cronrace-Fence": str(ctx.fence),
            "Idempotency-Key": ctx.idempotency_key,
        }

    async def __call__(self, ctx: RunContext) -> dict[str, Any]:
        spec = self.spec
        what = f"{spec.method} {spec.safe_url}"
        body = ""
        status = 0
        location = ""
        # The whole request shares one deadline; httpx's own timeout is per operation.
        with anyio.move_on_after(spec.timeout_s) as deadline:
            try:
                # trust_env=False: a proxy from the environment must not carry the request
                # to a host the allow-list never saw.
                async with (
                    httpx.AsyncClient(
                        timeout=spec.timeout_s, follow_redirects=False, trust_env=False
                    ) as client,
                    client.stream(
                        spec.method, spec.url, headers=self.headers(ctx), content=spec.body
                    ) as response,
                ):
                    status = response.status_code
                    location = response.headers.get("location", "")
                    body = await _read_prefix(response)
            except httpx.HTTPError as exc:
                raise TargetError(f"{what}: {type(exc).__name__}: {exc}") from exc
        if deadline.cancelled_caught:
            raise TargetError(f"{what}: no complete answer within {spec.timeout_s:g}s")
        if not spec.accepts(status):
            moved = f" (redirect to {location!r} not followed)" if location else ""
            raise TargetError(f"{what}: status {status}{moved}: {_tail(body, 300)}")
        return {"status": status, "body": _tail(body, 200)}


async def _read_prefix(response: httpx.Response, limit: int = 64 * 1024) -> str:
    """Read at most ``limit`` bytes of a body: an endless answer must not fill memory."""
    data = bytearray()
    async for chunk in response.aiter_bytes():
        data += chunk
        if len(data) >= limit:
            break
    return data[:limit].decode("utf-8", "replace")


# -- command ------------------------------------------------------------------------------


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


class _Tail:
    """The last bytes of a process's output."""

    def __init__(self, limit: int = 4 * KEEP_CHARS) -> None:
        self.limit = limit
        self.data = bytearray()

    def add(self, chunk: bytes) -> None:
        self.data += chunk
        if len(self.data) > 2 * self.limit:
            del self.data[: -self.limit]

    def text(self) -> str:
        return _tail(bytes(self.data[-self.limit :]).decode("utf-8", "replace").strip())


def _signal_group(pgid: int, signum: int) -> None:
    # The group may be gone already (macOS answers PermissionError for a zombie group).
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


class CommandTarget:
    """Start ``argv`` in a process group of its own; kill the group on timeout or cancel.

    The run's fence travels as ``CRONRACE_FENCE``. The process group is killed (SIGTERM,
    then SIGKILL after ``kill_grace_s``) when the timeout passes, when the run is cancelled
    (lease lost, agent shutting down), and when the main process exits while children it
    left behind are still running: a run ends when its whole group does.
    """

    def __init__(self, spec: CommandSpec) -> None:
        self.spec = spec

    def environment(self, ctx: RunContext) -> dict[str, str]:
        """The environment of the process of run ``ctx``."""
        base = {}
        if self.spec.inherit_env:
            base = {k: v for k, v in os.environ.items() if not k.startswith("CRONRACE_")}
        return {
            **base,
            **self.spec.env,
            "CRONRACE_JOB": ctx.job,
            "CRONRACE_TICK": str(ctx.tick_s),
            "CRONRACE_FENCE": str(ctx.fence),
            "CRONRACE_NODE": ctx.node_id,
            "CRONRACE_IDEMPOTENCY_KEY": ctx.idempotency_key,
        }

    async def __call__(self, ctx: RunContext) -> dict[str, Any]:
        spec = self.spec
        try:
            process = await anyio.open_process(
                spec.argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                cwd=spec.cwd,
                env=self.environment(ctx),
                start_new_session=True,  # its own session, hence its own process group
            )
        except OSError as exc:
            raise TargetError(f"command {spec.argv[0]!r} cannot start: {exc}") from exc
        output = _Tail()
        code: int | None = None
        try:
            with anyio.move_on_after(spec.timeout_s):
                code = await _wait_with_output(process, output)
        finally:
            # Shielded: when the run is cancelled the group must still be killed.
            with anyio.CancelScope(shield=True):
                await _kill_group(process, spec.kill_grace_s if code is None else 0.0)
                await process.aclose()
        if code is None:
            raise TargetError(
                f"command timed out after {spec.timeout_s:g}s and was killed; "
                f"output: {output.text()}"
            )
        if code != 0:
            how = f"exited with code {code}"
            if code < 0:
                how = f"was killed by {signal.Signals(-code).name}"
            raise TargetError(f"command {how}; output: {output.text()}")
        return {"exit_code": code, "output": _tail(output.text(), 200)}


async def _wait_with_output(process: Process, output: _Tail) -> int:
    """Collect output while waiting for the process; return its exit code."""
    assert process.stdout is not None
    drained = anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(_drain, process.stdout, output, drained)
        code = await process.wait()
        # A child left behind may hold the pipe open: do not wait for it forever.
        with anyio.move_on_after(DRAIN_AFTER_EXIT_S):
            await drained.wait()
        tg.cancel_scope.cancel()
    return code


async def _drain(stream: ByteReceiveStream, output: _Tail, drained: anyio.Event) -> None:
    try:
        async for chunk in stream:
            output.add(chunk)
    except (anyio.ClosedResourceError, anyio.BrokenResourceError):
        pass
    finally:
        drained.set()


async def _kill_group(process: Process, grace_s: float) -> None:
    """SIGTERM the group, give the leader ``grace_s`` to exit, then SIGKILL what is left."""
    pgid = process.pid  # start_new_session made the process its group's leader
    if process.returncode is None:
        _signal_group(pgid, signal.SIGTERM)
        with anyio.move_on_after(grace_s):
            await process.wait()
    _signal_group(pgid, signal.SIGKILL)
    with anyio.move_on_after(REAP_TIMEOUT_S):
        await process.wait()
