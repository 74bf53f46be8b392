"""racers = k: the recent ticks a node races again when their racers depart (tick/share.py)."""

from __future__ import annotations

from cronrace.fleet.membership import Membership
from cronrace.fleet.racers import Racers, Ring, placement_start_s
from cronrace.model.job import Job, RunContext
from cronrace.model.policies import TickPlan
from cronrace.tick.decisions import Proposal
from cronrace.tick.plans import plan_orphaned
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


def orphaned(share: RacerShare, change: Change, tick_s: int) -> bool:
    """The definition, tick by tick: n1 races it only since the change, and every racer it
    was left to has gone."""
    k = share.k or 0
    return (
        not change.before.races("n1", "b", tick_s, k)
        and change.after.races("n1", "b", tick_s, k)
        and change.after.members.isdisjoint(change.before.racers("b", tick_s, k))
    )


def test_orphaned_ticks_past_the_cap_are_counted_for_the_missed_record() -> None:
    """Between the oldest listed and the last few heartbeats' ticks, none is left out of
    the decision's account (they were neither raced again nor counted before)."""
    job = Job.define(noop, "* * * * * *", name="b")
    share = RacerShare("n1", Membership("n1", Racers.parse("2"), 2.0), {"b": job}, ORPHAN_WINDOW_S)
    change = Change(Ring.build(["n1", "n2", "n3", "n4"]), Ring.build(["n1"]), NOW_S - 300)
    share.recover(change, job, NOW_S + 1, NOW_S)
    assert len(share.orphans["b"]) == RECENT_TICKS_CAP + int(ORPHAN_WINDOW_S) + 1
    assert share.unlisted["b"] == 301 - len(share.orphans["b"])
    plan = plan_orphaned(job, share.orphans["b"], NOW_S + 0.2, 1.0, unlisted=share.unlisted["b"])
    assert plan is not None
    assert plan.missed == 300  # all but the newest, which fires


def test_unlisted_ticks_are_counted_window_by_window() -> None:
    """An hour back spans two placement windows with different racers: only the ticks of
    windows whose racers all left count, as the listed ones are chosen."""
    job = Job.define(noop, "* * * * * *", name="b")
    before = Ring.build(["n1", "n2", "n3", "n4", "n5", "n6"])
    after = Ring.build(["n1", "n2", "n3"])
    counted = 0
    for since_s in range(NOW_S - 3500, NOW_S - 100, 300):
        share = RacerShare(
            "n1", Membership("n1", Racers.parse("2"), 2.0), {"b": job}, ORPHAN_WINDOW_S
        )
        change = Change(before, after, since_s)
        share.recover(change, job, NOW_S + 1, NOW_S)
        listed = share.orphans.get("b", [])
        expected = [t for t in range(since_s, NOW_S + 1) if orphaned(share, change, t)]
        assert set(listed) <= set(expected)
        assert len(listed) + share.unlisted.get("b", 0) == len(expected)
        counted += share.unlisted.get("b", 0)
    assert counted  # some window of some start had orphans past the cap


def test_orphans_whose_race_got_no_answer_are_covered_from_the_oldest_however_old() -> None:
    """Ticks left to others are covered by the job's next claim from the orphan window on;
    orphans whose own race got no answer (Redis away when a departure seen late was
    raced) from the oldest, or the older ones are neither raced again nor counted (the
    real-process test_late_departures[unanswered]: 79 of 80 unrecorded)."""
    job = Job.define(noop, "* * * * * *", name="b")
    share = RacerShare("n1", Membership("n1", Racers.parse("2"), 2.0), {"b": job}, ORPHAN_WINDOW_S)
    steady = TickPlan(NOW_S, NOW_S, (NOW_S,), 0)

    def next_claim() -> Proposal:
        return share.with_passed(
            job, steady, NOW_S, NOW_S + 0.2, prior_tick_s=NOW_S - 1, live_grace_s=1.0
        )

    share.passed["b"] = NOW_S - 300
    left = next_claim()
    assert left.shared_from_s is not None
    assert left.shared_from_s >= NOW_S - ORPHAN_WINDOW_S - 1  # the orphan window's bound
    share.uncovered["b"] = NOW_S - 300
    orphaned = next_claim()
    assert orphaned.shared_from_s == NOW_S - 300
    assert orphaned.plan.claim_tick_s == NOW_S
    assert orphaned.plan.missed == 300  # each counted (the decision leaves out the decided)
    assert "b" not in share.uncovered


def test_a_tick_whose_last_racer_beat_after_it_is_raced_again_within_the_takeover_span() -> None:
    """n1 left tick t to n2 and n4; n4 left (n2 lives), then n2. n2 beat after t, but it may
    have taken t's claim over from n4 (tick/takeover.py, up to the orphan window after t)
    and died before deciding it: t is raced again while the leavers' last beat is within
    that window after it, and not later (it decided what it took). Before, only the ticks
    after n2's last beat were (the scheduler model with racers = 2: the tick lost)."""
    job = Job.define(noop, "* * * * * *", name="b")
    four = Ring.build(["n1", "n2", "n3", "n4"])
    racers = four.racers("b", NOW_S, 2)
    assert set(racers) == {"n2", "n4"}

    def raced_again(since_s: int) -> list[int]:
        share = RacerShare(
            "n1", Membership("n1", Racers.parse("2"), 2.0), {"b": job}, ORPHAN_WINDOW_S
        )
        share.left_to("b", NOW_S, racers, NOW_S)
        without_n4 = Ring.build(["n1", "n2", "n3"])
        share._members_left(Change(four, without_n4, NOW_S))  # n2 lives: nothing yet
        assert share.orphans == {}
        share._members_left(Change(without_n4, Ring.build(["n1", "n3"]), since_s))
        return share.orphans.get("b", [])

    assert Ring.build(["n1", "n3"]).races("n1", "b", NOW_S, 2)
    assert raced_again(NOW_S + 3) == [NOW_S]
    assert raced_again(NOW_S + int(ORPHAN_WINDOW_S)) == [NOW_S]
    assert raced_again(NOW_S + int(ORPHAN_WINDOW_S) + 1) == []


def test_ticks_past_the_cap_whose_racers_leave_one_read_apart_are_all_counted() -> None:
    """A returning node (its own beats failed for 80 s) sees the job's two racers leave
    at two reads: the first change lists the oldest and the last few heartbeats' ticks
    (one racer lives: remembered, not raced), the second races them when the other
    leaves. The ticks between those lists were neither listed nor counted, and the second
    change lost them: 73 of 81 accounted for before (the late-departures fault test)."""
    job = Job.define(noop, "* * * * * *", name="b")
    three = Ring.build(["n1", "n2", "n4"])
    first, second = three.racers("b", NOW_S, 2)
    assert "n1" not in (first, second)
    share = RacerShare("n1", Membership("n1", Racers.parse("2"), 2.0), {"b": job}, ORPHAN_WINDOW_S)
    after_first = Ring.build(["n1", second])
    share.recover(Change(three, after_first, NOW_S - 80), job, NOW_S + 1, NOW_S)
    assert (share.orphans, share.unlisted) == ({}, {})
    share._members_left(Change(after_first, Ring.build(["n1"]), NOW_S - 80))
    listed = share.orphans["b"]
    assert len(listed) < 81
    assert len(listed) + share.unlisted["b"] == 81  # NOW_S - 80 .. NOW_S
    assert share.left_unlisted == {}  # counted once
    share._members_left(Change(after_first, Ring.build(["n1"]), NOW_S - 80))
    assert share.unlisted["b"] == 81 - len(listed)


def test_a_groups_turn_is_taken_a_chunk_at_a_time_and_finds_what_one_pass_would() -> None:
    """With racer_groups a group's jobs turn at one second: at most ``limit`` a call, so
    the loop goes on between chunks; together the chunks turn every job once and return
    the jobs this node races in the new window, as one call over all of them would."""
    names = [f"job-{i:04d}" for i in range(1200)]
    ring = Ring.build(f"n{i}" for i in range(8))

    def share() -> RacerShare:
        membership = Membership("n1", Racers.parse("2", 2), 2.0)
        membership.ring = ring
        out = RacerShare("n1", membership, {}, ORPHAN_WINDOW_S)
        out.track_all(names, NOW_S)
        return out

    chunked, whole = share(), share()
    turn_s = chunked.next_turn_s()
    assert whole.next_turn_s() == turn_s
    assert chunked.due_turns(turn_s - 1, limit=100) == ([], False)
    # Turn a whole window: every group's turn comes in it once.
    window_end = turn_s + 3599
    expected, more = whole.due_turns(window_end, limit=10**6)
    assert not more
    got, calls = [], 0
    more = True
    while more:
        turned, more = chunked.due_turns(window_end, limit=100)
        assert len(turned) <= 100
        got += turned
        calls += 1
    assert sorted(got) == sorted(expected)
    assert calls >= len(names) // 100  # each job's turn counted against the limit
    membership = Membership("n1", Racers.parse("2", 2), 2.0)
    membership.ring = ring
    placed = membership.racers.placed_as
    starts = {n: placement_start_s(placed(n), window_end) for n in names}
    assert set(starts.values()) <= set(range(turn_s, window_end + 1))
    assert sorted(expected) == sorted(
        (starts[n], n) for n in names if membership.races(n, starts[n])
    )
    assert 0 < len(expected) < len(names)
