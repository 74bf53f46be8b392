"""What a decision of one job covers (tick/plans.py): every tick of (cursor, tick], fired
under the catch-up policy or counted in one missed range."""

from __future__ import annotations

import pytest

from cronrace.model.job import Job
from cronrace.model.policies import Catchup
from cronrace.protocol import Missed
from cronrace.tick.plans import Plan, newest_tick, plan_tick

GRACE_S = 1.0


def job(catchup: Catchup, *, window_s: float = 40.0, max_catchup: int = 2) -> Job:
    return Job.define(
        lambda ctx: None,
        "@every 10s",
        name="j",
        catchup=catchup,
        catchup_window=window_s,
        max_catchup=max_catchup,
    )


@pytest.mark.parametrize("catchup", list(Catchup))
def test_the_steady_state_fires_its_tick_alone(catchup: Catchup) -> None:
    assert plan_tick(job(catchup), 70, 60, 70.2, GRACE_S) == Plan(70, 60, 60, (70,), ())


@pytest.mark.parametrize("catchup", list(Catchup))
def test_a_new_job_decides_its_tick_alone(catchup: Catchup) -> None:
    fire = () if catchup is Catchup.SKIP else (70,)
    missed = (Missed(70, 70, 1),) if catchup is Catchup.SKIP else ()
    # 5 s late: on time for nobody, so catch-up skip fires nothing and counts it.
    assert plan_tick(job(catchup), 70, None, 75.0, GRACE_S) == Plan(70, None, 69, fire, missed)


@pytest.mark.parametrize(
    ("catchup", "fire", "missed"),
    [
        (Catchup.SKIP, (70,), (Missed(40, 60, 3),)),
        (Catchup.LATEST, (70,), (Missed(40, 60, 3),)),
        (Catchup.ALL, (60, 70), (Missed(40, 50, 2),)),
    ],
)
def test_a_backlog_fires_under_the_policy_and_counts_the_rest_in_one_range(
    catchup: Catchup, fire: tuple[int, ...], missed: tuple[Missed, ...]
) -> None:
    assert plan_tick(job(catchup), 70, 30, 70.2, GRACE_S) == Plan(70, 30, 30, fire, missed)


def test_ticks_older_than_the_window_are_counted_never_fired() -> None:
    # 20 s window at 115: 100 and 110 are in it, 40..90 are not.
    plan = plan_tick(job(Catchup.ALL, window_s=20), 110, 30, 115.0, GRACE_S)
    assert plan == Plan(110, 30, 30, (100, 110), (Missed(40, 94, 6),))


def test_a_tick_decided_after_its_window_fires_nothing() -> None:
    plan = plan_tick(job(Catchup.ALL, window_s=20), 70, 60, 200.0, GRACE_S)
    assert plan.fire_s == ()
    assert plan.missed_count == 1


def test_a_long_backlog_inside_the_window_counts_what_max_catchup_leaves() -> None:
    plan = plan_tick(job(Catchup.ALL, window_s=3600, max_catchup=3), 1000, 0, 1000.5, GRACE_S)
    assert plan.fire_s == (980, 990, 1000)
    assert plan.missed == (Missed(10, 970, 97),)
    assert len(plan.fire_s) + plan.missed_count == 100


def test_newest_tick_finds_the_last_tick_of_a_range() -> None:
    assert newest_tick(job(Catchup.ALL), 0, 1005) == 1000
    assert newest_tick(job(Catchup.ALL), 995, 999) == 0
