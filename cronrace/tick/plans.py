"""What a due job fires: its expired, late and on-time ticks, under its catch-up policy; pure.

The loop pops a job when its first due tick comes; this classifies the ticks from there
to now (DESIGN.md section 5): one on time in the steady state, or a backlog after a late
wake-up, of which ticks older than ``catchup_window`` are only counted.

With ``racers = k`` it also plans the ticks whose racers all left, found by the share
(tick/share.py, ``orphans``) and raced late by this node (:func:`plan_orphaned`).
"""

from __future__ import annotations

import math

from cronrace.model.job import Job
from cronrace.model.policies import TickPlan, plan_ticks
from cronrace.tick.decisions import EXPIRED_COUNT_CAP


def window_start_s(now: float, catchup_window_s: float) -> int:
    """The oldest tick attempted at ``now`` (``now - tick <= catchup_window``, rounded up)."""
    return math.ceil(now - catchup_window_s)


def plan_orphaned(
    job: Job, ticks_s: list[int], now: float, live_grace_s: float, *, unlisted: int = 0
) -> TickPlan | None:
    """Plan the ticks a job's racers left behind when they left (tick/share.py, orphans):
    raced late by this node, under the job's catch-up policy. ``unlisted`` more of them
    (past the share's cap, among the listed ones) are counted missed with them."""
    return plan_ticks(
        job.catchup,
        due_ticks_s=ticks_s,
        newest_on_time=now - ticks_s[-1] <= live_grace_s,
        expired=unlisted,
        first_expired_s=None,
        cutoff_s=window_start_s(now, job.catchup_window_s),
        max_catchup=job.max_catchup,
    )


def plan_due(
    job: Job,
    first_due_s: int,
    now: float,
    live_grace_s: float,
    *,
    until_s: int | None = None,
) -> tuple[TickPlan | None, int]:
    """Classify a job's due ticks: expired, late (a backlog) or on time; and its next tick.

    A backlog may hold ticks other nodes decided meanwhile: the decision counts what
    was really missed, and logs it (decisions.report), so nothing is logged here.

    ``until_s`` pins the plan's claim to that tick, one this node claimed without an
    answer (only claiming that key again reads it back: it may be this node's): the plan
    decides the backlog's ticks up to it, as the catch-up policy would decide them in the
    whole backlog, and the next tick is the one after it (the rest follows at once).
    """
    now_s = int(now)
    schedule = job.schedule
    following = schedule.next_tick(first_due_s)
    if following > now_s and now - first_due_s <= live_grace_s:
        # The steady state: one tick, on time.
        return TickPlan(first_due_s, first_due_s, (first_due_s,), 0), following
    cutoff_s = window_start_s(now, job.catchup_window_s)
    expired = 0
    first_expired: int | None = None
    if first_due_s < cutoff_s:
        first_expired = first_due_s
        expired = schedule.count_between(first_due_s - 1, cutoff_s - 1, EXPIRED_COUNT_CAP)
    due = schedule.ticks_between(max(first_due_s, cutoff_s) - 1, now_s, EXPIRED_COUNT_CAP)
    newest_on_time = bool(due) and now - due[-1] <= live_grace_s
    plan = plan_ticks(
        job.catchup,
        due_ticks_s=due,
        newest_on_time=newest_on_time,
        expired=expired,
        first_expired_s=first_expired,
        cutoff_s=cutoff_s,
        max_catchup=job.max_catchup,
    )
    if plan is None or until_s is None or until_s == plan.claim_tick_s or until_s < first_due_s:
        return plan, schedule.next_tick(now_s)
    fire = tuple(t for t in plan.fire_ticks_s if t <= until_s)
    covered = schedule.count_between(first_due_s - 1, until_s, EXPIRED_COUNT_CAP)
    return TickPlan(until_s, until_s, fire, covered - len(fire)), schedule.next_tick(until_s)
