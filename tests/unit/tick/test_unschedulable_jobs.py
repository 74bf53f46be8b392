"""A job whose schedule never fires is refused; one whose tick math fails stops only itself."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

import anyio
import pytest

from cronrace import Job, RunContext, Schedule, ScheduleError
from cronrace.testing import FakeClock, memory_agent
from tests.helpers import wait_for

# 02:00-02:59 on the second Sunday of March never happens in New York (clocks jump from
# 02:00 to 03:00 that night, every year since 2007), and a job with '*' in its minute
# field follows real time: it has no tick at all.
NEVER_IN_NEW_YORK = "*/30 2 * 3 0#2"


async def note(ctx: RunContext) -> None:
    return None


def test_job_that_never_fires_in_its_zone_is_refused_when_defined() -> None:
    agent = memory_agent()
    with pytest.raises(ScheduleError) as caught:
        agent.add_job(note, NEVER_IN_NEW_YORK, name="spring", timezone="America/New_York")
    message = str(caught.value)
    assert message.startswith(f"job 'spring': schedule {NEVER_IN_NEW_YORK!r} is invalid: ")
    assert "never fires in America/New_York" in message
    assert "\n" not in message
    assert "spring" not in agent.jobs


def test_same_schedule_in_a_zone_where_it_fires_is_accepted() -> None:
    agent = memory_agent()
    # Europe moves its clocks on the last Sunday of March: 02:00 exists on the second.
    agent.add_job(note, NEVER_IN_NEW_YORK, name="berlin", timezone="Europe/Berlin")
    # A fixed-time job fires at the jump even where 02:30 does not exist.
    agent.add_job(note, "30 2 * 3 0#2", name="fixed", timezone="America/New_York")
    assert set(agent.jobs) == {"berlin", "fixed"}


class TickMathFailsAfterFirstTick:
    """A schedule whose tick math fails once the job has been seeded (a surprise)."""

    expr = "* * * * * *"
    timezone = "UTC"

    def __init__(self) -> None:
        self._real = Schedule.parse(self.expr)
        self.calls = 0

    def next_tick(self, after_s: int) -> int:
        self.calls += 1
        if self.calls > 1:
            raise ArithmeticError("tick math surprise")
        return self._real.next_tick(after_s)

    def __getattr__(self, name: str) -> object:
        return getattr(self._real, name)


@pytest.mark.timeout(30)
async def test_a_job_whose_tick_math_fails_does_not_stop_the_others(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock(start_s=datetime(2026, 3, 1, tzinfo=UTC).timestamp())
    agent = memory_agent(clock)
    fired: list[int] = []

    async def steady(ctx: RunContext) -> None:
        fired.append(ctx.tick_s)

    agent.add_job(steady, "* * * * * *", name="steady")
    # Jobs defined before a tzdata update made their times vanish pass the definition
    # check; they reach the scheduler as these do (Job.define would refuse the first).
    agent._jobs["spring"] = Job(
        "spring", Schedule.parse(NEVER_IN_NEW_YORK, "America/New_York"), note
    )
    agent._jobs["buggy"] = Job("buggy", TickMathFailsAfterFirstTick(), note)  # type: ignore[arg-type]
    with caplog.at_level(logging.ERROR, logger="cronrace.tick.loop"):
        async with anyio.create_task_group() as tg:
            tg.start_soon(agent.run)
            await wait_for(
                lambda: agent.scheduler is not None and "steady" in agent.scheduler.next_tick,
                timeout_s=10,
                what="the scheduler seeded",
            )
            await clock.advance(3)
            await wait_for(lambda: len(fired) >= 3, timeout_s=10, what="three steady runs")
            agent.stop()
    failed = {r.__dict__.get("job"): r for r in caplog.records if r.levelno == logging.ERROR}
    assert {"spring", "buggy"} <= set(failed)
    assert NEVER_IN_NEW_YORK in failed["spring"].__dict__["schedule"]
    assert "tick math surprise" in failed["buggy"].__dict__["error"]
