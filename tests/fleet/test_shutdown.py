"""Graceful shutdown: stop claiming, let runs finish within the grace, then cancel them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

from cronrace import Agent, AgentSettings, RunContext
from tests.helpers import wait_for
from tests.redis_server import RedisServer

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(30)
@pytest.mark.parametrize(("work_s", "outcome"), [(0.3, "ok"), (30.0, "cancelled")])
async def test_stop_waits_for_runs_up_to_the_grace_then_cancels_and_releases(
    redis_url: str, namespace: str, work_s: float, outcome: str
) -> None:
    started = anyio.Event()

    async def work(ctx: RunContext) -> None:
        started.set()
        await anyio.sleep(work_s)

    agent = Agent(
        settings=AgentSettings(
            redis_url=redis_url, namespace=namespace, node_id="n0", shutdown_grace_s=1.0
        )
    )
    agent.add_job(work, "* * * * * *", name="work")
    async with anyio.create_task_group() as tg:
        tg.start_soon(agent.run)
        await started.wait()
        stop_at = time.monotonic()
        agent.stop()
    took_s = time.monotonic() - stop_at
    assert took_s < 1.0 + 0.5
    records = await agent.history("work", 10)
    assert [r.outcome.value for r in records][:1] == [outcome]
    (state,) = await agent.store.job_states(["work"])
    assert state.lease is None, "the lease was released, not left to expire"
    await agent.aclose()


@pytest.mark.redis
@pytest.mark.slow
@pytest.mark.timeout(30)
def test_sigterm_stops_the_cli_cleanly_and_leaves_the_node_set(
    redis_server: RedisServer, namespace: str
) -> None:
    env = {
        **os.environ,
        "CRONRACE_REDIS_URL": redis_server.url,
        "CRONRACE_NAMESPACE": namespace,
        "CRONRACE_NODE_ID": "sig",
        "CRONRACE_SHUTDOWN_GRACE_S": "2",
        "PYTHONPATH": str(ROOT),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "cronrace", "run", "examples.hello:agent"],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 15
        assert proc.stdout is not None
        # Either job may print first (the 5-second report can tick before hello).
        while b"hello from sig" not in proc.stdout.readline():
            assert time.monotonic() < deadline, "hello never fired"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0
    assert b"Traceback" not in err
    assert b"shutting down gracefully" in err

    async def nodes() -> list[str]:
        agent = Agent(redis_url=redis_server.url, namespace=namespace, node_id="probe")
        try:
            return [n.node_id for n in await agent.nodes()]
        finally:
            await agent.aclose()

    assert anyio.run(nodes) == []


async def test_wait_for_helper_reports_what_it_waited_for() -> None:
    with pytest.raises(AssertionError, match="the impossible"):
        await wait_for(lambda: False, timeout_s=0.05, what="the impossible")
