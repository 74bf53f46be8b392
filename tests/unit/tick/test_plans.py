"""What a due job's plan decides (tick/plans.py), and a plan pinned to a claim that got no
answer: the catch-up policy applied to the whole backlog, cut at the pinned tick."""

from __future__ import annotations

import pytest

from cronrace.model.job import Job
from cronrace.model.policies import Catchup, TickPlan
from cronrace.tick.plans import plan_due

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


@pytest.mark.parametrize(
    ("catchup", "whole", "pinned"),
    [
        # 60 and 70 due at 70.2; the claim on 60 got no answer.
        (Catchup.SKIP, TickPlan(70, 70, (70,), 1), TickPlan(60, 60, (), 1)),
        (Catchup.LATEST, TickPlan(70, 70, (70,), 1), TickPlan(60, 60, (), 1)),
        (Catchup.ALL, TickPlan(70, 70, (60, 70), 0), TickPlan(60, 60, (60,), 0)),
    ],
)
def test_a_pinned_plan_decides_the_ticks_up_to_its_claim_as_the_whole_backlog_would(
    catchup: Catchup, whole: TickPlan, pinned: TickPlan
) -> None:
    assert plan_due(job(catchup), 60, 70.2, GRACE_S) == (whole, 80)
    # The ticks after the pinned one follow at once: the next tick is 70, due already.
    assert plan_due(job(catchup), 60, 70.2, GRACE_S, until_s=60) == (pinned, 70)
    rest, following = plan_due(job(catchup), 70, 70.2, GRACE_S)
    assert following == 80
    assert rest is not None
    assert set(pinned.fire_ticks_s) | set(rest.fire_ticks_s) == set(whole.fire_ticks_s)
    assert pinned.missed + rest.missed == whole.missed


def test_a_pinned_plan_still_newest_is_the_whole_plan() -> None:
    whole = plan_due(job(Catchup.LATEST), 60, 62.0, GRACE_S)
    assert whole == (TickPlan(60, 60, (60,), 0), 70)
    assert plan_due(job(Catchup.LATEST), 60, 62.0, GRACE_S, until_s=60) == whole


def test_a_pinned_tick_out_of_the_window_is_counted_missed_under_its_claim() -> None:
    # 60..90 left the 20 s window at 115; 100 and 110 are in it (catchup = all fires both).
    whole = plan_due(job(Catchup.ALL, window_s=20), 60, 115.0, GRACE_S)
    assert whole == (TickPlan(110, 110, (100, 110), 4), 120)
    pinned = plan_due(job(Catchup.ALL, window_s=20), 60, 115.0, GRACE_S, until_s=70)
    assert pinned == (TickPlan(70, 70, (), 2), 80)
