"""racers = k: the recent ticks a node races again when their racers depart (tick/share.py)."""

from __future__ import annotations

from cronrace.fleet.membership import Membership
from cronrace.fleet.racers import Racers, Ring
from cronrace.model.job import Job, RunContext
from cronrace.tick.share import RECENT_TICKS_CAP, Change, RacerShare

NOW_S = 1_800_000_000
ORPHAN_WINDOW_S = 8.0


def noop(ctx: RunContext) -> None:
    pass


def orphans_after(since_s: int) -> list[int]:
    """n1's orphans of a one-second job whose racers (n2, n4) left, seen at ``NOW_S``."""
    job = Job.define(noop, "* * * * * *", name="b")  # raced by n2 and n4 among the four
    share = RacerShare("n1", Membership("n1", Racers.parse("2"), 2.0), {"b": job}, ORPHAN_WINDOW_S)
    before = Ring.build(["n1", "n2", "n3", "n4"])
    assert not before.races("n1", "b", NOW_S, 2)
    share.recover(Change(before, Ring.build(["n1"]), since_s), job, NOW_S + 1, NOW_S)
    return share.orphans.get("b", [])


def test_a_departure_seen_in_time_races_again_the_ticks_since_the_leavers_last_beat() -> None:
    assert orphans_after(NOW_S - 5) == list(range(NOW_S - 5, NOW_S + 1))


def test_a_departure_seen_late_is_looked_back_on_from_the_leavers_last_beat() -> None:
    """Its own beats were failing (it claimed nothing): not only the last few heartbeats'
    ticks, or a decision passes the older ones unrecorded (the scheduler model found it)."""
    assert orphans_after(NOW_S - 40) == list(range(NOW_S - 40, NOW_S + 1))


def test_more_ticks_than_the_cap_keep_the_oldest_and_the_last_few_heartbeats() -> None:
    ticks = orphans_after(NOW_S - 300)
    oldest = list(range(NOW_S - 300, NOW_S - 300 + RECENT_TICKS_CAP))
    recent = list(range(NOW_S - int(ORPHAN_WINDOW_S), NOW_S + 1))
    assert ticks == oldest + recent
