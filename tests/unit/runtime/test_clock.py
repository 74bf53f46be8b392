"""The Redis-offset clock: NTP's clock filter over ``TIME`` samples, on a fake base clock."""

from __future__ import annotations

import anyio
import pytest

from cronrace.runtime.clock import Clock, ServerOffsetClock, SystemClock
from cronrace.testing import FakeClock

START_S = 1_800_000_000.0


def test_until_the_first_sample_it_is_the_base_clock() -> None:
    base = FakeClock(start_s=START_S)
    clock = ServerOffsetClock(base)
    assert (clock.synced, clock.offset_s) == (False, 0.0)
    assert clock.time() == START_S


def test_the_offset_is_the_servers_time_minus_the_round_trips_midpoint() -> None:
    clock = ServerOffsetClock(FakeClock(start_s=START_S))
    # Sent at 0.0, answered at 0.2: the server read its clock (100.5) at our 0.1.
    clock.add_sample(sent_wall_s=START_S, received_wall_s=START_S + 0.2, server_s=START_S + 100.5)
    assert clock.synced
    assert clock.offset_s == pytest.approx(100.4)
    assert clock.time() == pytest.approx(START_S + 100.4)


@pytest.mark.parametrize(
    ("samples", "offset_s"),
    [
        # (rtt, offset): the shortest round trip wins, whatever came before or after it
        ([(0.2, 1.0), (0.01, 2.0), (0.5, 3.0)], 2.0),
        ([(0.01, 2.0), (0.2, 1.0)], 2.0),
        ([(0.2, 1.0), (0.2, 5.0)], 1.0),  # a tie keeps the older
        ([(0.3, -4.0)], -4.0),  # a server behind us
    ],
)
def test_the_sample_with_the_shortest_round_trip_gives_the_offset(
    samples: list[tuple[float, float]], offset_s: float
) -> None:
    clock = ServerOffsetClock(FakeClock(start_s=START_S))
    for rtt_s, offset in samples:
        sent = START_S + 10
        clock.add_sample(
            sent_wall_s=sent, received_wall_s=sent + rtt_s, server_s=sent + rtt_s / 2 + offset
        )
    assert clock.offset_s == pytest.approx(offset_s)


def test_the_best_sample_ages_out_of_the_window() -> None:
    clock = ServerOffsetClock(FakeClock(start_s=START_S), window=3)
    clock.add_sample(sent_wall_s=0.0, received_wall_s=0.001, server_s=7.0005)  # offset 7
    for offset in (1.0, 2.0):
        clock.add_sample(sent_wall_s=0.0, received_wall_s=0.1, server_s=0.05 + offset)
    assert clock.offset_s == pytest.approx(7.0)
    clock.add_sample(sent_wall_s=0.0, received_wall_s=0.2, server_s=0.1 + 3.0)
    # The 1 ms sample fell out; of 0.1, 0.1, 0.2 s the first 0.1 s one wins.
    assert clock.offset_s == pytest.approx(1.0)


def test_a_sample_whose_answer_came_before_it_was_sent_counts_as_no_round_trip() -> None:
    # Our wall clock was stepped back while the request was out.
    clock = ServerOffsetClock(FakeClock(start_s=START_S))
    clock.add_sample(sent_wall_s=10.0, received_wall_s=9.0, server_s=15.0)
    assert clock.offset_s == pytest.approx(5.0)
    clock.add_sample(sent_wall_s=10.0, received_wall_s=10.001, server_s=20.0)
    assert clock.offset_s == pytest.approx(5.0), "the zero round trip stays the best"


async def test_monotonic_time_and_sleep_are_the_base_clocks_untouched_by_the_offset() -> None:
    base = FakeClock(start_s=START_S)
    clock = ServerOffsetClock(base)
    clock.add_sample(sent_wall_s=START_S, received_wall_s=START_S, server_s=START_S - 30)
    woke: list[tuple[float, float]] = []

    async def sleeper() -> None:
        await clock.sleep(2.0)
        woke.append((clock.monotonic(), clock.time()))

    async with anyio.create_task_group() as tg:
        tg.start_soon(sleeper)
        await base.advance(5.0)
    assert woke == [(2.0, START_S + 2.0 - 30)]
    assert clock.monotonic() == base.monotonic() == 5.0


def test_every_clock_is_a_clock() -> None:
    assert isinstance(ServerOffsetClock(), Clock)
    assert isinstance(SystemClock(), Clock)
    assert isinstance(FakeClock(), Clock)


def test_the_skewed_system_clock_is_off_by_its_skew() -> None:
    skewed, plain = SystemClock(skew_s=3.0), SystemClock()
    assert skewed.time() - plain.time() == pytest.approx(3.0, abs=0.05)
    assert abs(skewed.monotonic() - plain.monotonic()) < 0.05
