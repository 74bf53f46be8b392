"""The tick loop's nap: until its next tick, ended by a clock that moved or a tick added."""

from __future__ import annotations

import time

import anyio
import pytest

from cronrace import RunContext
from cronrace.testing import FakeClock, memory_agent
from cronrace.tick import wakeup
from cronrace.tick.wakeup import Nap


class SteppedClock:
    """Real sleeps, and a wall clock an operator (or NTP) may step."""

    def __init__(self) -> None:
        self.step_s = 0.0

    def time(self) -> float:
        return time.time() + self.step_s

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(seconds)


async def test_a_nap_ends_when_the_wall_clock_steps_and_not_before() -> None:
    clock = SteppedClock()
    nap = Nap(clock)
    async with anyio.create_task_group() as tg:
        tg.start_soon(nap.sleep, 30.0)
        await anyio.sleep(0.05)
        nap.check_clock()  # nothing moved: it naps on
        assert nap._scope is not None
        clock.step_s = 10 * wakeup.CLOCK_MOVED_S  # forward: a tick may be due sooner
        started = time.monotonic()
        nap.check_clock()
    assert time.monotonic() - started < 5  # woken, not after its 30 s


class CappedFakeClock(FakeClock):
    """A fake clock the loop re-reads every second, as it does a real one."""

    max_sleep_s = 1.0


@pytest.mark.parametrize(("watched", "most_naps"), [(True, 3), (False, 60)])
async def test_a_loop_with_nothing_due_for_50_s_naps_until_its_tick(
    watched: bool, most_naps: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Watched (the agent's watchdog looks at the clock for it), the loop does not turn
    every second while its one minutely job is not due."""
    naps: list[float] = []
    sleep = Nap.sleep

    async def counted(self: Nap, seconds: float) -> None:
        naps.append(seconds)
        await sleep(self, seconds)

    monkeypatch.setattr(Nap, "sleep", counted)
    clock = CappedFakeClock(start_s=1_800_000_000 + 5)  # 55 s before a minute
    ran: list[int] = []

    def note(ctx: RunContext) -> None:
        ran.append(ctx.tick_s)

    agent = memory_agent(clock)
    agent.add_job(note, "* * * * *", name="minutely")
    if not watched:
        monkeypatch.setattr("cronrace.tick.loop.Scheduler.watch_clock", lambda self: lambda: None)
    async with anyio.create_task_group() as tg:
        await tg.start(agent.run)
        await clock.advance(50)
        assert len(naps) <= most_naps
        if not watched:
            assert len(naps) >= 45  # one a second: what the watched loop saves
        await clock.advance(10)
        agent.stop()
    assert ran == [1_800_000_060]
