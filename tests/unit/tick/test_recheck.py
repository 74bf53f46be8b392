"""A lost tick is claimed again once, by the node second in line: a re-claim that loses
is not queued again (it was: the benchmark's minutely racers = 2 cell claimed each lost
tick over and over until its decided claim ran out, 1,260 claims per job-tick)."""

from __future__ import annotations

import anyio

from cronrace.model.job import Job
from cronrace.stores.values import Claim, Owner
from cronrace.testing import FakeClock, memory_agent
from cronrace.tick.decisions import Proposal
from tests.helpers import running

T0 = 1_800_000_000


async def test_a_lost_claim_is_told_once_and_a_recheck_that_loses_is_not_told_again() -> None:
    clock = FakeClock(start_s=T0 - 0.5)
    agent = memory_agent(clock)
    agent.add_job(lambda ctx: None, "0 0 1 1 *", name="yearly")
    async with running(agent):
        scheduler = agent.scheduler
        assert scheduler is not None
        race = scheduler.tick_race
        told: list[tuple[str, int]] = []
        race.on_lost = lambda job, tick_s: told.append((job.name, tick_s))
        job: Job = agent.jobs["yearly"]
        # Another node holds the tick's claim (decided or not): this node loses it.
        assert await agent.store.claim([Claim("yearly", T0, 60_000)], Owner("other", "1"))
        proposal = Proposal(job, race.plan(job, T0, clock.time()))
        async with anyio.create_task_group() as runs:
            await race.race([proposal], runs)
            await race.race([proposal], runs, recheck=True)
    assert told == [("yearly", T0)], "the race's loss is told once; the recheck's is not"
