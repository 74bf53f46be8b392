"""Several agents in one process race for the same ticks: each tick fires exactly once."""

from __future__ import annotations

import time
from collections import Counter

import pytest

from cronrace import Agent, RunContext
from cronrace.clock import SystemClock
from tests.helpers import Recorder, running, settings, wait_for


def fleet(url: str, namespace: str, recorder: Recorder, size: int, **job: object) -> list[Agent]:
    agents = []
    for index in range(size):
        agent = Agent(settings=settings(url, namespace, f"node{index}"))

        async def tick(ctx: RunContext) -> None:
            recorder.note(ctx)

        agent.add_job(tick, "* * * * * *", name="every-second", **job)
        agents.append(agent)
    return agents


@pytest.mark.timeout(60)
async def test_five_agents_fire_each_tick_exactly_once(redis_url: str, namespace: str) -> None:
    recorder = Recorder()
    agents = fleet(redis_url, namespace, recorder, 5)
    async with running(*agents):
        await wait_for(lambda: len(set(recorder.ticks())) >= 11, timeout_s=30, what="11 ticks")
        history = await agents[0].history("every-second", 100)
    ticks = recorder.ticks()
    duplicates = [t for t, n in Counter(ticks).items() if n > 1]
    assert duplicates == []
    span = range(min(ticks), max(ticks) + 1)
    assert sorted(ticks) == list(span), "a tick inside the window was missed"
    by_tick = sorted(recorder.runs, key=lambda run: run.tick_s)
    fences = [run.fence for run in by_tick]
    assert fences == sorted(set(fences)), "fences must increase with ticks"
    ok = Counter(r.tick_s for r in history if r.outcome == "ok")
    assert all(ok[t] == 1 for t in ticks[:-1])
    assert len({run.node for run in recorder.runs}) >= 1


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("clock", "fires_early"), [("redis", False), ("local", True)])
async def test_node_with_skewed_clock_neither_fires_early_nor_twice(
    redis_url: str, namespace: str, clock: str, fires_early: bool
) -> None:
    recorder = Recorder()
    agents = []
    for index, skew_s in enumerate([0.0, 0.0, 3.0]):
        agent = Agent(
            settings=settings(redis_url, namespace, f"node{index}", clock=clock),
            clock=SystemClock(skew_s=skew_s),
        )
        agent.add_job(recorder.note, "* * * * * *", name="skewed")
        agents.append(agent)
    async with running(*agents):
        await wait_for(lambda: len(recorder.runs) >= 6, timeout_s=30, what="6 runs")
    assert [t for t, n in Counter(recorder.ticks()).items() if n > 1] == []
    early = [r for r in recorder.runs if r.started_wall_s < r.tick_s - 0.05]
    # With the Redis-offset clock nobody fires before the tick; the control case (each
    # node trusting its own wall clock) shows the skewed node would fire 3 s early.
    assert bool(early) is fires_early


async def test_started_agent_reports_ready_and_registers_as_a_node(
    redis_url: str, namespace: str
) -> None:
    agent = Agent(settings=settings(redis_url, namespace, "solo"))
    agent.add_job(lambda ctx: None, "@every 1s", name="noop")
    async with running(agent):
        nodes = await agent.nodes()
        assert [n.node_id for n in nodes] == ["solo"]
        assert nodes[0].expires_ms > time.time() * 1000
