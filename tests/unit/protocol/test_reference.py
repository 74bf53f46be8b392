"""The reference protocol's rules (cronrace/protocol/), one statement of behaviour each.

Every test builds a job's state by hand, applies one call of the reference, and states what
it answers and what it leaves. The exhaustive checker (tests/model/explore.py) checks the
rules together; these pin each one down where a reader can find it.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from cronrace.model.policies import Catchup, Outcome, Overlap
from cronrace.protocol import (
    Answer,
    Claim,
    DecideReply,
    DecideRequest,
    JobState,
    Lease,
    Missed,
    Pending,
    Record,
    Release,
    ReleaseRequest,
    Renewal,
    RenewRequest,
    Verdict,
    claim,
    decide,
    next_fence,
    plan,
    post_trigger,
    release,
    renew,
    set_paused,
    trigger_key,
)

A, B = "a:1", "b:1"
LEASE_MS = 3000
MEMO_MS = 4000
T0 = 100_000  # ms: the tests' "now"


def request(
    tick_s: int,
    cursor_s: int | None,
    *,
    owner: str = A,
    fire: tuple[int, ...] | None = None,
    missed: tuple[Missed, ...] = (),
    overlap: Overlap = Overlap.SKIP,
    known_fence: int = 0,
    trigger_id: str | None = None,
    trigger_window_ms: int = 0,
) -> DecideRequest:
    return DecideRequest(
        job="job",
        tick_s=tick_s,
        cursor_s=cursor_s,
        from_s=cursor_s if cursor_s is not None else 0,
        fire_s=(tick_s,) if fire is None else fire,
        missed=missed,
        owner=owner,
        overlap=overlap,
        lease_ttl_ms=LEASE_MS,
        claim_ttl_ms=MEMO_MS,
        known_fence=known_fence,
        trigger_window_ms=trigger_window_ms,
        trigger_id=trigger_id,
    )


def won(state: JobState, key: int | str, owner: str = A, now_ms: int = T0) -> JobState:
    ok, state = claim(state, key, owner, ttl_ms=1000, now_ms=now_ms)
    assert ok
    return state


def decided(state: JobState, req: DecideRequest, now_ms: int = T0) -> tuple[DecideReply, JobState]:
    return decide(state, req, now_ms=now_ms, now_us=now_ms * 1000)


def running(owner: str = A, fence: int = 7, ticks: tuple[int, ...] = (10,), **kw: object) -> Lease:
    return Lease(owner, fence, ticks, expires_ms=T0 + 1000, **kw)  # type: ignore[arg-type]


def with_run(state: JobState, lease: Lease) -> JobState:
    run = replace(lease, expires_ms=0, held=False, reasserted=False)
    return replace(state, lease=lease, run=run, fence=max(state.fence or 0, lease.fence))


AT_10 = JobState(cursor_s=10, origin_s=0, fence=7)


# -- claims -------------------------------------------------------------------------------------


def test_a_claim_is_won_when_nobody_holds_it_and_lost_while_somebody_does() -> None:
    ok, state = claim(JobState(), 20, A, ttl_ms=1000, now_ms=T0)
    assert ok
    assert state.claim_at(20, T0) == Claim(A, T0 + 1000)
    assert claim(state, 20, B, ttl_ms=1000, now_ms=T0 + 999)[0] is False


def test_a_claim_that_ran_out_is_gone() -> None:
    state = won(JobState(), 20, A)
    ok, state = claim(state, 20, B, ttl_ms=1000, now_ms=T0 + 1000)
    assert ok
    assert state.claim_at(20, T0 + 1000) == Claim(B, T0 + 2000)


def test_reading_back_counts_ones_own_undecided_claim_won_never_a_decided_one() -> None:
    state = won(JobState(), 20, A)
    assert claim(state, 20, A, ttl_ms=1000, now_ms=T0, read_back=True)[0] is True
    assert claim(state, 20, A, ttl_ms=1000, now_ms=T0)[0] is False
    _reply, state = decided(state, request(20, None))
    assert claim(state, 20, A, ttl_ms=1000, now_ms=T0, read_back=True)[0] is False


# -- the answers, in their order -----------------------------------------------------------------


def test_a_decision_covers_every_tick_from_the_cursor_and_records_each_in_the_same_step() -> None:
    state = won(AT_10, 40)
    req = request(40, 10, fire=(40,), missed=(Missed(20, 30, 2),))
    reply, after = decided(state, req)
    assert reply.answer is Answer.DECIDED
    assert reply.verdict is Verdict.RUN
    assert after.cursor_s == 40
    assert after.origin_s == 0
    assert reply.records == (
        Record(20, Outcome.MISSED, "a", count=2, last_s=30),
        Record(40, Outcome.GRANTED, "a", reply.fence),
    )
    assert after.history == reply.records
    assert reply.fence > 7
    assert after.lease == Lease(A, reply.fence, (40,), expires_ms=T0 + LEASE_MS)
    memo = after.claim_at(40, T0)
    assert memo is not None
    assert memo.expires_ms == T0 + MEMO_MS
    assert memo.memo == replace(reply, records=())


def test_a_retry_of_a_decision_gets_the_same_answer_and_writes_nothing() -> None:
    state = won(AT_10, 20)
    first, state = decided(state, request(20, 10))
    again, after = decided(state, request(20, 10), now_ms=T0 + 500)
    assert again == replace(first, replayed=True, renewed=True, records=())
    assert after.history == state.history
    assert after.lease == replace(state.lease, expires_ms=T0 + 500 + LEASE_MS)  # type: ignore[arg-type]


def test_a_tick_at_or_below_the_cursor_is_covered_and_nothing_is_written() -> None:
    state = won(AT_10, 10)
    reply, after = decided(state, request(10, 0))
    assert reply == DecideReply(Answer.COVERED, cursor_s=10)
    assert after == state


def test_another_owners_claim_answers_lost() -> None:
    state = won(AT_10, 20, owner=B)
    reply, after = decided(state, request(20, 10))
    assert reply == DecideReply(Answer.LOST, cursor_s=10)
    assert after == state


def test_a_cursor_not_the_one_planned_from_answers_moved_with_the_cursor() -> None:
    state = won(AT_10, 30)
    reply, after = decided(state, request(30, 20))
    assert reply == DecideReply(Answer.MOVED, cursor_s=10)
    assert after == state
    reply, _after = decided(state, request(30, None))
    assert reply.answer is Answer.MOVED


def test_covered_comes_before_lost_and_a_replay_before_covered() -> None:
    state = won(AT_10, 20, owner=B)
    state = replace(state, cursor_s=20)
    assert decided(state, request(20, 10))[0].answer is Answer.COVERED
    state = won(AT_10, 20)
    _first, state = decided(state, request(20, 10))
    assert decided(state, request(20, 10))[0].replayed


def test_a_claim_that_ran_out_does_not_stop_a_decision_whose_cursor_holds() -> None:
    reply, after = decided(AT_10, request(20, 10))
    assert reply.answer is Answer.DECIDED
    assert after.claim_at(20, T0) == Claim(A, T0 + MEMO_MS, replace(reply, records=()))


def test_a_lost_cursor_is_recorded_data_lost_held_and_decided_from_the_callers_cursor() -> None:
    reply, after = decided(JobState(), request(20, 10, known_fence=7))
    assert reply.answer is Answer.DECIDED
    assert reply.data_lost
    assert reply.records[0] == Record(10, Outcome.DATA_LOST, "a", last_s=10)
    assert reply.records[1].outcome is Outcome.GRANTED
    assert (after.cursor_s, after.origin_s) == (20, 10)
    assert after.hold_until_ms == T0 + LEASE_MS
    assert reply.hold_ms == LEASE_MS
    assert after.lease is not None
    assert after.lease.held


def test_a_first_decision_sets_the_origin_to_where_its_caller_planned_from() -> None:
    _reply, after = decided(JobState(), request(20, None))
    assert (after.cursor_s, after.origin_s) == (20, 0)


# -- paused, abandoned, overlap ------------------------------------------------------------------


def test_a_decision_that_fires_nothing_still_records_every_tick_it_covers() -> None:
    reply, after = decided(AT_10, request(30, 10, fire=(), missed=(Missed(20, 30, 2),)))
    assert reply.verdict is Verdict.NOTHING
    assert reply.records == (Record(20, Outcome.MISSED, "a", count=2, last_s=30),)
    assert after.history == reply.records
    assert after.cursor_s == 30


def test_a_paused_job_records_every_tick_it_would_fire_skipped_paused() -> None:
    state = set_paused(AT_10, True)
    reply, after = decided(state, request(30, 10, fire=(20, 30)))
    assert reply.verdict is Verdict.SKIPPED_PAUSED
    assert [r.outcome for r in reply.records] == [Outcome.SKIPPED_PAUSED] * 2
    assert after.lease is None
    assert after.cursor_s == 30


def test_a_run_whose_lease_ran_out_is_recorded_abandoned_with_the_tick_queued_behind_it() -> None:
    lease = replace(running(fence=7, ticks=(10, 20)), expires_ms=T0)
    state = replace(with_run(AT_10, lease), pending=Pending(20))
    reply, after = decided(state, request(30, 10, overlap=Overlap.QUEUE_ONE))
    assert reply.records[:3] == (
        Record(10, Outcome.ABANDONED, "a", 7),
        Record(20, Outcome.ABANDONED, "a", 7),
        Record(20, Outcome.ABANDONED, "a"),
    )
    assert reply.verdict is Verdict.RUN
    assert after.pending is None


@pytest.mark.parametrize(
    ("overlap", "verdict", "outcomes"),
    [
        (Overlap.SKIP, Verdict.SKIPPED_OVERLAP, [Outcome.SKIPPED_OVERLAP]),
        (Overlap.QUEUE_ONE, Verdict.QUEUED, [Outcome.QUEUED]),
        (Overlap.REPLACE, Verdict.RUN, [Outcome.LEASE_LOST, Outcome.GRANTED]),
        (Overlap.ALLOW, Verdict.RUN, [Outcome.GRANTED]),
    ],
)
def test_a_tick_that_meets_a_live_run_follows_the_overlap_policy(
    overlap: Overlap, verdict: Verdict, outcomes: list[Outcome]
) -> None:
    state = with_run(AT_10, running(owner=B, fence=7))
    reply, after = decided(state, request(20, 10, overlap=overlap))
    assert reply.verdict is verdict
    assert [r.outcome for r in reply.records] == outcomes
    if overlap is Overlap.REPLACE:
        assert reply.records[0] == Record(10, Outcome.LEASE_LOST, "b", 7)
        assert after.lease is not None
        assert after.lease.fence == reply.fence > 7
    elif overlap is Overlap.ALLOW:
        assert after.lease == state.lease  # allow takes no lease
        assert reply.fences == (reply.fence,)
    else:
        assert after.lease == state.lease
    assert after.pending == (Pending(20) if overlap is Overlap.QUEUE_ONE else None)


def test_under_queue_one_the_newest_tick_waits_and_the_one_it_displaces_is_skipped() -> None:
    state = replace(with_run(AT_10, running(fence=7)), pending=Pending(20), cursor_s=20)
    reply, after = decided(state, request(40, 20, fire=(30, 40), overlap=Overlap.QUEUE_ONE))
    assert reply.records == (
        Record(20, Outcome.SKIPPED_OVERLAP, "a"),
        Record(30, Outcome.SKIPPED_OVERLAP, "a"),
        Record(40, Outcome.QUEUED, "a"),
    )
    assert after.pending == Pending(40)


def test_under_allow_each_fired_tick_gets_a_fence_of_its_own() -> None:
    reply, _after = decided(AT_10, request(30, 10, fire=(20, 30), overlap=Overlap.ALLOW))
    assert len(reply.fences) == 2
    assert reply.fences[0] < reply.fences[1]
    assert [(r.tick_s, r.fence) for r in reply.records] == list(
        zip((20, 30), reply.fences, strict=True)
    )


# -- catch-up: the planner -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "on_time", "fire", "missed"),
    [
        (Catchup.SKIP, True, (40,), (Missed(20, 30, 2),)),
        (Catchup.SKIP, False, (), (Missed(20, 40, 3),)),
        (Catchup.LATEST, False, (40,), (Missed(20, 30, 2),)),
        (Catchup.ALL, False, (30, 40), (Missed(20, 20, 1),)),
    ],
)
def test_the_planner_fires_a_suffix_of_the_due_ticks_and_counts_the_rest_missed(
    policy: Catchup, on_time: bool, fire: tuple[int, ...], missed: tuple[Missed, ...]
) -> None:
    got = plan(policy, due_s=[20, 30, 40], on_time=on_time, expired=None, max_catchup=2)
    assert got == (fire, missed)


def test_ticks_older_than_the_window_join_the_missed_range() -> None:
    got = plan(
        Catchup.LATEST, due_s=[30, 40], on_time=True, expired=Missed(10, 20, 2), max_catchup=2
    )
    assert got == ((40,), (Missed(10, 30, 3),))
    assert plan(Catchup.ALL, due_s=[], on_time=True, expired=Missed(10, 20, 2), max_catchup=2) == (
        (),
        (Missed(10, 20, 2),),
    )


def test_a_catch_up_is_one_grant_whose_release_hands_on_each_tick_with_a_new_fence() -> None:
    reply, state = decided(AT_10, request(30, 10, fire=(20, 30)))
    assert reply.ticks_s == (20, 30)
    ok = Record(20, Outcome.OK, "a", reply.fence)
    handed, state = release(
        state, ReleaseRequest(reply.fence, A, LEASE_MS, ok), now_ms=T0 + 10, now_us=(T0 + 10) * 1000
    )
    assert handed.decision is Release.HANDED_ON
    assert (handed.tick_s, handed.records) == (30, (ok,))
    assert handed.fence > reply.fence
    assert state.lease == Lease(A, handed.fence, (30,), expires_ms=T0 + 10 + LEASE_MS)


# -- manual triggers -----------------------------------------------------------------------------


def test_a_trigger_is_decided_by_removing_its_id_and_leaves_the_cursor_alone() -> None:
    state = post_trigger(AT_10, "t1", now_ms=T0 - 500)
    state = won(state, trigger_key("t1"))
    req = request(99, 10, trigger_id="t1")
    reply, after = decided(state, req)
    assert reply.answer is Answer.DECIDED
    assert reply.records == (Record(99, Outcome.GRANTED, "a", reply.fence, trigger_id="t1"),)
    assert after.triggers == ()
    assert after.cursor_s == 10
    assert after.lease is not None
    assert after.lease.trigger_id == "t1"


def test_a_trigger_no_longer_outstanding_is_stale() -> None:
    state = won(AT_10, trigger_key("t1"))
    reply, after = decided(state, request(99, 10, trigger_id="t1"))
    assert reply == DecideReply(Answer.STALE, cursor_s=10)
    assert after == state


def test_a_tick_decision_sweeps_triggers_outstanding_longer_than_their_window_as_missed() -> None:
    state = post_trigger(AT_10, "old", now_ms=T0 - 5000)
    state = post_trigger(state, "new", now_ms=T0 - 1000)
    reply, after = decided(state, request(20, 10, trigger_window_ms=4000))
    assert reply.records[0] == Record((T0 - 5000) // 1000, Outcome.MISSED, "a", trigger_id="old")
    assert after.triggers == (("new", T0 - 1000),)


# -- replays ------------------------------------------------------------------------------------


def _granted_then(state: JobState = AT_10) -> tuple[DecideReply, JobState]:
    return decided(won(state, 20), request(20, 10))


def test_a_replayed_grant_whose_lease_ran_out_does_not_start() -> None:
    _first, state = _granted_then()
    again, _after = decided(state, request(20, 10), now_ms=T0 + LEASE_MS)
    assert again.replayed
    assert again.verdict is Verdict.RUN
    assert not again.renewed


def test_a_replayed_grant_does_not_start_when_its_caller_knows_a_higher_fence() -> None:
    first, state = _granted_then()
    again, after = decided(state, request(20, 10, known_fence=first.fence + 1))
    assert not again.renewed
    assert after.lease == state.lease


def test_a_replayed_grant_does_not_start_when_the_counter_is_past_its_fence() -> None:
    first, state = _granted_then()
    state = replace(state, fence=first.fence + 5)
    assert not decided(state, request(20, 10))[0].renewed


def test_a_replayed_grant_under_allow_always_starts() -> None:
    state = won(AT_10, 20)
    _first, state = decided(state, request(20, 10, overlap=Overlap.ALLOW))
    again, _after = decided(state, request(20, 10, overlap=Overlap.ALLOW), now_ms=T0 + LEASE_MS)
    assert again.renewed


# -- fences ------------------------------------------------------------------------------------


def test_a_fence_is_floored_at_the_store_clock_and_above_every_fence_the_caller_knows() -> None:
    fence, lost, state = next_fence(JobState(), known_fence=0, now_ms=T0, now_us=T0 * 1000)
    assert (fence, lost) == (T0 * 1000 + 1, False)
    fence, lost, _state = next_fence(JobState(), known_fence=9 * 10**9, now_ms=T0, now_us=T0 * 1000)
    assert (fence, lost) == (9 * 10**9 + 1, True)
    fence, lost, _state = next_fence(replace(state, fence=5), known_fence=8, now_ms=T0, now_us=0)
    assert (fence, lost) == (9, True)


def test_a_missing_counter_the_caller_knew_holds_new_grants_for_a_lease_ttl() -> None:
    state = JobState(cursor_s=10, origin_s=0)
    reply, after = decided(won(state, 20), request(20, 10, known_fence=7))
    assert reply.data_lost
    assert reply.hold_ms == LEASE_MS
    assert after.lease is not None
    assert after.lease.held


# -- renewal and re-assertion -------------------------------------------------------------------


def renewed(state: JobState, req: RenewRequest, now_ms: int = T0) -> tuple[Renewal, JobState]:
    return renew(state, req, now_ms=now_ms, now_us=now_ms * 1000)


def test_renewal_extends_only_the_lease_holding_its_fence() -> None:
    state = with_run(AT_10, running(fence=7))
    answer, after = renewed(state, RenewRequest(7, LEASE_MS))
    assert answer is Renewal.RENEWED
    assert after.lease == replace(state.lease, expires_ms=T0 + LEASE_MS)  # type: ignore[arg-type]
    assert renewed(state, RenewRequest(6, LEASE_MS, A, 10))[0] is Renewal.TAKEN
    gone = replace(state, lease=None)
    assert renewed(gone, RenewRequest(7, LEASE_MS, A, 10))[0] is Renewal.GONE


def test_a_run_whose_store_lost_everything_writes_its_lease_back() -> None:
    answer, after = renewed(JobState(), RenewRequest(7, LEASE_MS, A, 10, trigger_id="t1"))
    assert answer is Renewal.REASSERTED
    assert after.lease == Lease(A, 7, (10,), "t1", T0 + LEASE_MS, reasserted=True)
    assert after.run == Lease(A, 7, (10,), "t1")
    assert after.fence == T0 * 1000


def test_during_the_hold_a_re_asserting_run_takes_the_lease_of_a_held_grant_and_records_it() -> (
    None
):
    held = Lease(B, 9, (20,), expires_ms=T0 + 1000, held=True)
    state = replace(with_run(AT_10, held), hold_until_ms=T0 + 2000, hold_fence=8)
    answer, after = renewed(state, RenewRequest(7, LEASE_MS, A, 10))
    assert answer is Renewal.REASSERTED
    assert after.lease is not None
    assert (after.lease.owner, after.lease.fence) == (A, 7)
    assert after.history == (Record(20, Outcome.LEASE_LOST, "b", 9),)


def test_a_grant_whose_lease_ran_out_during_the_hold_is_recorded_abandoned_when_displaced() -> None:
    held = Lease(B, 9, (20,), expires_ms=T0 - 1, held=True)
    state = replace(with_run(AT_10, held), hold_until_ms=T0 + 2000, hold_fence=8)
    answer, after = renewed(state, RenewRequest(7, LEASE_MS, A, 10))
    assert answer is Renewal.REASSERTED
    assert after.history == (Record(20, Outcome.ABANDONED, "b", 9),)


def test_during_the_hold_a_higher_fence_replaces_a_lower_re_asserted_lease_never_the_reverse() -> (
    None
):
    low = Lease(A, 7, (10,), expires_ms=T0 + 1000, reasserted=True)
    state = replace(with_run(AT_10, low), hold_until_ms=T0 + 2000, hold_fence=8)
    answer, after = renewed(state, RenewRequest(8, LEASE_MS, B, 10))
    assert answer is Renewal.REASSERTED
    assert after.lease is not None
    assert after.lease.fence == 8
    assert renewed(after, RenewRequest(7, LEASE_MS, A, 10))[0] is Renewal.TAKEN


def test_a_grant_made_during_the_hold_never_re_asserts() -> None:
    low = Lease(A, 7, (10,), expires_ms=T0 + 1000, reasserted=True)
    state = replace(with_run(AT_10, low), hold_until_ms=T0 + 2000, hold_fence=8)
    assert renewed(state, RenewRequest(9, LEASE_MS, B, 20))[0] is Renewal.TAKEN
    assert renewed(replace(state, lease=None), RenewRequest(9, LEASE_MS, B, 20))[0] is (
        Renewal.GONE
    )


def test_a_held_grant_starts_by_a_renewal_that_says_so() -> None:
    held = Lease(A, 9, (20,), expires_ms=T0 + 1000, held=True)
    state = with_run(AT_10, held)
    _answer, still = renewed(state, RenewRequest(9, LEASE_MS))
    assert still.lease is not None
    assert still.lease.held
    answer, started = renewed(state, RenewRequest(9, LEASE_MS, starting=True))
    assert answer is Renewal.RENEWED
    assert started.lease is not None
    assert not started.lease.held


# -- release ------------------------------------------------------------------------------------


def test_a_run_is_recorded_by_its_release_only_while_its_fence_holds_the_lease() -> None:
    state = with_run(AT_10, running(fence=7))
    ok = Record(10, Outcome.OK, "a", 7)
    reply, after = release(state, ReleaseRequest(7, A, LEASE_MS, ok), now_ms=T0, now_us=0)
    assert (reply.decision, reply.records) == (Release.RELEASED, (ok,))
    assert (after.lease, after.run, after.history) == (None, None, (ok,))
    again, same = release(after, ReleaseRequest(7, A, LEASE_MS, ok), now_ms=T0, now_us=0)
    assert again.decision is Release.NOT_OWNER
    assert same == after


def test_a_release_hands_the_queued_tick_on_with_a_new_fence() -> None:
    state = replace(with_run(AT_10, running(fence=7)), pending=Pending(99, "t1"))
    reply, after = release(state, ReleaseRequest(7, A, LEASE_MS), now_ms=T0, now_us=T0 * 1000)
    assert (reply.decision, reply.tick_s, reply.trigger_id) == (Release.HANDED_ON, 99, "t1")
    assert reply.fence > 7
    assert after.pending is None
    assert after.lease == Lease(A, reply.fence, (99,), "t1", T0 + LEASE_MS)


def test_a_caller_that_stops_records_what_its_grant_still_had_to_run_cancelled() -> None:
    state = replace(with_run(AT_10, running(fence=7, ticks=(10, 20))), pending=Pending(30))
    reply, after = release(
        state, ReleaseRequest(7, A, LEASE_MS, hand_on=False), now_ms=T0, now_us=0
    )
    assert reply.decision is Release.RELEASED
    assert reply.records == (
        Record(20, Outcome.CANCELLED, "a", 7),
        Record(30, Outcome.CANCELLED, "a"),
    )
    assert (after.lease, after.pending) == (None, None)
