"""``async with agent:``: ready on entry, refusals raised there, a graceful stop on exit.

What a web app's lifespan relies on: the block's body runs while the agent claims and
runs, leaving the block waits for the runs in hand (within the grace), and nothing the
agent started is left running afterwards.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import anyio
import pytest

from cronrace import Agent, AgentSettings, RedisUnavailableError, RunContext
from cronrace.errors import RedisAuthError
from cronrace.testing import FakeClock, RedisServer, memory_agent
from tests.redis_server import redis_available


def other_tasks() -> set[asyncio.Task[object]]:
    """The tasks of this loop but the test's own, and but the embedded store's.

    fakeredis answers a blocking read (the control reader's ``XREAD BLOCK``) from a task of
    its own that lives until the block's timeout even when the caller was cancelled: the
    embedded store's, not the agent's (the real-Redis tests of the examples count all).
    """
    return {
        task
        for task in asyncio.all_tasks()
        if task is not asyncio.current_task()
        and not task.get_coro().__qualname__.startswith("AsyncFakeSocket.")  # type: ignore[union-attr]
    }


async def test_the_block_runs_with_a_ready_agent_whose_jobs_fire() -> None:
    clock = FakeClock(start_s=1_800_000_000)
    agent = memory_agent(clock)
    ticks: list[int] = []
    agent.add_job(lambda ctx: ticks.append(ctx.tick_s), "@every 10s", name="ten")
    before = other_tasks()
    async with agent as entered:
        assert entered is agent
        assert agent.ready
        await clock.advance(30)
    assert ticks == [1_800_000_010, 1_800_000_020, 1_800_000_030]
    assert not agent.ready
    assert other_tasks() == before  # nothing the agent started outlives the block
    assert [r.outcome for r in await agent.history("ten")] == ["ok", "ok", "ok"]


async def test_leaving_the_block_lets_the_run_in_hand_finish() -> None:
    agent = memory_agent(shutdown_grace_s=5)
    started, finish = anyio.Event(), anyio.Event()

    async def slow(ctx: RunContext) -> str:
        started.set()
        await finish.wait()
        return "done"

    agent.add_job(slow, "@daily", name="slow")
    async with agent:
        await agent.trigger("slow")
        with anyio.fail_after(5):
            await started.wait()
        # The exit below asks for a graceful stop: the run goes on until it returns.
        asyncio.get_running_loop().call_later(0.2, finish.set)
    [record] = await agent.history("slow")
    assert (record.outcome, record.detail) == ("ok", "done")


async def test_a_stop_asked_inside_the_block_is_not_made_a_forced_one() -> None:
    agent = memory_agent(shutdown_grace_s=5)
    finish = anyio.Event()
    started = anyio.Event()

    async def slow(ctx: RunContext) -> None:
        started.set()
        await finish.wait()

    agent.add_job(slow, "@daily", name="slow")
    async with agent:
        await agent.trigger("slow")
        with anyio.fail_after(5):
            await started.wait()
        agent.stop()  # a second stop would cancel the run: leaving must not be that
        asyncio.get_running_loop().call_later(0.2, finish.set)
    assert [r.outcome for r in await agent.history("slow")] == ["ok"]


async def test_an_error_in_the_block_is_raised_as_itself_after_a_graceful_stop() -> None:
    agent = memory_agent()
    with pytest.raises(KeyError, match="from the body"):
        async with agent:
            raise KeyError("from the body")
    assert not agent.ready


async def test_an_unreachable_redis_is_raised_on_entry() -> None:
    settings = AgentSettings(
        store_url="redis://127.0.0.1:1", node_id="n", startup_timeout_s=0.3, redis_timeout_s=0.2
    )
    agent = Agent(settings=settings)
    before = other_tasks()
    with pytest.raises(RedisUnavailableError, match="unreachable"):
        async with agent:
            pytest.fail("the body must not run")
    assert other_tasks() == before


async def test_entering_a_running_agent_again_is_refused() -> None:
    agent = memory_agent()
    async with agent:
        with pytest.raises(RuntimeError, match="running already"):
            await agent.__aenter__()
    assert not agent.ready


@pytest.mark.redis
async def test_a_refusing_redis_is_raised_on_entry_at_once(tmp_path: Path) -> None:
    if not redis_available():
        pytest.skip("redis-server not installed")
    with RedisServer(tmp_path / "redis", password="right") as server:  # noqa: S106
        url = f"redis://:wrong@127.0.0.1:{server.port}/0"
        agent = Agent(settings=AgentSettings(store_url=url, node_id="n", startup_timeout_s=30))
        began = time.monotonic()
        with pytest.raises(RedisAuthError, match="authentication failed"):
            async with agent:
                pytest.fail("the body must not run")
        assert time.monotonic() - began < 5  # not retried until startup_timeout_s
