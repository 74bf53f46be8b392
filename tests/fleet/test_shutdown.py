"""Graceful shutdown: stop claiming, let runs finish within the grace, then cancel them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from cronrace import Agent, AgentSettings, RunContext
from cronrace.errors import RedisAmbiguousError
from cronrace.testing import FakeClock, memory_agent
from cronrace.tick import runner as runner_module
from tests.helpers import running, settings, wait_for
from tests.redis_server import RedisServer

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(30)
@pytest.mark.parametrize(("work_s", "outcome"), [(0.3, "ok"), (30.0, "cancelled")])
async def test_stop_waits_for_runs_up_to_the_grace_then_cancels_and_releases(
    namespace: str, work_s: float, outcome: str
) -> None:
    # The grace is this process's own real time; the release script on a real server:
    # tests/stores/contract, and a real process stopped mid-run: tests/faults/test_stopping.py.
    redis_url = f"memory://{namespace}"
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


def fleet_of_one(clock: FakeClock) -> tuple[Agent, list[int]]:
    ran: list[int] = []
    agent = memory_agent(clock)
    agent.add_job(lambda ctx: ran.append(ctx.tick_s), "* * * * * *", name="job", lease_ttl=30)
    return agent, ran


async def run_one_wakeup(agent: Agent, clock: FakeClock) -> None:
    """Run the agent until its first wake-up stopped it (the stop is in the store hook)."""
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(agent.run)
            await wait_for(lambda: agent.ready, timeout_s=5, what="ready")
            await clock.advance(2)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("during", ["claim_each", "decide"])
async def test_stop_while_a_wakeup_is_in_flight_still_decides_and_runs_its_won_tick(
    during: str,
) -> None:
    clock = FakeClock()
    agent, ran = fleet_of_one(clock)
    store = agent.store
    real = getattr(store, during)

    async def stop_meanwhile(*args: Any, **kwargs: Any) -> Any:
        agent.stop()  # SIGTERM lands while the request is on the wire
        return await real(*args, **kwargs)

    setattr(store, during, stop_meanwhile)
    await run_one_wakeup(agent, clock)
    assert len(ran) == 1
    (record,) = await agent.history("job", 10)
    assert (record.tick_s, record.outcome) == (ran[0], "ok")
    (state,) = await agent.store.job_states(["job"])
    assert state.lease is None
    await agent.aclose()


@pytest.mark.timeout(30)
@pytest.mark.parametrize("during", ["claim_each", "decide"])
async def test_second_stop_inside_a_wakeup_leaves_its_tick_to_the_next_decision(
    during: str,
) -> None:
    """A forced stop cuts a wake-up after the store did its part, before the node read the
    answer: nothing runs, and nothing is lost. A claim won but never decided runs out
    (``undecided_claim_s``) and the job's next decision covers its tick; a grant never
    started keeps its ``granted`` record, and its lease runs out by itself: the job's next
    decision records it abandoned (docs/design.md section 3)."""
    clock = FakeClock()
    agent, ran = fleet_of_one(clock)
    store = agent.store
    real = getattr(store, during)

    async def reply_lost_to_a_forced_stop(*args: Any, **kwargs: Any) -> Any:
        reply = await real(*args, **kwargs)  # the store did it...
        agent.stop()
        agent.stop()
        await anyio.lowlevel.checkpoint()  # ...the forced stop cancels before it is read
        return reply

    setattr(store, during, reply_lost_to_a_forced_stop)
    await run_one_wakeup(agent, clock)
    assert ran == []
    records = await agent.store.history("job", 10)
    (state,) = await agent.store.job_states(["job"])
    if during == "claim_each":
        assert records == []
        assert state.cursor_s is None, "undecided: the job's next decision covers it"
    else:
        assert [r.outcome for r in records] == ["granted"]
        assert state.lease is not None
        assert state.lease.fence == records[0].fence
    await agent.aclose()


@pytest.mark.timeout(30)
async def test_finished_runs_release_outlasts_the_cleanup_timeout_and_goes_out_first(
    monkeypatch: pytest.MonkeyPatch, namespace: str
) -> None:
    # Redis is unreachable for the run's release (and the next claims) for longer than
    # the clean-up timeout; the lease (30 s) is far from expiring.
    monkeypatch.setattr(runner_module, "CLEANUP_TIMEOUT_S", 0.3)
    ran: list[int] = []
    outage = {"on": False}
    agent = Agent(settings=settings(f"memory://{namespace}", namespace, "n0"))

    def job(ctx: RunContext) -> None:
        ran.append(ctx.tick_s)
        if len(ran) == 1:
            outage["on"] = True

    agent.add_job(job, "* * * * * *", name="job", lease_ttl=30)
    store = agent.store
    for name in ("end_runs", "claim_each"):
        real = getattr(store, name)

        async def down(*args: Any, _real: Any = real, **kwargs: Any) -> Any:
            if outage["on"]:
                raise RedisAmbiguousError("Connection refused")
            return await _real(*args, **kwargs)

        setattr(store, name, down)
    async with running(agent):
        await wait_for(lambda: outage["on"], timeout_s=10, what="the first run")
        await anyio.sleep(1.5)
        outage["on"] = False
        await wait_for(lambda: len(ran) >= 3, timeout_s=10, what="runs after the outage")
    records = await agent.history("job", 20)
    (first,) = [r for r in records if r.tick_s == ran[0]]
    assert first.outcome == "ok"
    # No tick was skipped for an overlap with the run that had finished during the outage.
    blocked = [
        r.tick_s
        for r in records
        if r.outcome == "skipped:overlap" and (r.detail or {}).get("holder_fence") == first.fence
    ]
    assert blocked == []
    assert [r.outcome.value for r in records].count("ok") == len(ran)
    await agent.aclose()
