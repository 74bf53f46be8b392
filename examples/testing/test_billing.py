"""Testing jobs with ``cronrace.testing``: a handler alone, and a schedule on a fake clock.

Run with ``pytest examples/testing`` (pytest-asyncio; ``pytestmark`` below marks every
test, so it needs no ``asyncio_mode`` setting). In a project, import the module of your
jobs as your code does (``from myapp.jobs import define_jobs``).
"""

from __future__ import annotations

from datetime import UTC, datetime

import anyio
import pytest
from billing import define_jobs, send_invoices

from cronrace.testing import FakeClock, memory_agent, run_handler

pytestmark = pytest.mark.asyncio


async def test_the_handler_bills_every_customer_of_its_tick() -> None:
    """The handler alone, with a real RunContext: no clock, no claim, no lease."""
    tick_s = int(datetime(2026, 3, 27, 8, 0, tzinfo=UTC).timestamp())
    result = await run_handler(send_invoices, job="send-invoices", tick_s=tick_s, fence=3)
    assert result == {"invoiced": 3, "batch": "invoices:2026-03-27"}


async def test_invoices_go_out_at_nine_paris_time_on_weekdays_across_the_clock_change() -> None:
    """Three days pass in a moment: Friday, the weekend (Europe's clocks go forward on
    Sunday 29 March 2026), Monday. 09:00 in Paris is 08:00 UTC before, 07:00 UTC after."""
    clock = FakeClock(start_s=datetime(2026, 3, 27, 7, 0, tzinfo=UTC).timestamp())
    agent = memory_agent(clock, heartbeat_s=3600)  # one beat an hour: fewer stops on the way
    define_jobs(agent)
    async with anyio.create_task_group() as tg:
        await tg.start(agent.run)  # returns once the agent is ready
        await clock.advance(3 * 86400 + 3600, step_s=3600)  # to Monday 08:00 UTC
        records = await agent.history("send-invoices", 10)
        agent.stop()
    ran = [datetime.fromtimestamp(r.tick_s, UTC) for r in reversed(records) if r.outcome == "ok"]
    assert [(t.strftime("%a"), t.hour) for t in ran] == [("Fri", 8), ("Mon", 7)]
    assert records[0].detail == {"invoiced": 3, "batch": "invoices:2026-03-30"}


async def test_a_failing_run_is_recorded_with_its_error() -> None:
    clock = FakeClock(start_s=datetime(2026, 3, 27, 7, 59, tzinfo=UTC).timestamp())
    agent = memory_agent(clock)
    define_jobs(agent)
    async with anyio.create_task_group() as tg:
        await tg.start(agent.run)
        await clock.advance(120)
        [record] = await agent.history("check-payments", 10)
        agent.stop()
    assert record.outcome == "error"
    assert record.error == "ConnectionError: payment provider unreachable"
