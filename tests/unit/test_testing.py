"""cronrace.testing: what users test their jobs with must itself work."""

from __future__ import annotations

import socket
import time
from datetime import UTC, datetime
from pathlib import Path

import anyio
import pytest

from cronrace import RunContext
from cronrace.testing import FakeClock, RedisServer, memory_agent, run_handler


async def test_fake_clock_drives_an_agent_through_three_minutes_at_once() -> None:
    start = datetime(2026, 3, 29, 0, 59, 30, tzinfo=UTC).timestamp()
    clock = FakeClock(start_s=start)
    agent = memory_agent(clock)
    fired: list[int] = []

    async def minutely(ctx: RunContext) -> None:
        fired.append(ctx.tick_s)

    agent.add_job(minutely, "* * * * *", name="minutely")
    async with anyio.create_task_group() as tg:
        await tg.start(agent.run)
        await clock.advance(180)
        assert len(fired) == 3, "advance returns once what it woke has run"
        agent.stop()
    assert [t - int(start) for t in fired] == [30, 90, 150]


async def test_run_handler_gives_a_real_context_with_fenced_writes() -> None:
    async def handler(ctx: RunContext) -> bool:
        assert ctx.idempotency_key == "report:1700000000"
        return await ctx.fenced_set("k", "v")

    assert await run_handler(handler, job="report", tick_s=1_700_000_000, fence=7) is True


async def test_run_handler_runs_sync_handlers_in_a_thread() -> None:
    assert await run_handler(lambda ctx: ctx.fence * 2, fence=21) == 42


async def test_advance_in_big_steps_still_fires_each_tick_at_its_instant() -> None:
    start = datetime(2026, 3, 28, 12, 0, 30, tzinfo=UTC).timestamp()
    clock = FakeClock(start_s=start)
    agent = memory_agent(clock, heartbeat_s=3600)
    fired: list[tuple[int, float]] = []

    async def daily(ctx: RunContext) -> None:
        fired.append((ctx.tick_s, clock.time()))

    agent.add_job(daily, "0 3 * * *", name="daily")
    async with anyio.create_task_group() as tg:
        await tg.start(agent.run)
        await clock.advance(2 * 86400, step_s=3600)
        records = await agent.history("daily", 10)
        agent.stop()
    ticks = [int(datetime(2026, 3, d, 3, 0, tzinfo=UTC).timestamp()) for d in (29, 30)]
    assert fired == [(tick, float(tick)) for tick in ticks]
    assert sorted((r.tick_s, r.outcome.value) for r in records) == [(t, "ok") for t in ticks]


async def test_advance_waits_for_sync_handlers_in_worker_threads() -> None:
    clock = FakeClock(start_s=1_700_000_000)
    agent = memory_agent(clock)
    finished: list[int] = []

    def slow(ctx: RunContext) -> None:
        time.sleep(0.05)
        finished.append(ctx.tick_s)

    agent.add_job(slow, "*/10 * * * * *", name="slow", lease_ttl=3)
    async with anyio.create_task_group() as tg:
        await tg.start(agent.run)
        await clock.advance(30)
        assert finished == [1_700_000_010, 1_700_000_020, 1_700_000_030]
        records = await agent.history("slow", 10)
        agent.stop()
    assert {r.outcome.value for r in records} == {"ok"}


async def test_set_time_wakes_sleepers_late_as_a_paused_process_sees_it() -> None:
    clock = FakeClock(start_s=100)
    woke: list[float] = []

    async def sleeper(seconds: float) -> None:
        await clock.sleep(seconds)
        woke.append(clock.time())

    async with anyio.create_task_group() as tg:
        tg.start_soon(sleeper, 5)
        tg.start_soon(sleeper, 50)
        await clock.advance(1)
        await clock.set_time(120)
        assert woke == [120.0]
        await clock.advance(40)
    assert woke == [120.0, 150.0]


async def test_a_sleeper_that_sleeps_to_a_monotonic_instant_gets_there_and_time_moves_on() -> None:
    # A lease's renewal loop: sleep for "the rest of the interval", look again. At an epoch
    # time (~1.8e9, resolving ~0.2 us) the rest was sometimes below the clock's resolution:
    # the sleep did not move time, the sleeper woke where it was, and advance never returned.
    clock = FakeClock(start_s=1_800_000_000.5)
    renewals: list[float] = []

    async def renewer() -> None:
        next_s = clock.monotonic() + 0.3
        while len(renewals) < 10:
            now = clock.monotonic()
            if now < next_s:
                await clock.sleep(next_s - now)
                continue
            renewals.append(now)
            next_s = now + 0.3

    async with anyio.create_task_group() as tg:
        tg.start_soon(renewer)
        with anyio.fail_after(5):
            await clock.advance(3.05)
    assert renewals == pytest.approx([0.3 * i for i in range(1, 11)])
    assert clock.time() == pytest.approx(1_800_000_003.55)


async def test_set_time_right_after_start_finds_the_agent_waiting_for_its_first_tick() -> None:
    # tg.start returns once the agent is ready, before its loop planned a tick: the jump
    # must not be what the loop plans from, or the tick it slept for would vanish.
    tick = 1_800_000_000
    clock = FakeClock(start_s=tick - 0.5)
    agent = memory_agent(clock)
    fired: list[tuple[int, float]] = []
    agent.add_job(lambda ctx: fired.append((ctx.tick_s, clock.time())), "* * * * *", name="m")
    async with anyio.create_task_group() as tg:
        await tg.start(agent.run)
        await clock.set_time(tick + 0.5)  # the process was paused across the tick
        agent.stop()
    assert fired == [(tick, tick + 0.5)]


@pytest.mark.redis
def test_a_redis_server_whose_picked_port_was_taken_starts_on_another(tmp_path: Path) -> None:
    server = RedisServer(tmp_path / "redis")
    taken = server.port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as squatter:
        squatter.bind(("127.0.0.1", taken))
        squatter.listen()
        server.start()
        try:
            assert server.port != taken
            assert server.ping()
        finally:
            server.stop()


@pytest.mark.redis
def test_a_redis_server_given_a_taken_port_says_so(tmp_path: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        server = RedisServer(tmp_path / "redis", port=port)
        with pytest.raises(RuntimeError, match="Address already in use"):
            server.start()
