"""The catch-up planner (protocol/plan.py): which ticks of (cursor, tick] fire, and the one
missed range that counts the rest."""

from __future__ import annotations

import pytest

from cronrace.model.policies import Catchup
from cronrace.protocol import Missed, plan

TICKS = [100, 101, 102, 103, 104]


@pytest.mark.parametrize(
    ("policy", "on_time", "max_catchup", "fire", "missed"),
    [
        (Catchup.SKIP, False, 100, (), (Missed(100, 104, 5),)),
        (Catchup.SKIP, True, 100, (104,), (Missed(100, 103, 4),)),
        (Catchup.LATEST, False, 100, (104,), (Missed(100, 103, 4),)),
        (Catchup.LATEST, True, 100, (104,), (Missed(100, 103, 4),)),
        (Catchup.ALL, False, 100, (100, 101, 102, 103, 104), ()),
        (Catchup.ALL, False, 3, (102, 103, 104), (Missed(100, 101, 2),)),
        (Catchup.ALL, True, 1, (104,), (Missed(100, 103, 4),)),
    ],
)
def test_a_backlog_is_decided_by_the_catchup_policy(
    policy: Catchup,
    on_time: bool,
    max_catchup: int,
    fire: tuple[int, ...],
    missed: tuple[Missed, ...],
) -> None:
    got = plan(policy, due_s=TICKS, on_time=on_time, expired=None, max_catchup=max_catchup)
    assert got == (fire, missed)


def test_ticks_past_the_window_join_the_missed_range() -> None:
    got = plan(
        Catchup.LATEST, due_s=[103, 104], on_time=False, expired=Missed(50, 102, 7), max_catchup=9
    )
    assert got == ((104,), (Missed(50, 103, 8),))


def test_a_window_with_nothing_due_fires_nothing_and_counts_what_expired() -> None:
    got = plan(Catchup.ALL, due_s=[], on_time=False, expired=Missed(50, 102, 3), max_catchup=9)
    assert got == ((), (Missed(50, 102, 3),))
    assert plan(Catchup.ALL, due_s=[], on_time=False, expired=None, max_catchup=1) == ((), ())
