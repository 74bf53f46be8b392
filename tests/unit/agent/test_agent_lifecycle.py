"""Agent.run under anyio's TaskGroup.start: ready when start returns, errors at start."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from cronrace import Agent, AgentSettings, RedisUnavailableError
from cronrace.testing import FakeClock, memory_agent


async def test_started_agent_is_ready_and_sees_a_trigger_made_at_once() -> None:
    clock = FakeClock(start_s=1_800_000_000.5)
    agent = memory_agent(clock)
    ran: list[str | None] = []
    agent.add_job(lambda ctx: ran.append(ctx.trigger_id), "@daily", name="daily")
    async with anyio.create_task_group() as tg:
        await tg.start(agent.run)
        assert agent.ready
        trigger_id = await agent.trigger("daily")
        with anyio.fail_after(5):
            while not ran:
                await clock.advance(0.1)
        agent.stop()
    assert ran == [trigger_id]


async def test_start_raises_when_redis_is_unreachable_at_start_up() -> None:
    settings = AgentSettings(
        store_url="redis://127.0.0.1:1", node_id="n", startup_timeout_s=0.3, redis_timeout_s=0.2
    )
    agent = Agent(settings=settings)
    async with anyio.create_task_group() as tg:
        with pytest.raises(RedisUnavailableError, match="unreachable"):
            await tg.start(agent.run)
    assert not agent.ready


def test_an_observer_set_after_construction_reaches_every_part() -> None:
    from cronrace.runtime.observer import Observer

    agent = Agent(store_url="memory://observer-swap", node_id="n")
    observer = Observer()  # what `cronrace run --metrics-address` does with its own
    agent.observer = observer
    assert agent.readiness.observer is observer
    assert agent.heartbeat.observer is observer


async def test_a_started_sidecar_is_ready(tmp_path: Path) -> None:
    from cronrace.sidecar.service import Sidecar

    path = tmp_path / "cronrace.toml"
    path.write_text(
        '[agent]\nstore_url = "memory://started-sidecar"\nmetrics_address = "off"\n'
        "shutdown_grace_s = 1\n\n"
        '[[jobs]]\nname = "daily"\nschedule = "@daily"\n[jobs.command]\nargv = ["true"]\n'
    )
    sidecar = Sidecar.from_file(path)
    async with anyio.create_task_group() as tg:
        await tg.start(sidecar.run)
        assert sidecar.agent.ready
        assert [row.job for row in await sidecar.agent.jobs_status()] == ["daily"]
        sidecar.stop()
    assert not sidecar.agent.ready


async def test_a_store_that_follows_failovers_is_followed_while_the_agent_runs() -> None:
    clock = FakeClock(start_s=1_800_000_000.5)
    agent = memory_agent(clock)
    agent.add_job(lambda ctx: None, "@daily", name="daily")
    following = anyio.Event()
    stopped = anyio.Event()

    async def follow_failovers() -> None:
        following.set()
        try:
            await anyio.sleep_forever()
        finally:
            stopped.set()

    agent.store.follow_failovers = follow_failovers  # type: ignore[attr-defined]
    async with anyio.create_task_group() as tg:
        await tg.start(agent.run)
        with anyio.fail_after(5):
            await following.wait()
        agent.stop()
    assert stopped.is_set()


def test_only_the_redis_store_is_a_failover_follower() -> None:
    from cronrace.stores.contract import FailoverFollower
    from cronrace.stores.postgres.store import PostgresStore
    from cronrace.stores.redis import Store as RedisStore

    assert issubclass(RedisStore, FailoverFollower)
    assert not issubclass(PostgresStore, FailoverFollower)


_FREEZE_SCRIPT = """
import gc, sys
import anyio
from cronrace import Agent

agent = Agent(store_url="memory://")
frozen = []

@agent.job("@every 1s")
async def hello(ctx):
    frozen.append(gc.get_freeze_count())
    agent.stop()

if sys.argv[1] == "run_sync":
    agent.run_sync()
else:
    anyio.run(agent.run)
print(frozen[0])
"""


@pytest.mark.parametrize(("how", "freezes"), [("run_sync", True), ("run", False)])
def test_run_sync_freezes_start_up_objects_and_an_embedded_agent_does_not(
    tmp_path: Path, how: str, freezes: bool
) -> None:
    # run_sync owns the process (cronrace run, the sidecar): start-up's objects leave the
    # collector's sight once the agent is ready. An application's own `await agent.run()`
    # keeps its collector as it set it. A process of its own each, as the freeze is global.
    script = tmp_path / "freeze.py"
    script.write_text(_FREEZE_SCRIPT)
    done = subprocess.run(
        [sys.executable, str(script), how], capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 0, done.stderr
    frozen = int(done.stdout.strip().splitlines()[-1])
    assert (frozen > 1000) is freezes, frozen
