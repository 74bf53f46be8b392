"""What a run records: outcome, error text, the handler's result, overrun warnings."""

from __future__ import annotations

import anyio
import pytest

from cronrace import Agent, RunContext
from tests.helpers import running, settings, wait_for


@pytest.mark.timeout(30)
async def test_failing_handler_is_recorded_as_error_and_the_job_keeps_firing(
    redis_url: str, namespace: str
) -> None:
    calls: list[int] = []

    async def flaky(ctx: RunContext) -> str:
        calls.append(ctx.tick_s)
        if len(calls) == 1:
            raise ValueError("disk full")
        return "cleaned 3 rows"

    agent = Agent(settings=settings(redis_url, namespace, "n0"))
    agent.add_job(flaky, "* * * * * *", name="flaky")
    async with running(agent):
        await wait_for(lambda: len(calls) >= 3, timeout_s=10, what="3 calls")
        records = await agent.history("flaky", 10)
    by_tick = {r.tick_s: r for r in records}
    first = by_tick[calls[0]]
    assert first.outcome == "error"
    assert first.error == "ValueError: disk full"
    second = by_tick[calls[1]]
    assert (second.outcome, second.detail) == ("ok", "cleaned 3 rows")
    assert second.duration_s is not None
    assert second.duration_s >= 0


@pytest.mark.timeout(30)
async def test_run_longer_than_the_overrun_ratio_logs_a_warning_with_the_numbers(
    redis_url: str, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    done = anyio.Event()

    async def slow(ctx: RunContext) -> None:
        await anyio.sleep(0.9)
        done.set()

    agent = Agent(settings=settings(redis_url, namespace, "n0"))
    agent.add_job(slow, "* * * * * *", name="slow", overrun_ratio=0.5)
    async with running(agent):
        await done.wait()
        await wait_for(
            lambda: any(
                r.getMessage() == "run is overrunning its schedule" for r in caplog.records
            ),
            timeout_s=5,
            what="the overrun warning",
        )
    warning = next(r for r in caplog.records if r.getMessage() == "run is overrunning its schedule")
    assert warning.job == "slow"  # type: ignore[attr-defined]
    assert warning.interval_s == 1  # type: ignore[attr-defined]
    assert warning.ratio >= 0.8  # type: ignore[attr-defined]
    assert agent.runner is not None
    assert agent.runner.last_ratio["slow"] >= 0.8
