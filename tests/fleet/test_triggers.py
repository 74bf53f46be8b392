"""Manual triggers through the overlap policy, on the embedded store and a fake clock."""

from __future__ import annotations

import time

import anyio

from cronrace import RunContext
from cronrace.testing import FakeClock, memory_agent
from tests.helpers import wait_for


async def test_a_trigger_queued_behind_a_run_runs_as_that_trigger() -> None:
    # Near the real time: the embedded store's TIME (the live-node check) is the real clock.
    clock = FakeClock(start_s=time.time())
    agent = memory_agent(clock)
    release_first = anyio.Event()
    ran: list[str | None] = []

    async def report(ctx: RunContext) -> None:
        ran.append(ctx.trigger_id)
        if len(ran) == 1:
            await release_first.wait()

    agent.add_job(report, "@yearly", name="report", overlap="queue_one")
    async with anyio.create_task_group() as tg:
        tg.start_soon(agent.run)
        await wait_for(lambda: agent.ready, timeout_s=5, what="ready")
        first = await agent.trigger("report")
        await wait_for(lambda: ran == [first], timeout_s=5, what="the first trigger running")
        second = await agent.trigger("report")

        async def queued() -> bool:
            return any(r.outcome == "queued" for r in await agent.history("report", 10))

        await wait_for(queued, timeout_s=5, what="the second trigger queued")
        release_first.set()
        await wait_for(lambda: len(ran) == 2, timeout_s=5, what="the queued trigger's run")

        async def both_recorded() -> bool:
            records = await agent.history("report", 10)
            return sum(r.outcome == "ok" for r in records) >= 2

        # The second run's record is written as it finishes, after its handler returned.
        await wait_for(both_recorded, timeout_s=5, what="both runs recorded")
        records = await agent.history("report", 10)
        agent.stop()
    assert ran == [first, second]
    ok = sorted((r.trigger_id or "") for r in records if r.outcome == "ok")
    assert ok == sorted([first, second])
