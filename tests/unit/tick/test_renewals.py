"""Lease renewals start only when a run is still going at its first renewal (fake clock)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import anyio
import pytest

from cronrace.protocol import RenewRequest
from cronrace.stores.values import Renewal
from cronrace.testing import FakeClock
from cronrace.tick.lease import COMPACT_AT, Lease, Renewals


@dataclass
class StandIn:
    """Answers every ``renew`` with ``answer`` and notes when (and for which job) it came."""

    clock: FakeClock
    answer: Renewal = Renewal.RENEWED
    sent: list[tuple[str, float]] = field(default_factory=list)

    async def renew_lease(self, job: str, request: RenewRequest) -> Renewal:
        self.sent.append((job, self.clock.monotonic()))
        return self.answer


def lease(clock: FakeClock, store: StandIn, job: str = "job", ttl_s: float = 3.0) -> Lease:
    return Lease(store, clock, job, 7, ttl_s, clock.monotonic())  # type: ignore[arg-type]


async def test_a_run_that_ends_before_its_first_renewal_gets_no_renewal_task() -> None:
    clock = FakeClock()
    store = StandIn(clock)
    renewals = Renewals(clock)
    async with anyio.create_task_group() as tg:
        renewals.task_group = tg
        held = renewals.hold(lease(clock, store), anyio.CancelScope(), None)
        await clock.advance(0.9)  # the first renewal is due at 1.0 (a third of 3 s)
        await renewals.drop(held)
        await clock.advance(5)
    assert held.renewing is None
    assert store.sent == []


async def test_a_run_still_going_is_renewed_every_third_of_its_ttl_until_dropped() -> None:
    clock = FakeClock()
    store = StandIn(clock)
    renewals = Renewals(clock)
    async with anyio.create_task_group() as tg:
        renewals.task_group = tg
        kept = lease(clock, store)
        held = renewals.hold(kept, anyio.CancelScope(), None)
        await clock.advance(3.5)
        await renewals.drop(held)
        assert held.stopped is not None
        assert held.stopped.is_set()  # the renewal task has ended: its verdict is in
        await clock.advance(5)
    assert store.sent == [("job", pytest.approx(t)) for t in (1.0, 2.0, 3.0)]
    assert (kept.renewals, kept.lost) == (3, False)


async def test_a_lease_lost_while_renewed_cancels_its_run_and_flags_it() -> None:
    clock = FakeClock()
    store = StandIn(clock, answer=Renewal.GONE)
    renewals = Renewals(clock)
    flag = threading.Event()
    cut: list[float] = []

    async def run(scope: anyio.CancelScope) -> None:
        with scope:
            await clock.sleep(3600)
        cut.append(clock.monotonic())

    async with anyio.create_task_group() as tg:
        renewals.task_group = tg
        scope = anyio.CancelScope()
        kept = lease(clock, store)
        renewals.hold(kept, scope, flag)
        tg.start_soon(run, scope)
        await clock.advance(2)
    assert cut == [pytest.approx(1.0)]
    assert flag.is_set()
    assert kept.lost_reason == "lease expired or was released under us"


async def test_a_shorter_lease_held_later_is_renewed_on_time() -> None:
    clock = FakeClock()
    store = StandIn(clock)
    renewals = Renewals(clock)
    async with anyio.create_task_group() as tg:
        renewals.task_group = tg
        long = renewals.hold(lease(clock, store, "long", ttl_s=30), anyio.CancelScope(), None)
        await clock.advance(0.5)  # the keeper now sleeps until the long lease's 10.0
        short = renewals.hold(lease(clock, store, "short", ttl_s=3), anyio.CancelScope(), None)
        await clock.advance(1.2)
        assert store.sent == [("short", pytest.approx(1.5))]
        await renewals.drop(short)
        await renewals.drop(long)
        await clock.advance(10)  # the keeper wakes at 10.0, finds nothing held, and ends
    assert store.sent == [("short", pytest.approx(1.5))]


async def test_runs_that_end_early_do_not_pile_up_under_a_long_lease() -> None:
    clock = FakeClock()
    store = StandIn(clock)
    renewals = Renewals(clock)
    async with anyio.create_task_group() as tg:
        renewals.task_group = tg
        for _run in range(5 * COMPACT_AT):
            held = renewals.hold(lease(clock, store, ttl_s=3600), anyio.CancelScope(), None)
            await renewals.drop(held)
        # Each entry would otherwise wait 20 minutes in the keeper's heap to be thrown away.
        assert len(renewals._heap) <= 2 * COMPACT_AT
        tg.cancel_scope.cancel()
    assert store.sent == []
