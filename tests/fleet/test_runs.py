"""What a run records: outcome, error text, the handler's result, overrun warnings."""

from __future__ import annotations

import time

import anyio
import pytest

from cronrace import Agent, RunContext
from cronrace.testing import FakeClock, memory_agent
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


@pytest.mark.timeout(30)
async def test_handler_that_blocks_the_loop_past_its_lease_is_recorded_lease_lost(
    namespace: str,
) -> None:
    calls: list[int] = []

    async def blocker(ctx: RunContext) -> str:
        calls.append(ctx.tick_s)
        if len(calls) == 1:
            # Blocks the event loop: the renewal task never gets to run before this returns.
            time.sleep(1.0)  # noqa: ASYNC251
        return "done"

    agent = Agent(settings=settings(f"memory://{namespace}", namespace, "n0"))
    agent.add_job(blocker, "* * * * * *", name="blocker", lease_ttl=0.6)
    async with running(agent):
        await wait_for(lambda: len(calls) >= 2, timeout_s=10, what="two runs")

        async def recorded() -> bool:
            return any(r.tick_s == calls[0] for r in await agent.history("blocker", 10))

        await wait_for(recorded, timeout_s=5, what="the first run's record")
        records = await agent.history("blocker", 10)
    first = {r.outcome.value: r for r in records if r.tick_s == calls[0]}
    # The next acquirer found the lease expired (abandoned); the run itself says why.
    assert sorted(first) == ["abandoned", "lease_lost"]
    assert "lease_ttl" in (first["lease_lost"].error or "")


@pytest.mark.timeout(30)
async def test_handler_cancelled_for_a_lost_lease_already_sees_ctx_lease_lost(
    namespace: str,
) -> None:
    seen: list[bool] = []

    async def victim(ctx: RunContext) -> None:
        if seen:
            return
        # The lease vanishes under the run: the next renewal is answered "gone".
        store = agent.store
        await store.client.delete(store.keys.lease(ctx.job))
        try:
            await anyio.sleep(10)
        except anyio.get_cancelled_exc_class():
            seen.append(ctx.lease_lost)
            raise

    agent = Agent(settings=settings(f"memory://{namespace}", namespace, "n0"))
    agent.add_job(victim, "* * * * * *", name="victim", lease_ttl=0.6)
    async with running(agent):
        await wait_for(lambda: bool(seen), timeout_s=10, what="the handler to be cancelled")

        async def recorded() -> bool:
            return any(r.outcome == "lease_lost" for r in await agent.history("victim", 10))

        await wait_for(recorded, timeout_s=5, what="the lease_lost record")
    assert seen == [True]


@pytest.mark.timeout(30)
async def test_run_records_are_timed_on_the_agents_clock() -> None:
    clock = FakeClock(start_s=1_700_000_000.0)
    agent = memory_agent(clock)
    agent.add_job(lambda ctx: None, "* * * * * *", name="tick")
    async with anyio.create_task_group() as tg:
        tg.start_soon(agent.run)
        await wait_for(lambda: agent.ready, timeout_s=5, what="ready")
        await clock.advance(3)

        async def recorded() -> bool:
            return bool(await agent.history("tick", 10))

        await wait_for(recorded, timeout_s=5, what="a run record")
        agent.stop()
    record = (await agent.history("tick", 10))[-1]
    assert record.outcome == "ok"
    # The agent's clock (a fake one here, the Redis-offset one in production), not the
    # machine's wall clock: a node whose wall clock is off writes records on time.
    assert 1_700_000_000_000 <= record.started_ms <= record.finished_ms <= 1_700_000_004_000
    await agent.aclose()
