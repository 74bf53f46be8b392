"""Overlap and catch-up policies, and the pure decisions they make.

The overlap decision itself runs inside ``acquire.lua`` (it must be atomic with the lease
check); this module names the policies and plans catch-up, which is arithmetic on the
list of ticks a node found due.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Overlap(StrEnum):
    """What to do with a tick when the job's previous run is still alive."""

    SKIP = "skip"
    """Record ``skipped:overlap`` and run nothing (the default)."""
    QUEUE_ONE = "queue_one"
    """Keep this tick pending (a newer one replaces it); the owner runs it on release."""
    REPLACE = "replace"
    """Take the lease with a new fence; the old run is cancelled at its next renewal."""
    ALLOW = "allow"
    """Run anyway, with a new fence and no lease."""


class Catchup(StrEnum):
    """What to do with ticks that were missed (start-up, Redis outage, a paused process)."""

    SKIP = "skip"
    """Fire none of them; write one ``missed`` record with the count."""
    LATEST = "latest"
    """Fire only the most recent missed tick (the default)."""
    ALL = "all"
    """Fire each in order, at most ``max_catchup`` of them (the newest), the rest missed."""


class Outcome(StrEnum):
    """The outcome written in a run record: one per decision."""

    OK = "ok"
    ERROR = "error"
    CANCELLED = "cancelled"
    LEASE_LOST = "lease_lost"
    SKIPPED_OVERLAP = "skipped:overlap"
    SKIPPED_PAUSED = "skipped:paused"
    QUEUED = "queued"
    MISSED = "missed"
    STALE = "stale"
    ABANDONED = "abandoned"
    NOT_REPLICATED = "skipped:not_replicated"
    GRANTED = "granted"
    """Decided to run (the decision's record; the run's own result follows it)."""
    DATA_LOST = "data_lost"
    """The store lost the job's data: the ticks up to the record's were decided by whom
    and how is unknown (their records went with it)."""


@dataclass(frozen=True, slots=True)
class TickPlan:
    """What one node proposes for one job at one wake-up.

    Attributes:
        claim_tick_s: the tick whose claim decides the whole plan. It is the newest due tick,
            so every node proposing something for the same backlog races for one key.
        mark_tick_s: the watermark the winner sets (at least ``claim_tick_s``).
        fire_ticks_s: the ticks to run, oldest first (empty when nothing runs).
        missed: how many due ticks will not run (out of the window, or dropped by the
            policy); the claim winner writes them as one ``missed`` record.
    """

    claim_tick_s: int
    mark_tick_s: int
    fire_ticks_s: tuple[int, ...]
    missed: int


def plan_ticks(
    policy: Catchup,
    *,
    due_ticks_s: list[int],
    newest_on_time: bool,
    expired: int,
    first_expired_s: int | None,
    cutoff_s: int,
    max_catchup: int,
) -> TickPlan | None:
    """Decide which of the due ticks of one job to fire.

    In the steady state one tick is due and on time, and the plan fires it. A backlog (after
    start-up, a Redis outage or a paused process) is decided by the catch-up policy; an
    on-time tick at the end of a backlog always fires, since it was not missed.

    Args:
        policy: the job's catch-up policy.
        due_ticks_s: due ticks inside the catch-up window, oldest first.
        newest_on_time: whether the newest due tick is on time rather than late.
        expired: how many earlier ticks fell out of the window (they count as missed).
        first_expired_s: the oldest of those; it carries the claim when the window holds
            nothing, so that only one node writes the ``missed`` record.
        cutoff_s: the oldest tick still inside the window.
        max_catchup: the most ticks ``Catchup.ALL`` fires at once.

    Returns:
        The plan, or None when there is nothing to decide.
    """
    if not due_ticks_s:
        if expired and first_expired_s is not None:
            return TickPlan(first_expired_s, cutoff_s - 1, (), expired)
        return None
    newest_s = due_ticks_s[-1]
    fire: tuple[int, ...]
    if policy is Catchup.ALL and max_catchup > 1:
        fire = tuple(due_ticks_s[-max_catchup:])
    elif policy is Catchup.SKIP and not newest_on_time:
        fire = ()
    else:
        fire = (newest_s,)
    return TickPlan(newest_s, newest_s, fire, expired + len(due_ticks_s) - len(fire))
