"""Several agents in one process race for the same ticks: each tick fires exactly once.

On a fake clock and the embedded store for the counts; on a real redis-server for the race
on a real socket and for clocks that disagree with the server's.
"""

from __future__ import annotations

import time
from collections import Counter

import pytest

from cronrace import Agent, RunContext
from cronrace.runtime.clock import SystemClock
from cronrace.testing import FakeClock
from tests.helpers import Recorder, history, memory_fleet, running, settings, wait_for
from tests.redis_server import RedisServer

#: A tick; the fake clock starts half a second before it.
T0 = 1_800_000_000


def fleet(url: str, namespace: str, recorder: Recorder, size: int, **job: object) -> list[Agent]:
    agents = []
    for index in range(size):
        agent = Agent(settings=settings(url, namespace, f"node{index}"))

        async def tick(ctx: RunContext) -> None:
            recorder.note(ctx)

        agent.add_job(tick, "* * * * * *", name="every-second", **job)
        agents.append(agent)
    return agents


JOB = "every-second"


async def test_five_agents_fire_each_tick_exactly_once() -> None:
    clock = FakeClock(start_s=T0 - 0.5)
    recorder = Recorder()
    agents = memory_fleet(clock, 5)
    for agent in agents:
        agent.add_job(recorder.note, "* * * * * *", name=JOB)
    async with running(*agents):
        await clock.advance(30.0)  # ticks 0..29
        records = await history(agents[0], "every-second", first_s=T0, last_s=T0 + 29)
        preferred = {
            t: [a.settings.node_id for a in agents if a.scheduler.membership.preferred(JOB, t)]
            for t in range(T0 + 4, T0 + 30)
        }
    assert [t - T0 for t in recorder.ticks()] == list(range(30)), "each tick once, in order"
    # Once every view holds the five (each has beaten since all joined), each tick is run by
    # its top-ranked node, which claims it 100 ms before the others: the runs spread by the
    # ring, not by how the tasks happen to interleave (with beats 60 s apart, node0 ran 22).
    assert all(len(nodes) == 1 for nodes in preferred.values()), preferred
    assert [(r.tick_s, r.node) for r in recorder.runs if r.tick_s >= T0 + 4] == [
        (t, nodes[0]) for t, nodes in preferred.items()
    ]
    fences = [run.fence for run in recorder.runs]
    assert fences == sorted(set(fences)), "fences increase with ticks"
    assert [(r.tick_s - T0, r.outcome.value, r.fence) for r in records] == [
        (run.tick_s - T0, "ok", run.fence) for run in recorder.runs
    ]
    assert len({run.node for run in recorder.runs}) > 1, "runs spread over the nodes"


@pytest.mark.redis
@pytest.mark.timeout(60)
async def test_five_agents_on_a_real_server_fire_each_tick_exactly_once(
    redis_server: RedisServer, namespace: str
) -> None:
    # The race for real: five agents' claims interleave on a real server's socket.
    recorder = Recorder()
    agents = []
    for index in range(5):
        agent = Agent(settings=settings(redis_server.url, namespace, f"node{index}"))
        agent.add_job(recorder.note, "* * * * * *", name="every-second")
        agents.append(agent)
    async with running(*agents):
        await wait_for(lambda: len(set(recorder.ticks())) >= 4, timeout_s=30, what="4 ticks")
        history_ = await agents[0].history("every-second", 100)
    ticks = recorder.ticks()
    assert [t for t, n in Counter(ticks).items() if n > 1] == []
    assert sorted(ticks) == list(range(min(ticks), max(ticks) + 1)), "a tick was missed"
    by_tick = sorted(recorder.runs, key=lambda run: run.tick_s)
    fences = [run.fence for run in by_tick]
    assert fences == sorted(set(fences)), "fences must increase with ticks"
    ok = Counter(r.tick_s for r in history_ if r.outcome == "ok")
    assert all(ok[t] == 1 for t in ticks[:-1])


@pytest.mark.redis
@pytest.mark.timeout(60)
@pytest.mark.parametrize(("clock", "fires_early"), [("redis", False), ("local", True)])
async def test_node_with_skewed_clock_neither_fires_early_nor_twice(
    redis_server: RedisServer, namespace: str, clock: str, fires_early: bool
) -> None:
    # Real time on a real server: the offset is measured against the server's TIME (the
    # embedded store's TIME is this machine's clock too, so it would add nothing).
    redis_url = redis_server.url
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
        await wait_for(lambda: len(recorder.runs) >= 4, timeout_s=30, what="4 runs")
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
