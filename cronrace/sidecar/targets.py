"""Sidecar targets: what a job defined in a config file does at its tick.

A target is an async callable taking the :class:`~cronrace.RunContext`, so the agent runs
it like any handler. Each one passes the job, the tick and the run's fence on, so that the
receiving side can refuse a stale holder (docs/design.md section 9):

=========  ===============================================================================
http       headers ``X-Cronrace-Job``, ``X-Cronrace-Tick``, ``X-Cronrace-Fence`` and
           ``Idempotency-Key: <job>:<tick>``; ``traceparent`` when traced
command    environment ``CRONRACE_JOB``, ``CRONRACE_TICK``, ``CRONRACE_FENCE``
stream     entry fields ``job``, ``tick``, ``fence`` (:mod:`cronrace.sidecar.streams`)
=========  ===============================================================================

A target that fails raises :class:`~cronrace.errors.TargetError`; its one-line message is
the run record's error. What a target returns is the run record's ``detail``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Sequence
from typing import Any

import anyio
import httpx
from anyio import open_process
from anyio.abc import ByteReceiveStream, Process

from cronrace.errors import TargetError
from cronrace.model.job import RunContext
from cronrace.runtime import tracing
from cronrace.specs.targets import (
    CommandSpec,
    HttpSpec,
)

#: How much of a response body or a command's output is kept for the run record.
KEEP_CHARS = 1000
#: After a command exits, how long its output may still be drained.
DRAIN_AFTER_EXIT_S = 0.5
#: How long a killed process group gets to disappear before we stop waiting.
REAP_TIMEOUT_S = 5.0


def _tail(text: str, limit: int = KEEP_CHARS) -> str:
    return text if len(text) <= limit else "..." + text[-limit:]


# -- http ---------------------------------------------------------------------------------


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
            **tracing.inject({}),  # traceparent: the receiving side continues the run's trace
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
            # TRACEPARENT (and TRACESTATE): the process continues the run's trace.
            **{key.upper(): value for key, value in tracing.inject({}).items()},
        }

    async def __call__(self, ctx: RunContext) -> dict[str, Any]:
        spec = self.spec
        try:
            # Shielded: a run cancelled while its command starts (asyncio waits for the
            # pipes after the fork) would leave the process without this handle to kill
            # its group by, and asyncio kills the leader alone (its children lived on, seen
            # in CI: tests/sidecar/test_targets.py). The cancellation takes effect right
            # after.
            with anyio.CancelScope(shield=True):
                process = await open_process(
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
