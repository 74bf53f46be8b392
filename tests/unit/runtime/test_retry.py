"""The one retry policy: capped exponential backoff with full jitter, on a fake clock."""

from __future__ import annotations

import anyio
import pytest

from cronrace.runtime.retry import BACKOFF, Backoff, Retry, backoff_s
from cronrace.testing import FakeClock


@pytest.mark.parametrize(
    ("attempt", "bound_s"), [(0, 0.1), (1, 0.2), (2, 0.4), (3, 0.8), (4, 1.6), (5, 2.0), (60, 2.0)]
)
def test_bound_doubles_from_start_up_to_the_cap(attempt: int, bound_s: float) -> None:
    assert BACKOFF.bound_s(attempt) == pytest.approx(bound_s)


def test_full_jitter_waits_anywhere_below_the_bound() -> None:
    waits = [backoff_s(3) for _ in range(2000)]
    assert all(0 <= wait <= 0.8 for wait in waits)
    assert min(waits) < 0.1
    assert max(waits) > 0.7


def test_without_jitter_the_wait_is_the_bound() -> None:
    policy = Backoff(start_s=0.01, max_s=0.5, jitter=False)
    assert [policy.delay_s(n) for n in range(8)] == pytest.approx(
        [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.5, 0.5]
    )


def test_slowest_attempt_is_the_first_capped_one() -> None:
    assert BACKOFF.slowest_attempt == 5
    assert BACKOFF.bound_s(BACKOFF.slowest_attempt - 1) < BACKOFF.max_s
    assert Backoff(start_s=1.0, max_s=1.0).slowest_attempt == 0


def test_huge_attempt_counts_do_not_overflow() -> None:
    assert BACKOFF.bound_s(10_000) == BACKOFF.max_s


async def test_retry_sleeps_its_backoff_on_the_clock_and_counts_failures() -> None:
    clock = FakeClock(start_s=1_000.0)
    retry = Retry(clock, Backoff(start_s=1.0, max_s=4.0, jitter=False))
    done: list[float] = []

    async def fail_three_times() -> None:
        for _ in range(3):
            await retry.wait()
            done.append(clock.monotonic())

    async with anyio.create_task_group() as tg:
        tg.start_soon(fail_three_times)
        await clock.advance(10)
    assert done == [1.0, 3.0, 7.0]  # waits of 1, 2 and 4 s
    assert retry.attempt == 3
    assert retry.succeeded() is True
    assert retry.attempt == 0
    assert retry.succeeded() is False


def test_a_refusal_jumps_to_the_slowest_wait() -> None:
    retry = Retry(FakeClock(), Backoff(start_s=0.1, max_s=2.0, jitter=False))
    retry.refused()
    assert retry.failed() == 2.0
    assert retry.failed() == 2.0
