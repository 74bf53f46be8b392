"""A catch-up under ``allow`` asks a fence for each further tick, again while the store is
away: asked once, a failover under way stopped the catch-up, and its further ticks never
ran (the Cluster fault test, a primary killed: a healthy shard's job missed a tick)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anyio

from cronrace import RunContext
from cronrace.errors import RedisUnavailableError
from cronrace.model.policies import Overlap
from cronrace.stores.values import AcquireMode, AcquireRequest, Owner
from cronrace.testing import FakeClock, memory_agent
from tests.helpers import history

T0 = 1_800_000_000


async def test_a_further_ticks_fence_is_asked_again_while_the_store_is_away() -> None:
    clock = FakeClock(start_s=T0 + 5.5)
    ran: list[int] = []

    def note(ctx: RunContext) -> None:
        ran.append(ctx.tick_s - T0)

    agent = memory_agent(clock)
    agent.add_job(note, "* * * * * *", name="job", catchup="all", overlap="allow")
    store = agent.store
    # Ticks up to T0 decided: the agent starts 5 s behind, a catch-up of 1-5 under one
    # claim, each further tick with its own fence.
    old = AcquireRequest("job", T0, T0, T0, Owner("n0", "x"), 5000, Overlap.ALLOW, AcquireMode.MARK)
    await store.acquire([old])
    acquire = store.acquire
    failed: list[int] = []

    async def failing_once(requests: Sequence[AcquireRequest], **options: Any) -> Any:
        further = [r for r in requests if r.mode is AcquireMode.TRIGGER and not r.trigger_id]
        if further and not failed:
            failed.append(further[0].decide_tick_s - T0)
            raise RedisUnavailableError("a failover under way (test fault)")
        return await acquire(requests, **options)

    store.acquire = failing_once  # type: ignore[method-assign]
    async with anyio.create_task_group() as tg:
        await tg.start(agent.run)
        await clock.advance(3.0)
        records = await history(agent, "job", first_s=T0 + 1, last_s=T0 + 5)
        agent.stop()
    assert failed == [2], "the second tick's fence failed once"
    assert sorted(t for t in ran if t <= 5) == [1, 2, 3, 4, 5]
    assert sorted((r.tick_s - T0, r.outcome.value) for r in records) == [
        (t, "ok") for t in range(1, 6)
    ]
