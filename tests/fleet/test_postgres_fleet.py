"""A fleet on PostgreSQL: agents racing on a real server fire each tick exactly once."""

from __future__ import annotations

from collections import Counter

import pytest

from cronrace import Agent
from cronrace.model.policies import Outcome
from tests.helpers import Recorder, running, settings, wait_for
from tests.postgres_server import PostgresServer

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(90)]


async def test_five_agents_on_postgres_fire_each_tick_exactly_once_with_fences_in_order(
    postgres_server: PostgresServer, namespace: str
) -> None:
    recorder = Recorder()
    agents = []
    for index in range(5):
        agent = Agent(settings=settings(postgres_server.url, namespace, f"node{index}"))
        agent.add_job(recorder.note, "* * * * * *", name="every-second")
        agent.add_job(recorder.note, "* * * * * *", name="also-every-second", overlap="queue_one")
        agents.append(agent)
    async with running(*agents):
        await wait_for(lambda: len(set(recorder.ticks())) >= 5, timeout_s=40, what="5 ticks")
        history_ = await agents[0].history("every-second", 100)
        nodes = await agents[0].nodes()
    for job in ("every-second", "also-every-second"):
        ticks = [run.tick_s for run in recorder.runs if run.job == job]
        assert [t for t, n in Counter(ticks).items() if n > 1] == [], f"{job}: a duplicate"
        assert sorted(ticks) == list(range(min(ticks), max(ticks) + 1)), f"{job}: a miss"
        by_tick = sorted((run for run in recorder.runs if run.job == job), key=lambda r: r.tick_s)
        fences = [run.fence for run in by_tick]
        assert fences == sorted(set(fences)), f"{job}: fences must increase with ticks"
    ok = Counter(r.tick_s for r in history_ if r.outcome is Outcome.OK)
    assert all(n == 1 for n in ok.values())
    assert len({run.node for run in recorder.runs}) > 1, "runs spread over the nodes"
    assert len(nodes) == 5
