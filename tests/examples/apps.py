"""Run an example app for real: a process of its own, or the ASGI lifespan in this one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import anyio

from cronrace import AgentSettings, OperatorClient

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def fleet_env(redis_url: str, namespace: str, node: str) -> dict[str, str]:
    """The environment of an example node: on the test's Redis, quick to beat and to stop."""
    keep = {k: v for k, v in os.environ.items() if not k.startswith("CRONRACE_")}
    return {
        **keep,
        "CRONRACE_STORE_URL": redis_url,
        "CRONRACE_NAMESPACE": namespace,
        "CRONRACE_NODE_ID": node,
        "CRONRACE_HEARTBEAT_S": "0.5",
        "CRONRACE_SHUTDOWN_GRACE_S": "5",
    }


class Process:
    """A started example: its output lands in files, read while it runs."""

    def __init__(self, popen: subprocess.Popen[bytes], out: Path, err: Path) -> None:
        self.popen, self.out, self.err = popen, out, err

    def stdout(self) -> str:
        return self.out.read_text(encoding="utf-8", errors="replace")

    def stderr(self) -> str:
        return self.err.read_text(encoding="utf-8", errors="replace")

    def terminate(self, timeout_s: float = 30) -> int:
        """SIGTERM, as a container runtime sends it; return the exit code."""
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
        try:
            return self.popen.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()
            raise AssertionError(f"no exit {timeout_s}s after SIGTERM:\n{self.stderr()}") from None


@contextmanager
def started(
    argv: Sequence[str], *, cwd: Path, env: Mapping[str, str], logs: Path
) -> Iterator[Process]:
    """Start ``argv`` (``python`` is this interpreter); kill it if the test leaves early."""
    logs.mkdir(parents=True, exist_ok=True)
    out, err = logs / "stdout.txt", logs / "stderr.txt"
    with out.open("wb") as stdout, err.open("wb") as stderr:
        popen = subprocess.Popen(
            [sys.executable, *argv], cwd=cwd, env=dict(env), stdout=stdout, stderr=stderr
        )
    process = Process(popen, out, err)
    try:
        yield process
    finally:
        if popen.poll() is None:
            popen.kill()
            popen.wait()


@asynccontextmanager
async def fleet(redis_url: str, namespace: str) -> AsyncIterator[OperatorClient]:
    """An operator client on the examples' fleet: what the test reads and triggers with."""
    async with OperatorClient(AgentSettings(store_url=redis_url, namespace=namespace)) as client:
        yield client


@asynccontextmanager
async def lifespan(app: Any) -> AsyncIterator[None]:
    """Drive an ASGI app's lifespan as a server does: startup on entry, shutdown on exit."""
    to_app, app_inbox = anyio.create_memory_object_stream[dict[str, Any]](2)
    app_outbox, from_app = anyio.create_memory_object_stream[dict[str, Any]](2)
    scope = {"type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.0"}, "state": {}}
    async with to_app, app_inbox, app_outbox, from_app, anyio.create_task_group() as tg:
        tg.start_soon(app, scope, app_inbox.receive, app_outbox.send)
        await to_app.send({"type": "lifespan.startup"})
        message = await from_app.receive()
        assert message["type"] == "lifespan.startup.complete", message
        yield
        await to_app.send({"type": "lifespan.shutdown"})
        message = await from_app.receive()
        assert message["type"] == "lifespan.shutdown.complete", message
