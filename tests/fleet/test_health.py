"""Liveness that tells the truth: /healthz follows the event loop, not only the process."""

from __future__ import annotations

import re
import time
from typing import Any

import anyio
import httpx
import pytest

from cronrace import Agent, AgentSettings, RunContext
from cronrace.runtime.watchdog import LoopWatchdog
from cronrace.web.metrics import PrometheusObserver
from cronrace.web.probes import MetricsServer
from tests.helpers import running, wait_for


@pytest.mark.timeout(30)
async def test_handler_blocking_the_loop_fails_healthz_until_the_loop_turns_again(
    namespace: str,
) -> None:
    observer = PrometheusObserver()
    agent = Agent(
        settings=AgentSettings(
            store_url=f"memory://{namespace}",
            node_id="stuck",
            loop_lag_threshold_s=0.5,
            shutdown_grace_s=1.0,
        ),
        observer=observer,
    )
    server = MetricsServer("127.0.0.1", 0, observer.registry, agent)
    seen: dict[str, Any] = {}

    async def blocks_the_loop(ctx: RunContext) -> None:
        if seen:
            return
        # The mistake under test: a blocking call in an async def. While it sleeps nothing
        # else on the loop runs; the probes answer from the metrics server's thread, asked
        # here, from inside the blocked loop (a synchronous client, on purpose).
        time.sleep(1.5)  # noqa: ASYNC251
        for path in ("/healthz", "/readyz", "/metrics"):
            seen[path] = httpx.get(f"{server.url}{path}", timeout=5)  # noqa: ASYNC210

    agent.add_job(blocks_the_loop, "@every 1s", name="blocker")
    server.start()
    try:
        async with running(agent), httpx.AsyncClient() as client:
            assert (await client.get(f"{server.url}/healthz")).status_code == 200
            await wait_for(lambda: "/metrics" in seen, timeout_s=10, what="the blocked run")

            async def alive_again() -> bool:
                return (await client.get(f"{server.url}/healthz")).status_code == 200

            await wait_for(alive_again, timeout_s=5, what="/healthz 200 after the block")
    finally:
        server.stop()
    assert seen["/healthz"].status_code == 503
    # The handler blocks for 1.5 s before it asks; on a loaded machine the probe may see more
    # (2.0 s once at load 25), never less than the second the block had lasted.
    blocked = re.search(r"event loop blocked for (\d+\.\d)s", seen["/healthz"].text)
    assert blocked is not None, seen["/healthz"].text
    assert 1.0 <= float(blocked.group(1)) < 30, seen["/healthz"].text
    assert seen["/readyz"].status_code == 503
    assert "event loop blocked" in seen["/readyz"].text
    lag = [
        line
        for line in seen["/metrics"].text.splitlines()
        if line.startswith("cronrace_event_loop_lag_seconds ")
    ]
    assert lag, "the lag gauge is exported"
    assert float(lag[0].split()[1]) >= 1.0
    stalls = observer.registry.get_sample_value("cronrace_event_loop_stalls_total")
    assert stalls is not None
    assert stalls >= 1


async def test_watchdog_reads_a_turning_loop_as_alive_and_stops_cleanly() -> None:
    watchdog = LoopWatchdog(threshold_s=0.2)
    assert watchdog.problem() is None  # not watching: nothing to say
    async with anyio.create_task_group() as tg:
        tg.start_soon(watchdog.run)
        await anyio.sleep(0.3)
        assert watchdog.problem() is None
        assert watchdog.lag_s() < 0.2
        time.sleep(0.3)  # noqa: ASYNC251 - blocks the loop on purpose
        assert watchdog.problem() is not None
        tg.cancel_scope.cancel()
    assert watchdog.lag_s() == 0.0
