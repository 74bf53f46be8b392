"""cronrace.testing: what users test their jobs with must itself work."""

from __future__ import annotations

from datetime import UTC, datetime

import anyio

from cronrace import RunContext
from cronrace.testing import FakeClock, memory_agent, run_handler
from tests.helpers import wait_for


async def test_fake_clock_drives_an_agent_through_three_minutes_at_once() -> None:
    start = datetime(2026, 3, 29, 0, 59, 30, tzinfo=UTC).timestamp()
    clock = FakeClock(start_s=start)
    agent = memory_agent(clock)
    fired: list[int] = []

    async def minutely(ctx: RunContext) -> None:
        fired.append(ctx.tick_s)

    agent.add_job(minutely, "* * * * *", name="minutely")
    async with anyio.create_task_group() as tg:
        tg.start_soon(agent.run)
        await wait_for(lambda: agent.ready, timeout_s=5, what="ready")
        await clock.advance(180)
        await wait_for(lambda: len(fired) == 3, timeout_s=5, what="three runs")
        agent.stop()
    assert [t - int(start) for t in fired] == [30, 90, 150]


async def test_run_handler_gives_a_real_context_with_fenced_writes() -> None:
    async def handler(ctx: RunContext) -> bool:
        assert ctx.idempotency_key == "report:1700000000"
        return await ctx.fenced_set("k", "v")

    assert await run_handler(handler, job="report", tick_s=1_700_000_000, fence=7) is True


async def test_run_handler_runs_sync_handlers_in_a_thread() -> None:
    assert await run_handler(lambda ctx: ctx.fence * 2, fence=21) == 42
