"""Every decision of acquire and its answer: run, stale, the overlap policies, pause, marks.

A won claim is decided against the watermark (a tick an earlier decision covered is
stale), the pause flag and the lease (the job's overlap policy). Catch-up plans are
decided the same way: one claim on the newest due tick decides the whole backlog.
"""

from __future__ import annotations

import pytest

from cronrace.model.policies import Overlap
from cronrace.stores.contract import Store
from cronrace.stores.values import AcquireDecision, AcquireMode, Owner, ReleaseDecision, Renewal
from tests.stores.contract.helpers import N1, N2, acquire, lease, request, state, watermark
from tests.stores.harness import Backend


async def test_acquire_grants_fence_and_advances_watermark(store: Store) -> None:
    reply = await acquire(store, request(tick=100))
    assert reply.decision is AcquireDecision.RUN
    assert reply.fence > 1_000_000_000_000  # seeded from the server clock
    assert reply.prev_watermark_s is None
    assert await watermark(store) == 100
    held = await lease(store)
    assert held is not None
    assert held.owner == N1
    assert held.fence == reply.fence
    assert held.tick_s == 100
    assert 0 < held.ttl_ms <= 5000


async def test_acquire_refuses_tick_at_or_below_watermark(store: Store) -> None:
    await acquire(store, request(tick=100))
    stale = await acquire(store, request(tick=100))
    assert stale.decision is AcquireDecision.STALE
    assert stale.prev_watermark_s == 100
    older = await acquire(store, request(tick=99))
    assert older.decision is AcquireDecision.STALE


async def test_skip_overlap_records_holder_and_runs_nothing(store: Store) -> None:
    first = await acquire(store, request(tick=100))
    second = await acquire(store, request(tick=101, owner=N2))
    assert second.decision is AcquireDecision.SKIPPED_OVERLAP
    assert second.holder_fence == first.fence
    assert second.holder_owner == Owner("n1", "x")
    assert (await state(store)).counters["skipped_overlap"] == 1


async def test_queue_one_keeps_only_the_newest_waiting_tick(store: Store) -> None:
    first = await acquire(store, request(tick=100, overlap=Overlap.QUEUE_ONE))
    queued = await acquire(store, request(tick=101, overlap=Overlap.QUEUE_ONE))
    assert queued.decision is AcquireDecision.QUEUED
    newer = await acquire(store, request(tick=102, overlap=Overlap.QUEUE_ONE))
    assert newer.decision is AcquireDecision.QUEUED
    assert newer.superseded_tick_s == 101
    reply = await store.release("j", first.fence, owner=N1, lease_ttl_ms=5000)
    assert reply.decision is ReleaseDecision.HANDED_ON
    assert reply.tick_s == 102
    assert reply.fence > first.fence
    # Nothing waits any more: the handed-on run's release frees the lease.
    done = await store.release("j", reply.fence, owner=N1, lease_ttl_ms=5000)
    assert done.decision is ReleaseDecision.RELEASED
    assert (await state(store)).counters["queued"] == 2


async def test_replace_takes_the_lease_and_the_old_fence_can_no_longer_renew(store: Store) -> None:
    first = await acquire(store, request(tick=100, overlap=Overlap.REPLACE))
    second = await acquire(store, request(tick=101, overlap=Overlap.REPLACE, owner=N2))
    assert second.decision is AcquireDecision.RUN
    assert second.fence > first.fence
    assert second.holder_fence == first.fence
    assert await store.renew("j", first.fence, 5000) == Renewal.TAKEN
    assert await store.renew("j", second.fence, 5000) == Renewal.RENEWED
    refused = await store.release("j", first.fence, owner=N1, lease_ttl_ms=5000)
    assert refused.decision is ReleaseDecision.NOT_OWNER


async def test_allow_gives_each_run_a_distinct_increasing_fence_without_a_lease(
    store: Store,
) -> None:
    fences = [
        (await acquire(store, request(tick=t, overlap=Overlap.ALLOW))).fence
        for t in (100, 101, 102)
    ]
    assert fences == sorted(set(fences))
    assert await lease(store) is None


async def test_a_queued_catch_up_never_waits_with_a_tick_already_decided(store: Store) -> None:
    # Node A runs the backlog 101..103 under one lease; node B, whose own backlog is
    # 101..104, finds the lease held: 104 must wait, not 101 (which A runs already).
    first = await acquire(store, request(103, run=101, overlap=Overlap.QUEUE_ONE))
    queued = await acquire(store, request(104, run=101, overlap=Overlap.QUEUE_ONE, owner=N2))
    assert queued.decision is AcquireDecision.QUEUED
    reply = await store.release("j", first.fence, owner=N1, lease_ttl_ms=5000)
    assert (reply.decision, reply.tick_s) == (ReleaseDecision.HANDED_ON, 104)


async def test_a_catch_up_queued_behind_a_run_waits_with_its_newest_tick(store: Store) -> None:
    """Queue one keeps the newest (README: a newer tick replaces the waiting one). A backlog
    101..104 meeting a live run queues 104, the tick its claim decided and its record names;
    the caller records 101..103 skipped (tick/decisions.py). Before, 101 waited (its first
    tick, never recorded queued) and 104, recorded queued, never ran."""
    first = await acquire(store, request(100, overlap=Overlap.QUEUE_ONE))
    queued = await acquire(store, request(104, run=101, overlap=Overlap.QUEUE_ONE, owner=N2))
    assert queued.decision is AcquireDecision.QUEUED
    reply = await store.release("j", first.fence, owner=N1, lease_ttl_ms=5000)
    assert (reply.decision, reply.tick_s) == (ReleaseDecision.HANDED_ON, 104)


async def test_expired_lease_is_reported_abandoned_by_the_next_acquirer(
    store: Store, backend: Backend
) -> None:
    first = await acquire(store, request(tick=100))
    await backend.faults.expire_lease("j")  # as if its TTL ran out
    second = await acquire(store, request(tick=101, owner=N2))
    assert second.decision is AcquireDecision.RUN
    assert (second.abandoned_tick_s, second.abandoned_fence) == (100, first.fence)
    assert second.abandoned_owner == Owner("n1", "x")
    assert (await state(store)).counters["abandoned"] == 1


async def test_a_tick_queued_behind_a_run_that_died_is_superseded(
    store: Store, backend: Backend
) -> None:
    first = await acquire(store, request(tick=100, overlap=Overlap.QUEUE_ONE))
    await acquire(store, request(tick=101, overlap=Overlap.QUEUE_ONE, owner=N2))
    await backend.faults.expire_lease("j")
    newer = await acquire(store, request(tick=102, overlap=Overlap.QUEUE_ONE, owner=N2))
    assert newer.decision is AcquireDecision.RUN
    assert newer.superseded_tick_s == 101
    assert newer.abandoned_fence == first.fence
    done = await store.release("j", newer.fence, owner=N2, lease_ttl_ms=5000)
    assert done.decision is ReleaseDecision.RELEASED  # 101 no longer waits


async def test_paused_job_records_skip_but_still_advances_watermark(store: Store) -> None:
    await store.set_paused("j", True)
    reply = await acquire(store, request(tick=100))
    assert reply.decision is AcquireDecision.SKIPPED_PAUSED
    assert reply.fence == 0
    assert await watermark(store) == 100
    assert (await state(store)).counters["skipped_paused"] == 1
    await store.set_paused("j", False)
    assert (await acquire(store, request(tick=101))).decision is AcquireDecision.RUN


async def test_trigger_leaves_the_watermark_alone(store: Store) -> None:
    await acquire(store, request(tick=100, mode=AcquireMode.MARK))
    reply = await acquire(store, request(tick=50, mode=AcquireMode.TRIGGER))
    assert reply.decision is AcquireDecision.RUN
    assert await watermark(store) == 100


async def test_mark_mode_decides_without_running(store: Store) -> None:
    reply = await acquire(store, request(tick=100, mode=AcquireMode.MARK, mark=130))
    assert reply.decision is AcquireDecision.MARKED
    assert reply.fence == 0
    assert await watermark(store) == 130
    assert await lease(store) is None
    assert (await acquire(store, request(tick=130))).decision is AcquireDecision.STALE


# -- catch-up plans: one claim on the newest due tick decides the backlog ------------------


async def test_catch_up_skip_marks_the_backlog_and_runs_none(store: Store) -> None:
    """catchup = skip: the backlog 101..105 is decided at once, nothing fires."""
    reply = await acquire(store, request(105, mode=AcquireMode.MARK))
    assert (reply.decision, reply.fence) == (AcquireDecision.MARKED, 0)
    assert await watermark(store) == 105
    for tick in (101, 104, 105):
        assert (await acquire(store, request(tick, owner=N2))).decision is AcquireDecision.STALE


async def test_catch_up_latest_runs_the_newest_tick_only(store: Store) -> None:
    """catchup = latest: of the backlog 101..105 only 105 runs; the rest are decided."""
    reply = await acquire(store, request(105))
    assert reply.decision is AcquireDecision.RUN
    held = await lease(store)
    assert held is not None
    assert (held.tick_s, held.fence) == (105, reply.fence)
    assert (await acquire(store, request(103, owner=N2))).decision is AcquireDecision.STALE


@pytest.mark.parametrize("overlap", [Overlap.SKIP, Overlap.QUEUE_ONE, Overlap.REPLACE])
async def test_catch_up_all_runs_each_tick_in_order_under_one_lease(
    store: Store, overlap: Overlap
) -> None:
    """catchup = all: 101..103 run in order, the lease handed on with a new fence each."""
    first = await acquire(store, request(103, run=101, overlap=overlap))
    assert first.decision is AcquireDecision.RUN
    assert await watermark(store) == 103
    fences, ticks = [first.fence], [101]
    for tick in (102, 103):
        handed = await store.release(
            "j", fences[-1], owner=N1, lease_ttl_ms=5000, continue_tick_s=tick
        )
        assert handed.decision is ReleaseDecision.HANDED_ON
        held = await lease(store)
        assert held is not None
        assert (held.tick_s, held.fence) == (handed.tick_s, handed.fence)
        fences.append(handed.fence)
        ticks.append(handed.tick_s)
    assert ticks == [101, 102, 103]
    assert fences == sorted(set(fences))
    done = await store.release("j", fences[-1], owner=N1, lease_ttl_ms=5000)
    assert done.decision is ReleaseDecision.RELEASED
    assert await lease(store) is None


async def test_catch_up_all_under_allow_takes_a_fence_per_further_tick(store: Store) -> None:
    """Without a lease to hand on, each further tick is decided like a trigger without id."""
    first = await acquire(store, request(103, run=101, overlap=Overlap.ALLOW))
    further = [
        await acquire(store, request(tick, overlap=Overlap.ALLOW, mode=AcquireMode.TRIGGER))
        for tick in (102, 103)
    ]
    assert [reply.decision for reply in further] == [AcquireDecision.RUN] * 2
    fences = [first.fence, *(reply.fence for reply in further)]
    assert fences == sorted(set(fences))
    assert await watermark(store) == 103


async def test_a_backlog_out_of_the_window_is_marked_past_its_claim(store: Store) -> None:
    """Only expired ticks: the oldest carries the claim, the watermark goes to the cutoff."""
    reply = await acquire(store, request(90, mode=AcquireMode.MARK, mark=99))
    assert reply.decision is AcquireDecision.MARKED
    assert await watermark(store) == 99
    assert (await acquire(store, request(95, owner=N2))).decision is AcquireDecision.STALE
    assert (await acquire(store, request(100, owner=N2))).decision is AcquireDecision.RUN


async def test_many_jobs_are_decided_in_one_call(store: Store, backend: Backend) -> None:
    jobs = [f"job{index}" for index in range(30)]
    await acquire(store, request(100, job=jobs[0]))  # held: the next tick is skipped
    async with backend.round_trips() as trips:
        replies = await store.acquire([request(101, job=job) for job in jobs])
    assert 1 <= trips.count <= backend.shards
    decisions = [getattr(reply, "decision", reply) for reply in replies]
    assert decisions == [AcquireDecision.SKIPPED_OVERLAP] + [AcquireDecision.RUN] * 29
    assert await store.watermarks(jobs) == dict.fromkeys(jobs, 101)
