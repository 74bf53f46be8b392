"""Tests of your own jobs with cronrace.testing: one handler call, and an agent on a fake clock.

Shown in docs/how-to/testing.md. Written as pytest tests (pytest-asyncio); cronrace's own
suite runs them in tests/docs/test_snippets.py.
"""

import anyio

from cronrace import Agent, RunContext
from cronrace.testing import FakeClock, memory_agent, run_handler

runs: list[int] = []


async def cleanup(ctx: RunContext) -> str:
    runs.append(ctx.tick_s)
    return f"cleaned up to {ctx.tick_s} under fence {ctx.fence}"


async def test_cleanup_returns_what_it_did() -> None:
    result = await run_handler(cleanup, job="cleanup", tick_s=1_700_000_000, fence=7)
    assert result == "cleaned up to 1700000000 under fence 7"


async def test_cleanup_fires_every_minute() -> None:
    clock = FakeClock(start_s=1_700_000_000)
    agent: Agent = memory_agent(clock)  # its own embedded store, scheduling on the fake clock
    agent.add_job(cleanup, "* * * * *", name="cleanup")
    runs.clear()
    async with anyio.create_task_group() as tg:
        await tg.start(agent.run)  # returns once the agent is ready
        await clock.advance(180)  # three minutes pass at once; due ticks fire
        agent.stop()
    assert len(runs) == 3
