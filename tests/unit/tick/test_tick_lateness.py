"""How late a wake-up may be: on time, late (the catch-up policy decides), or expired.

An agent on a fake clock sleeps until a minutely tick; the clock then jumps to some
instant after it, as for a process paused or a loop blocked that long, and the tick is
decided from there (docs/design.md section 5): at most ``live_grace_s`` (1 s) late it is on time
and runs whatever the catch-up policy; later it is missed, and the catch-up policy says
whether it still runs; older than ``catchup_window`` it is not attempted at all.
"""

from __future__ import annotations

import anyio
import pytest

from cronrace import RunContext
from cronrace.testing import FakeClock, memory_agent
from tests.helpers import history

#: A minute boundary; every test's clock starts half a second before it.
T0 = 1_800_000_000
WINDOW_S = 30


@pytest.mark.parametrize(
    ("late_s", "catchup", "runs", "missed"),
    [
        (0.0, "skip", True, 0),  # on time: skip concerns only missed ticks
        (1.0, "skip", True, 0),  # live_grace_s late: still on time
        (1.5, "skip", False, 1),  # late: missed, and skip fires none
        (1.5, "latest", True, 0),  # late: missed, and latest fires it
        (1.5, "all", True, 0),
        (WINDOW_S - 0.5, "all", True, 0),  # inside the window: still attempted
        (WINDOW_S, "all", True, 0),  # now - tick <= catchup_window: the last instant
        (WINDOW_S + 0.5, "all", False, 1),  # half a second out: was attempted (int cutoff)
        (WINDOW_S + 1.5, "all", False, 1),  # out of the window: counted, never attempted
        (WINDOW_S + 1.5, "latest", False, 1),
    ],
)
async def test_a_tick_decided_late_runs_by_its_lateness_and_catch_up_policy(
    late_s: float, catchup: str, runs: bool, missed: int
) -> None:
    assert T0 % 60 == 0
    clock = FakeClock(start_s=T0 - 0.5)
    ran: list[tuple[int, float]] = []

    def note(ctx: RunContext) -> None:
        ran.append((ctx.tick_s, clock.time()))

    agent = memory_agent(clock)
    agent.add_job(note, "* * * * *", name="minutely", catchup=catchup, catchup_window=WINDOW_S)
    async with anyio.create_task_group() as tg:
        await tg.start(agent.run)
        # The agent sleeps until T0; it wakes late_s after it, as after a pause.
        await clock.set_time(T0 + late_s)
        await clock.advance(0.1)
        # (An expired tick's missed record is filed under the window's edge, before the
        # next tick.)
        records = await history(agent, "minutely", first_s=T0, last_s=T0 + 59)
        agent.stop()
    assert ran == ([(T0, T0 + late_s)] if runs else [])
    assert [(r.outcome.value, r.count) for r in records if r.outcome == "missed"] == (
        [("missed", missed)] if missed else []
    )
    assert [r.outcome.value for r in records if r.outcome != "missed"] == (["ok"] if runs else [])


async def test_a_backlog_partly_out_of_the_window_counts_the_expired_and_plans_the_rest() -> None:
    # Paused for 10 minutes over a job every 10 s: of the 61 ticks T0..T0+600, those older
    # than the window (30 s) expired; catch-up all fires the 4 inside it, oldest first.
    clock = FakeClock(start_s=T0 - 0.5)
    ran: list[int] = []
    agent = memory_agent(clock)
    agent.add_job(
        lambda ctx: ran.append(ctx.tick_s - T0),
        "*/10 * * * * *",
        name="tens",
        catchup="all",
        catchup_window=WINDOW_S,
    )
    async with anyio.create_task_group() as tg:
        await tg.start(agent.run)
        await clock.set_time(T0 + 600)  # T0..T0+600 passed while paused
        await clock.advance(0.1)
        records = await history(agent, "tens", first_s=T0, last_s=T0 + 600)
        agent.stop()
    assert ran == [570, 580, 590, 600]
    missed = [r for r in records if r.outcome == "missed"]
    assert sum(r.count for r in missed) == 57, "T0..T0+560 expired"
    assert [r.tick_s - T0 for r in records if r.outcome == "ok"] == [570, 580, 590, 600]
