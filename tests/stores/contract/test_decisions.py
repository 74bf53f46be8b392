"""Every decision and its answer: a grant, covered, the overlap policies, pause, catch-up.

A decision of tick T from the cursor C decides every tick of (C, T] at once: the ticks its
caller fires are granted (or skipped, queued, under the pause flag and the overlap policy
against the live lease), the rest are one ``missed`` range, and the cursor moves to T. A
tick at or below the cursor is ``covered``: an earlier decision recorded it.
"""

from __future__ import annotations

import pytest

from cronrace.model.policies import Outcome, Overlap
from cronrace.protocol import Answer, Release, Renewal, RenewRequest, Verdict
from cronrace.stores.contract import Store
from tests.stores.contract.helpers import (
    N1,
    N2,
    cursor,
    decide,
    end,
    lease,
    outcomes,
    request,
    state,
)
from tests.stores.harness import Backend


async def test_a_decision_grants_a_fence_and_moves_the_cursor(store: Store) -> None:
    reply = await decide(store, request(tick=100))
    assert (reply.answer, reply.verdict) == (Answer.DECIDED, Verdict.RUN)
    assert reply.fence > 1_000_000_000_000  # seeded from the server clock
    assert (reply.cursor_s, reply.ticks_s, reply.replayed) == (100, (100,), False)
    assert [(r.tick_s, r.outcome, r.node, r.fence) for r in reply.records] == [
        (100, Outcome.GRANTED, "n1", reply.fence)
    ]
    assert await cursor(store) == 100
    held = await lease(store)
    assert held is not None
    assert held.owner == N1
    assert held.fence == reply.fence
    assert held.tick_s == 100
    assert 0 < held.ttl_ms <= 5000
    assert [r.outcome for r in await store.history("j", 10)] == [Outcome.GRANTED]


async def test_a_tick_at_or_below_the_cursor_is_covered_and_writes_nothing(store: Store) -> None:
    await decide(store, request(tick=100))
    same = await decide(store, request(tick=100, owner=N2))
    assert (same.answer, same.cursor_s, same.records) == (Answer.COVERED, 100, ())
    older = await decide(store, request(tick=99))
    assert (older.answer, older.cursor_s) == (Answer.COVERED, 100)
    assert len(await store.history("j", 10)) == 1


async def test_a_decision_from_another_cursor_is_moved_and_writes_nothing(store: Store) -> None:
    await decide(store, request(tick=100))
    moved = await decide(store, request(tick=102, cursor=101, owner=N2))
    assert (moved.answer, moved.cursor_s, moved.records) == (Answer.MOVED, 100, ())
    unknown = await decide(store, request(tick=102, owner=N2))  # it expected no cursor
    assert (unknown.answer, unknown.cursor_s) == (Answer.MOVED, 100)
    assert await cursor(store) == 100
    # Planned again from the cursor found, it decides.
    again = await decide(store, request(tick=102, cursor=100, owner=N2))
    assert again.answer is Answer.DECIDED


async def test_skip_overlap_records_the_skipped_tick_and_runs_nothing(store: Store) -> None:
    first = await decide(store, request(tick=100))
    second = await decide(store, request(tick=101, cursor=100, owner=N2))
    assert (second.verdict, second.fence, second.ticks_s) == (Verdict.SKIPPED_OVERLAP, 0, ())
    assert outcomes(second.records) == [(101, Outcome.SKIPPED_OVERLAP)]
    assert await cursor(store) == 101
    held = await lease(store)
    assert held is not None
    assert held.fence == first.fence
    assert (await state(store)).counters["skipped_overlap"] == 1


async def test_queue_one_keeps_only_the_newest_waiting_tick(store: Store) -> None:
    first = await decide(store, request(tick=100, overlap=Overlap.QUEUE_ONE))
    queued = await decide(store, request(tick=101, cursor=100, overlap=Overlap.QUEUE_ONE))
    assert queued.verdict is Verdict.QUEUED
    assert outcomes(queued.records) == [(101, Outcome.QUEUED)]
    newer = await decide(store, request(tick=102, cursor=101, overlap=Overlap.QUEUE_ONE))
    assert newer.verdict is Verdict.QUEUED
    # The tick it displaces is skipped, in the same step.
    assert outcomes(newer.records) == [(101, Outcome.SKIPPED_OVERLAP), (102, Outcome.QUEUED)]
    reply = await store.end_run(end(first.fence))
    assert reply.decision is Release.HANDED_ON
    assert reply.tick_s == 102
    assert reply.fence > first.fence
    # Nothing waits any more: the handed-on run's release frees the lease.
    done = await store.end_run(end(reply.fence))
    assert done.decision is Release.RELEASED
    assert await lease(store) is None
    assert (await state(store)).counters["queued"] == 2


async def test_replace_takes_the_lease_and_the_old_fence_can_no_longer_renew(store: Store) -> None:
    first = await decide(store, request(tick=100, overlap=Overlap.REPLACE))
    second = await decide(store, request(tick=101, cursor=100, overlap=Overlap.REPLACE, owner=N2))
    assert second.verdict is Verdict.RUN
    assert second.fence > first.fence
    # The replaced run's ticks are recorded lease_lost, in the same step as the grant.
    assert [(r.tick_s, r.outcome, r.node, r.fence) for r in second.records] == [
        (100, Outcome.LEASE_LOST, "n1", first.fence),
        (101, Outcome.GRANTED, "n2", second.fence),
    ]
    assert await store.renew_lease("j", RenewRequest(first.fence, 5000)) is Renewal.TAKEN
    assert await store.renew_lease("j", RenewRequest(second.fence, 5000)) is Renewal.RENEWED
    refused = await store.end_run(end(first.fence))
    assert refused.decision is Release.NOT_OWNER


async def test_allow_gives_each_run_a_distinct_increasing_fence_without_a_lease(
    store: Store,
) -> None:
    fences = []
    for tick in (100, 101, 102):
        reply = await decide(
            store, request(tick=tick, cursor=tick - 1 if fences else None, overlap=Overlap.ALLOW)
        )
        assert reply.fences == (reply.fence,)
        fences.append(reply.fence)
    assert fences == sorted(set(fences))
    assert await lease(store) is None


async def test_a_catch_ups_own_ticks_run_before_the_tick_queued_behind_it(store: Store) -> None:
    # Node A runs the backlog 101..103 under one grant; node B decides 104 while the lease
    # is held: 104 waits, and runs after 102 and 103 (A's grant's ticks), not before.
    first = await decide(store, request(103, fire=(101, 102, 103), overlap=Overlap.QUEUE_ONE))
    assert first.ticks_s == (101, 102, 103)
    queued = await decide(store, request(104, cursor=103, overlap=Overlap.QUEUE_ONE, owner=N2))
    assert queued.verdict is Verdict.QUEUED
    ticks, fence = [], first.fence
    for _ in range(3):
        handed = await store.end_run(end(fence))
        assert handed.decision is Release.HANDED_ON
        ticks.append(handed.tick_s)
        fence = handed.fence
    assert ticks == [102, 103, 104]
    assert (await store.end_run(end(fence))).decision is Release.RELEASED


async def test_a_catch_up_queued_behind_a_run_waits_with_its_newest_tick(store: Store) -> None:
    """Queue one keeps the newest (README: a newer tick replaces the waiting one). A backlog
    101..104 meeting a live run queues 104, and records 101..103 skipped, in one step."""
    first = await decide(store, request(100, overlap=Overlap.QUEUE_ONE))
    queued = await decide(
        store,
        request(104, cursor=100, fire=(101, 102, 103, 104), overlap=Overlap.QUEUE_ONE, owner=N2),
    )
    assert queued.verdict is Verdict.QUEUED
    assert outcomes(queued.records) == [
        (101, Outcome.SKIPPED_OVERLAP),
        (102, Outcome.SKIPPED_OVERLAP),
        (103, Outcome.SKIPPED_OVERLAP),
        (104, Outcome.QUEUED),
    ]
    reply = await store.end_run(end(first.fence))
    assert (reply.decision, reply.tick_s) == (Release.HANDED_ON, 104)


async def test_expired_lease_is_recorded_abandoned_by_the_next_decision(
    store: Store, backend: Backend
) -> None:
    first = await decide(store, request(tick=100))
    await backend.faults.expire_lease("j")  # as if its TTL ran out
    second = await decide(store, request(tick=101, cursor=100, owner=N2))
    assert second.verdict is Verdict.RUN
    assert [(r.tick_s, r.outcome, r.node, r.fence) for r in second.records] == [
        (100, Outcome.ABANDONED, "n1", first.fence),
        (101, Outcome.GRANTED, "n2", second.fence),
    ]
    assert (await state(store)).counters["abandoned"] == 1


async def test_a_tick_queued_behind_a_run_that_died_is_recorded_abandoned(
    store: Store, backend: Backend
) -> None:
    first = await decide(store, request(tick=100, overlap=Overlap.QUEUE_ONE))
    await decide(store, request(tick=101, cursor=100, overlap=Overlap.QUEUE_ONE, owner=N2))
    await backend.faults.expire_lease("j")
    newer = await decide(store, request(tick=102, cursor=101, overlap=Overlap.QUEUE_ONE, owner=N2))
    assert newer.verdict is Verdict.RUN
    assert [(r.tick_s, r.outcome, r.fence) for r in newer.records] == [
        (100, Outcome.ABANDONED, first.fence),
        (101, Outcome.ABANDONED, 0),
        (102, Outcome.GRANTED, newer.fence),
    ]
    done = await store.end_run(end(newer.fence, owner=N2))
    assert done.decision is Release.RELEASED  # 101 no longer waits


async def test_paused_job_records_skip_but_still_moves_the_cursor(store: Store) -> None:
    await store.set_paused("j", True)
    reply = await decide(store, request(tick=100))
    assert (reply.verdict, reply.fence) == (Verdict.SKIPPED_PAUSED, 0)
    assert outcomes(reply.records) == [(100, Outcome.SKIPPED_PAUSED)]
    assert await cursor(store) == 100
    assert (await state(store)).counters["skipped_paused"] == 1
    await store.set_paused("j", False)
    assert (await decide(store, request(tick=101, cursor=100))).verdict is Verdict.RUN


# -- catch-up plans: one claim on the newest due tick decides the backlog ------------------


async def test_catch_up_skip_records_the_backlog_missed_and_runs_none(store: Store) -> None:
    """catchup = skip: the backlog 101..105 is decided at once (one missed range)."""
    await decide(store, request(100, fire=()))
    reply = await decide(store, request(105, cursor=100, fire=()))
    assert (reply.verdict, reply.fence, reply.cursor_s) == (Verdict.NOTHING, 0, 105)
    assert [(r.tick_s, r.outcome, r.last_s, r.count) for r in reply.records] == [
        (101, Outcome.MISSED, 105, 5)
    ]
    assert await lease(store) is None
    for tick in (101, 104, 105):
        assert (await decide(store, request(tick, owner=N2))).answer is Answer.COVERED
    assert (await state(store)).counters["missed"] == 6


async def test_catch_up_latest_runs_the_newest_tick_only(store: Store) -> None:
    """catchup = latest: of the backlog 101..105 only 105 runs; the rest are missed."""
    await decide(store, request(100, fire=()))
    reply = await decide(store, request(105, cursor=100))
    assert reply.verdict is Verdict.RUN
    assert [(r.tick_s, r.outcome, r.count) for r in reply.records] == [
        (101, Outcome.MISSED, 4),
        (105, Outcome.GRANTED, 1),
    ]
    held = await lease(store)
    assert held is not None
    assert (held.tick_s, held.fence) == (105, reply.fence)
    assert (await decide(store, request(103, owner=N2))).answer is Answer.COVERED


@pytest.mark.parametrize("overlap", [Overlap.SKIP, Overlap.QUEUE_ONE, Overlap.REPLACE])
async def test_catch_up_all_runs_each_tick_in_order_under_one_grant(
    store: Store, overlap: Overlap
) -> None:
    """catchup = all: 101..103 run in order, the lease handed on with a new fence each."""
    first = await decide(store, request(103, fire=(101, 102, 103), overlap=overlap))
    assert (first.verdict, first.ticks_s) == (Verdict.RUN, (101, 102, 103))
    assert outcomes(first.records) == [(t, Outcome.GRANTED) for t in (101, 102, 103)]
    assert await cursor(store) == 103
    fences, ticks = [first.fence], [101]
    for _ in (102, 103):
        handed = await store.end_run(end(fences[-1]))
        assert handed.decision is Release.HANDED_ON
        held = await lease(store)
        assert held is not None
        assert (held.tick_s, held.fence) == (handed.tick_s, handed.fence)
        fences.append(handed.fence)
        ticks.append(handed.tick_s)
    assert ticks == [101, 102, 103]
    assert fences == sorted(set(fences))
    done = await store.end_run(end(fences[-1]))
    assert done.decision is Release.RELEASED
    assert await lease(store) is None


async def test_catch_up_all_under_allow_takes_a_fence_per_tick(store: Store) -> None:
    """Without a lease to hand on, each tick of the backlog has a fence of its own."""
    reply = await decide(store, request(103, fire=(101, 102, 103), overlap=Overlap.ALLOW))
    assert reply.verdict is Verdict.RUN
    assert reply.fences == tuple(sorted(set(reply.fences)))
    assert len(reply.fences) == 3
    assert reply.fence == reply.fences[0]
    assert [(r.tick_s, r.fence) for r in reply.records] == list(
        zip((101, 102, 103), reply.fences, strict=True)
    )
    assert await cursor(store) == 103
    assert await lease(store) is None


async def test_a_run_stopped_before_its_catch_up_is_done_cancels_the_rest(store: Store) -> None:
    """A caller that stops (hand_on False) has the grant's other ticks recorded cancelled."""
    first = await decide(store, request(103, fire=(101, 102, 103)))
    done = await store.end_run(end(first.fence, hand_on=False))
    assert done.decision is Release.RELEASED
    assert [(r.tick_s, r.outcome, r.fence) for r in done.records] == [
        (102, Outcome.CANCELLED, first.fence),
        (103, Outcome.CANCELLED, first.fence),
    ]
    assert await lease(store) is None


async def test_many_jobs_are_decided_in_one_call(store: Store, backend: Backend) -> None:
    jobs = [f"job{index}" for index in range(30)]
    await decide(store, request(100, job=jobs[0]))  # held: the next tick is skipped
    batch = [request(101, job=jobs[0], cursor=100)] + [request(101, job=job) for job in jobs[1:]]
    async with backend.round_trips() as trips:
        replies = await store.decide(batch)
    assert 1 <= trips.count <= backend.shards
    verdicts = [getattr(reply, "verdict", reply) for reply in replies]
    assert verdicts == [Verdict.SKIPPED_OVERLAP] + [Verdict.RUN] * 29
    assert await store.cursors(jobs) == dict.fromkeys(jobs, 101)
