"""Fixtures of the sidecar tests: the demo app as a real HTTP receiver, run contexts."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from cronrace.model.job import RunContext
from tests.redis_server import free_port

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def make_ctx(job: str = "backup", tick_s: int = 1_700_000_000, fence: int = 7) -> RunContext:
    """The context a handler gets for one run."""
    return RunContext(job=job, tick_s=tick_s, fence=fence, node_id="node-t")


def cronrace(*args: str, env: dict[str, str] | None = None, timeout_s: float = 30) -> Any:
    """Run the ``cronrace`` command (``python -m cronrace``) and return the completed process."""
    return subprocess.run(
        [sys.executable, "-m", "cronrace", *args],
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def process_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie nobody reaped yet counts as dead)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def wait_until(condition: Any, *, timeout_s: float, what: str) -> None:
    """Poll a synchronous condition every 50 ms until it holds; fail after the deadline."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(0.05)


@dataclass
class DemoApp:
    """examples/demo_app.py running as a process of its own."""

    url: str
    process: subprocess.Popen[bytes]

    def calls(self, job: str | None = None) -> list[dict[str, Any]]:
        calls: list[dict[str, Any]] = httpx.get(f"{self.url}/calls", timeout=5).json()
        return [c for c in calls if job is None or c["job"] == job]


@pytest.fixture
def demo_app() -> Iterator[DemoApp]:
    """The example app on a free loopback port: the real receiver of HTTP targets."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, str(EXAMPLES / "demo_app.py"), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
    )
    app = DemoApp(f"http://127.0.0.1:{port}", process)

    def answers() -> bool:
        try:
            return httpx.get(f"{app.url}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_until(answers, timeout_s=10, what="the demo app")
        yield app
    finally:
        process.terminate()
        process.wait(timeout=10)
