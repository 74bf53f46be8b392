"""A held lease on a fake clock: renewals, and the deadline kept on the monotonic clock.

The store is a stand-in that answers renewals as told (after a delay on the same clock):
what is under test is the node's own rule, docs/design.md section 4: a node that has not renewed
for ``lease_ttl`` minus a margin, counted from when it *sent* the last request that
succeeded, gives the lease up without waiting for Redis to say so.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import pytest

from cronrace.errors import RedisUnavailableError
from cronrace.protocol import RenewRequest
from cronrace.stores.redis import Store
from cronrace.stores.values import Renewal
from cronrace.testing import FakeClock
from cronrace.tick.lease import SAFETY_MARGIN, Lease

TTL_S = 3.0
#: How long before the lease expires in Redis the node stops believing it holds it.
KEPT_S = TTL_S * (1 - SAFETY_MARGIN)


@dataclass
class Renewals:
    """Answers ``renew`` with ``answer(call)`` after ``delay_s`` of the fake clock."""

    clock: FakeClock
    answer: Callable[[int], Renewal | Exception]
    delay_s: float = 0.0
    sent: list[float] = field(default_factory=list)

    async def renew_lease(self, job: str, request: RenewRequest) -> Renewal:
        fence, ttl_ms = request.fence, request.ttl_ms
        assert (job, fence, ttl_ms) == ("job", 7, int(TTL_S * 1000))
        self.sent.append(self.clock.monotonic())
        call = len(self.sent)
        if self.delay_s:
            await self.clock.sleep(self.delay_s)
        result = self.answer(call)
        if isinstance(result, Exception):
            raise result
        return result


def lease_on(clock: FakeClock, store: Renewals, granted_mono: float) -> Lease:
    return Lease(
        store=store,  # type: ignore[arg-type]
        clock=clock,
        job="job",
        fence=7,
        ttl_s=TTL_S,
        granted_mono=granted_mono,
    )


async def keep_for(clock: FakeClock, lease: Lease, seconds: float) -> tuple[bool, float | None]:
    """Keep the lease while ``seconds`` pass; return (lost flag, when the victim was cut)."""
    flag = threading.Event()
    cut: list[float] = []

    async def victim(scope: anyio.CancelScope) -> None:
        with scope:
            await clock.sleep(3600)
        if scope.cancelled_caught:
            cut.append(clock.monotonic())

    async with anyio.create_task_group() as tg:
        scope = anyio.CancelScope()
        tg.start_soon(victim, scope)
        tg.start_soon(lease.keep, scope, flag)
        await clock.advance(seconds)
        tg.cancel_scope.cancel()
    return flag.is_set(), (cut[0] if cut else None)


def test_the_deadline_counts_from_when_the_grant_was_sent_not_answered() -> None:
    clock = FakeClock()
    # The acquire went out at 10.0; its answer came at 10.4 (now, as the lease is made).
    lease = lease_on(clock, Renewals(clock, lambda _: Renewal.RENEWED), granted_mono=-0.4)
    assert lease.deadline_mono == pytest.approx(-0.4 + KEPT_S)
    # Redis may have started the lease as late as the answer: it surely ends by then + ttl.
    assert lease.expiry_mono == pytest.approx(TTL_S)


async def test_renewals_every_third_of_the_ttl_move_the_deadline_from_their_sending() -> None:
    clock = FakeClock()
    store = Renewals(clock, lambda _: Renewal.RENEWED, delay_s=0.2)
    lease = lease_on(clock, store, granted_mono=0.0)
    lost, cut = await keep_for(clock, lease, 9.5)
    assert (lost, cut, lease.lost) == (False, None, False)
    # Sent every ttl/3 after the previous one was sent, however long its answer took.
    assert store.sent == pytest.approx([1.0 * i for i in range(1, 10)])
    assert lease.renewals == 9
    assert lease.slowest_renewal_s == pytest.approx(0.2)
    # From the last renewal's sending (9.0), not its answer (9.2).
    assert lease.deadline_mono == pytest.approx(9.0 + KEPT_S)
    assert lease.expiry_mono == pytest.approx(9.2 + TTL_S)


async def test_failing_renewals_give_the_lease_up_at_the_deadline_without_an_answer() -> None:
    clock = FakeClock()
    store = Renewals(clock, lambda _: RedisUnavailableError("connection refused"))
    lease = lease_on(clock, store, granted_mono=0.0)
    lost, cut = await keep_for(clock, lease, 10.0)
    assert lost is True
    assert cut == pytest.approx(KEPT_S), "cancelled at the deadline, on the monotonic clock"
    assert lease.lost_reason == "no successful renewal within lease_ttl"
    # After a failure it retries four times as often (ttl/12) until the deadline.
    assert store.sent == pytest.approx([1.0 + 0.25 * i for i in range(7)])  # 2.5 < 2.7
    assert lease.failures == len(store.sent)


async def test_a_renewal_that_goes_through_late_saves_a_lease_whose_others_failed() -> None:
    clock = FakeClock()

    def answer(call: int) -> Renewal | Exception:
        return Renewal.RENEWED if call == 5 else RedisUnavailableError("timeout")

    store = Renewals(clock, answer)
    lease = lease_on(clock, store, granted_mono=0.0)
    lost, _ = await keep_for(clock, lease, 4.0)
    assert lost is False
    # The fifth attempt (1.0, 1.25, 1.5, 1.75, 2.0) renewed: the deadline counts from it.
    assert store.sent[4] == pytest.approx(2.0)
    assert lease.deadline_mono == pytest.approx(2.0 + KEPT_S)


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (Renewal.GONE, "lease expired or was released under us"),
        (Renewal.TAKEN, "lease was taken by a newer fence"),
    ],
)
async def test_a_renewal_refused_gives_the_lease_up_at_once(answer: Renewal, reason: str) -> None:
    clock = FakeClock()
    store = Renewals(clock, lambda call: Renewal.RENEWED if call == 1 else answer)
    lease = lease_on(clock, store, granted_mono=0.0)
    lost, cut = await keep_for(clock, lease, 5.0)
    assert (lost, cut) == (True, pytest.approx(2.0))
    assert lease.lost_reason == reason


async def test_a_lease_whose_deadline_passed_unseen_is_lost_when_anyone_looks() -> None:
    # A handler that blocked the loop: time passed and the renewal task never ran.
    clock = FakeClock()
    lease = lease_on(clock, Renewals(clock, lambda _: Renewal.RENEWED), granted_mono=0.0)
    await clock.advance(KEPT_S - 0.01)
    assert lease.check_deadline() is False
    await clock.advance(0.01)
    assert lease.check_deadline() is True
    assert lease.lost
    assert "lease_ttl" in (lease.lost_reason or "")


async def test_the_deadline_follows_a_handed_on_lease_from_its_new_grant() -> None:
    clock = FakeClock()
    lease = lease_on(clock, Renewals(clock, lambda _: Renewal.RENEWED), granted_mono=0.0)
    await clock.advance(2.5)
    lease.rebase(fence=8, granted_mono=2.4)
    assert lease.fence == 8
    assert lease.deadline_mono == pytest.approx(2.4 + KEPT_S)
    assert lease.expiry_mono == pytest.approx(2.5 + TTL_S)


def test_the_stand_in_has_the_stores_renew() -> None:
    # The stand-in must keep the store's signature, or these tests test nothing.
    def params(fn: Any) -> list[str]:
        return list(inspect.signature(fn).parameters)

    assert params(Store.renew_lease) == params(Renewals.renew_lease)
