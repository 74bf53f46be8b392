"""What a run records: outcome, error text, the handler's result, overrun warnings."""

from __future__ import annotations

import time

import anyio
import pytest

from cronrace import Agent, RunContext
from cronrace.testing import FakeClock, memory_agent
from tests.helpers import history, running, settings, wait_for

#: A tick; the fake clock starts half a second before it.
T0 = 1_800_000_000


async def test_failing_handler_is_recorded_as_error_and_the_job_keeps_firing() -> None:
    clock = FakeClock(start_s=T0 - 0.5)
    calls: list[int] = []

    async def flaky(ctx: RunContext) -> str:
        calls.append(ctx.tick_s - T0)
        await clock.sleep(0.25)
        if len(calls) == 1:
            raise ValueError("disk full")
        return "cleaned 3 rows"

    agent = memory_agent(clock)
    agent.add_job(flaky, "* * * * * *", name="flaky")
    async with running(agent):
        await clock.advance(3.0)  # ticks 0..2
        records = await history(agent, "flaky", first_s=T0, last_s=T0 + 2)
    assert calls == [0, 1, 2]
    assert [(r.tick_s - T0, r.outcome.value, r.error, r.detail) for r in records] == [
        (0, "error", "ValueError: disk full", None),
        (1, "ok", None, "cleaned 3 rows"),
        (2, "ok", None, "cleaned 3 rows"),
    ]
    assert [r.duration_s for r in records] == pytest.approx([0.25] * 3, abs=0.001)


async def test_run_longer_than_the_overrun_ratio_logs_a_warning_with_the_numbers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock(start_s=T0 - 0.5)

    async def slow(ctx: RunContext) -> None:
        await clock.sleep(0.9 if ctx.tick_s == T0 else 0.2)

    agent = memory_agent(clock)
    agent.add_job(slow, "* * * * * *", name="slow", overrun_ratio=0.5)
    async with running(agent):
        await clock.advance(2.0)  # ticks 0 and 1: 0.9 s, then 0.2 s
    (warning,) = [r for r in caplog.records if r.getMessage() == "run is overrunning its schedule"]
    assert warning.job == "slow"  # type: ignore[attr-defined]
    assert warning.duration_s == pytest.approx(0.9, abs=0.001)  # type: ignore[attr-defined]
    assert warning.interval_s == 1  # type: ignore[attr-defined]
    assert warning.ratio == pytest.approx(0.9, abs=0.001)  # type: ignore[attr-defined]
    assert agent.runner is not None
    assert agent.runner.last_ratio["slow"] == pytest.approx(0.2, abs=0.001)


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
    # One result: the run's own (lease_lost, saying why), or, if the next tick's decision
    # met its lapsed lease first, the store's (abandoned).
    assert len(first) == 1
    assert set(first) <= {"abandoned", "lease_lost"}
    if "lease_lost" in first:
        assert "lease_ttl" in (first["lease_lost"].error or "")


async def test_handler_cancelled_for_a_lost_lease_already_sees_ctx_lease_lost() -> None:
    clock = FakeClock(start_s=T0 - 0.5)
    seen: list[tuple[bool, float]] = []

    async def victim(ctx: RunContext) -> None:
        # The lease vanishes under the run: the next renewal is answered "gone".
        store = agent.store
        await store.client.delete(store.keys.lease(ctx.job))
        try:
            await clock.sleep(10)
        except anyio.get_cancelled_exc_class():
            seen.append((ctx.lease_lost, clock.time() - T0))
            raise

    agent = memory_agent(clock)
    agent.add_job(victim, "* * * * * *", name="victim", lease_ttl=0.6)
    async with running(agent):
        # Tick 0; its first renewal is due at 0.2; the run ends (its record) once its lease
        # has surely run out, at 0.6.
        await clock.advance(1.2)
        records = await history(agent, "victim", first_s=T0, last_s=T0)
    assert seen == [(True, pytest.approx(0.2, abs=0.001))]
    assert [(r.outcome.value, r.error) for r in records] == [
        ("lease_lost", "lease expired or was released under us")
    ]


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
