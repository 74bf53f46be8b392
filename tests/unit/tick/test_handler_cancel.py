"""A lost lease cancels its handler as an anyio scope around it would: again at every await
until it returns, never inside its shielded clean-up, and a forced stop still goes through."""

from __future__ import annotations

import asyncio

import anyio
import pytest

from cronrace import RunContext
from cronrace.testing import FakeClock, memory_agent
from cronrace.tick import cancel as cancel_module
from cronrace.tick.cancel import HandlerCancel
from tests.helpers import history, running

#: A tick; the fake clock starts half a second before it.
T0 = 1_800_000_000


async def _lose_the_lease(ctx: RunContext, agent: object) -> None:
    store = agent.store  # type: ignore[attr-defined]
    await store.client.delete(store.keys.lease(ctx.job))  # the next renewal is answered "gone"


async def test_a_handler_that_catches_the_cancellation_is_cancelled_again_at_its_next_await() -> (
    None
):
    clock = FakeClock(start_s=T0 - 0.5)
    cut_at: list[float] = []

    async def stubborn(ctx: RunContext) -> None:
        await _lose_the_lease(ctx, agent)
        try:
            await clock.sleep(10)
        except anyio.get_cancelled_exc_class():
            cut_at.append(clock.time() - T0)  # swallowed: it goes on
        try:
            await clock.sleep(10)
        except anyio.get_cancelled_exc_class():
            cut_at.append(clock.time() - T0)
            raise

    agent = memory_agent(clock)
    agent.add_job(stubborn, "* * * * * *", name="stubborn", lease_ttl=0.6)
    async with running(agent):
        # Tick 0; its first renewal is due at 0.2. The run ends (its record) once its lease
        # has surely run out, at 0.6.
        await clock.advance(1.2)
        records = await history(agent, "stubborn", first_s=T0, last_s=T0)
    assert cut_at == [pytest.approx(0.2, abs=0.001)] * 2
    assert [r.outcome.value for r in records] == ["lease_lost"]


async def test_a_handlers_shielded_clean_up_runs_to_its_end_after_its_lease_is_lost() -> None:
    clock = FakeClock(start_s=T0 - 0.5)
    cleaned: list[float] = []

    async def tidy(ctx: RunContext) -> None:
        await _lose_the_lease(ctx, agent)
        try:
            await clock.sleep(10)
        finally:
            with anyio.CancelScope(shield=True):
                await clock.sleep(0.1)
                cleaned.append(clock.time() - T0)

    agent = memory_agent(clock)
    agent.add_job(tidy, "* * * * * *", name="tidy", lease_ttl=0.6)
    async with running(agent):
        # The lease is lost at 0.2, the clean-up ends at 0.3, the run's record is written
        # once its lease has surely run out (0.6).
        await clock.advance(1.2)
        records = await history(agent, "tidy", first_s=T0, last_s=T0)
    assert cleaned == [pytest.approx(0.3, abs=0.001)]
    assert [r.outcome.value for r in records] == ["lease_lost"]


async def test_a_cancellation_from_elsewhere_goes_on_past_a_lost_leases() -> None:
    started = asyncio.Event()
    under = HandlerCancel()

    async def run() -> None:
        with under:
            started.set()
            await asyncio.sleep(10)

    task = asyncio.create_task(run())
    await started.wait()
    under.cancel()  # the lease is lost ...
    task.cancel()  # ... and the agent is stopped by force in the same turn
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_only_its_own_cancellation_is_swallowed() -> None:
    started = asyncio.Event()
    under = HandlerCancel()
    after: list[str] = []

    async def run() -> None:
        with under:
            started.set()
            await asyncio.sleep(10)
        after.append("left")
        await asyncio.sleep(0)  # no cancellation left pending for the code after it
        after.append("went on")

    task = asyncio.create_task(run())
    await started.wait()
    under.cancel()
    await task
    assert after == ["left", "went on"]
    assert task.cancelling() == 0


async def test_a_shielded_clean_up_is_looked_at_now_and_then_not_at_every_turn_of_the_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    looks: list[bool] = []
    shielded = cancel_module._shielded

    def counted(task: asyncio.Task[object]) -> bool:
        looks.append(shielded(task))
        return looks[-1]

    monkeypatch.setattr(cancel_module, "_shielded", counted)
    started = asyncio.Event()
    under = HandlerCancel()

    async def run() -> None:
        with under:
            with anyio.CancelScope(shield=True):
                started.set()
                await asyncio.sleep(0.2)  # a clean-up: the lease is lost meanwhile
            await asyncio.sleep(10)  # cut as soon as the shield is left

    task = asyncio.create_task(run())
    await started.wait()
    under.cancel()
    await task
    # Every 10 ms while shielded (about 20 looks), not at each of the loop's turns.
    assert looks.count(True) < 100
    assert looks[-1] is False
