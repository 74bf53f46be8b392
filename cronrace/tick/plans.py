"""What a decision of one job covers: (cursor, tick], split by the catch-up policy; pure.

A node decides a job's tick T from the cursor C it expects (docs/design.md section 3):
every tick of (C, T] is in its plan, fired or counted. The ticks older than the catch-up
window are counted, never fired; of those inside it the policy fires some
(:func:`cronrace.protocol.plan`). A new job (no cursor) decides its tick alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cronrace.model.job import Job
from cronrace.protocol import Missed, plan

#: The most ticks counted one by one in a backlog past the catch-up window: a count that
#: reaches it is recorded as this many, "at least" (a minutely job down for 69 days).
EXPIRED_COUNT_CAP = 100_000


def window_start_s(now: float, catchup_window_s: float) -> int:
    """The oldest tick attempted at ``now`` (``now - tick <= catchup_window``, rounded up)."""
    return math.ceil(now - catchup_window_s)


@dataclass(frozen=True, slots=True)
class Plan:
    """One decision's plan: (from_s, tick_s], the ticks it fires and those it does not.

    Attributes:
        tick_s: the tick whose claim decides the plan (the newest due tick).
        cursor_s: the cursor the plan expects (None: none known, a new job).
        from_s: the plan's exclusive lower bound (the cursor, or the tick before).
        fire_s: the ticks to fire, oldest first.
        missed: the rest, as a range with its count.
    """

    tick_s: int
    cursor_s: int | None
    from_s: int
    fire_s: tuple[int, ...]
    missed: tuple[Missed, ...]

    @property
    def missed_count(self) -> int:
        """How many ticks the plan does not fire."""
        return sum(m.count for m in self.missed)


def plan_tick(
    job: Job,
    tick_s: int,
    cursor_s: int | None,
    now: float,
    live_grace_s: float,
    *,
    since_s: int | None = None,
) -> Plan:
    """Plan the decision of ``tick_s`` from ``cursor_s`` (which must be below it).

    In the steady state the cursor is the tick before: the plan fires ``tick_s`` alone. A
    job without a cursor (its first decision) covers the ticks after ``since_s`` (the
    node's first due tick, less one), or ``tick_s`` alone.
    """
    schedule = job.schedule
    on_time = now - tick_s <= live_grace_s
    lower_s = cursor_s if cursor_s is not None else (tick_s - 1 if since_s is None else since_s)
    start_s = window_start_s(now, job.catchup_window_s)
    expired: Missed | None = None
    if lower_s < start_s - 1:
        upper_s = min(start_s - 1, tick_s)
        count = schedule.count_between(lower_s, upper_s, EXPIRED_COUNT_CAP)
        if count:
            expired = Missed(schedule.next_tick(lower_s), upper_s, count)
    due = schedule.ticks_between(max(lower_s, start_s - 1), tick_s, job.max_catchup + 1)
    if len(due) > job.max_catchup:
        # A long backlog inside the window: count all but the newest max_catchup + 1,
        # which are enough for every policy (all fires at most max_catchup of them).
        inside_s = max(lower_s, start_s - 1)
        newest = newest_ticks(job, inside_s, tick_s, job.max_catchup + 1)
        older = schedule.count_between(inside_s, newest[0] - 1, EXPIRED_COUNT_CAP)
        if older:
            first_s = expired.first_s if expired is not None else schedule.next_tick(inside_s)
            expired = Missed(first_s, newest[0] - 1, older + (expired.count if expired else 0))
        due = newest
    fire, missed = plan(
        job.catchup,
        due_s=due,
        on_time=on_time,
        expired=expired,
        max_catchup=job.max_catchup,
    )
    return Plan(tick_s, cursor_s, lower_s, fire, missed)


def newest_tick(job: Job, after_s: int, until_s: int) -> int:
    """The newest tick of (after_s, until_s] (0: none)."""
    ticks = newest_ticks(job, after_s, until_s, 1)
    return ticks[-1] if ticks else 0


def newest_ticks(job: Job, after_s: int, until_s: int, count: int) -> list[int]:
    """The newest ``count`` ticks of (after_s, until_s], oldest first."""
    schedule = job.schedule
    period_s = max(1, schedule.interval_s(until_s))
    lower_s = max(after_s, until_s - period_s * (count + 1))
    while True:
        ticks = schedule.ticks_between(lower_s, until_s, EXPIRED_COUNT_CAP)
        if len(ticks) >= count or lower_s <= after_s:
            return ticks[-count:]
        lower_s = max(after_s, until_s - (until_s - lower_s) * 2)
