"""Jobs replaced and removed while the tick loop runs: stale heap entries never fire."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime

import anyio

from cronrace import RunContext
from cronrace.testing import FakeClock, memory_agent
from tests.helpers import wait_for


async def test_replacing_a_job_many_times_fires_each_of_its_ticks_once() -> None:
    start = datetime(2026, 3, 28, 12, 0, 0, 500_000, tzinfo=UTC).timestamp()
    clock = FakeClock(start_s=start)
    agent = memory_agent(clock)
    fired: list[int] = []

    @agent.handler("note")
    async def note(ctx: RunContext) -> None:
        fired.append(ctx.tick_s)

    async with anyio.create_task_group() as tg:
        tg.start_soon(agent.run)
        await wait_for(lambda: agent.ready, timeout_s=5, what="ready")
        await agent.schedules.add("s", "* * * * * *", handler="note")
        assert agent.sync is not None
        await agent.sync.check_version()  # what the next heartbeat does
        assert agent.scheduler is not None
        assert "s" in agent.scheduler.jobs
        # The same schedule again (same next tick), another and back: heap entries pile up.
        for changes in (
            {"lease_ttl": 10},
            {"schedule": "*/2 * * * * *"},
            {"schedule": "* * * * * *"},
            {"lease_ttl": 20},
        ):
            await agent.schedules.update("s", **changes)
            await agent.sync.check_version()
        await clock.advance(10)
        await wait_for(lambda: len(fired) >= 10, timeout_s=5, what="ten runs")
        await agent.schedules.remove("s")
        await agent.sync.check_version()
        assert "s" not in agent.scheduler.jobs
        count = len(fired)
        await clock.advance(5)
        agent.stop()
    assert [t for t, n in Counter(fired).items() if n > 1] == []
    assert fired == list(range(int(start) + 1, int(start) + 11))
    assert len(fired) == count
