"""The catch-up planner: which ticks of a backlog fire, and how many are missed."""

from __future__ import annotations

import pytest

from cronrace.model.policies import Catchup, TickPlan, plan_ticks

TICKS = [100, 101, 102, 103, 104]


@pytest.mark.parametrize(
    ("policy", "on_time", "max_catchup", "fire", "missed"),
    [
        (Catchup.SKIP, False, 100, (), 5),
        (Catchup.SKIP, True, 100, (104,), 4),
        (Catchup.LATEST, False, 100, (104,), 4),
        (Catchup.LATEST, True, 100, (104,), 4),
        (Catchup.ALL, False, 100, (100, 101, 102, 103, 104), 0),
        (Catchup.ALL, False, 3, (102, 103, 104), 2),
        (Catchup.ALL, True, 1, (104,), 4),
    ],
)
def test_backlog_is_decided_by_the_catchup_policy(
    policy: Catchup, on_time: bool, max_catchup: int, fire: tuple[int, ...], missed: int
) -> None:
    plan = plan_ticks(
        policy,
        due_ticks_s=TICKS,
        newest_on_time=on_time,
        expired=0,
        first_expired_s=None,
        cutoff_s=90,
        max_catchup=max_catchup,
    )
    assert plan == TickPlan(104, 104, fire, missed)


def test_expired_ticks_count_as_missed_and_the_newest_in_window_carries_the_claim() -> None:
    plan = plan_ticks(
        Catchup.LATEST,
        due_ticks_s=[103, 104],
        newest_on_time=False,
        expired=7,
        first_expired_s=50,
        cutoff_s=103,
        max_catchup=100,
    )
    assert plan == TickPlan(104, 104, (104,), 8)


def test_all_expired_is_recorded_once_under_the_oldest_ticks_claim() -> None:
    plan = plan_ticks(
        Catchup.ALL,
        due_ticks_s=[],
        newest_on_time=False,
        expired=3,
        first_expired_s=50,
        cutoff_s=103,
        max_catchup=100,
    )
    assert plan == TickPlan(50, 102, (), 3)


def test_nothing_due_plans_nothing() -> None:
    assert (
        plan_ticks(
            Catchup.ALL,
            due_ticks_s=[],
            newest_on_time=False,
            expired=0,
            first_expired_s=None,
            cutoff_s=0,
            max_catchup=1,
        )
        is None
    )
