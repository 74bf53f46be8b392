"""Fences: strictly increasing with every grant, never reused, not after a wipe or failover."""

from __future__ import annotations

from cronrace.model.policies import Overlap
from cronrace.stores.contract import Store
from cronrace.stores.values import AcquireMode, ReleaseDecision
from tests.stores.contract.helpers import N1, N2, acquire, request, state
from tests.stores.harness import Backend


async def test_every_grant_and_hand_on_takes_a_higher_fence(store: Store) -> None:
    fences = [(await acquire(store, request(100, overlap=Overlap.QUEUE_ONE))).fence]
    await acquire(store, request(101, overlap=Overlap.QUEUE_ONE, owner=N2))  # queued
    handed = await store.release("j", fences[-1], owner=N1, lease_ttl_ms=5000)
    assert handed.decision is ReleaseDecision.HANDED_ON
    fences.append(handed.fence)
    fences.append((await acquire(store, request(102, overlap=Overlap.REPLACE))).fence)
    fences.append((await acquire(store, request(103, overlap=Overlap.ALLOW))).fence)
    trigger = request(50, overlap=Overlap.ALLOW, mode=AcquireMode.TRIGGER)
    fences.append((await acquire(store, trigger)).fence)
    assert fences == sorted(set(fences))
    assert (await state(store)).last_fence == fences[-1]


async def test_fences_of_different_jobs_never_interfere(store: Store) -> None:
    j = await acquire(store, request(100, overlap=Overlap.ALLOW))
    k = await acquire(store, request(100, job="k", overlap=Overlap.ALLOW))
    j2 = await acquire(store, request(101, overlap=Overlap.ALLOW))
    assert j2.fence > j.fence
    states = await store.job_states(["j", "k"])
    assert [s.last_fence for s in states] == [j2.fence, k.fence]


async def test_fence_survives_a_wiped_counter(store: Store, backend: Backend) -> None:
    first = await acquire(store, request(tick=100))
    await store.release("j", first.fence, owner=N1, lease_ttl_ms=5000)
    await backend.faults.wipe("j", "fence", "watermark")
    second = await acquire(store, request(tick=100))
    assert second.fence > first.fence


async def test_a_counter_behind_its_last_grants_never_hands_out_a_fence_again(
    store: Store, backend: Backend
) -> None:
    # A promoted replica may lack the last grants: its counter is behind them. A node that
    # never saw those fences (known 0) must still get a higher one.
    first = await acquire(store, request(tick=100))
    await store.release("j", first.fence, owner=N1, lease_ttl_ms=5000)
    await backend.faults.set_fence_counter("j", first.fence - 1_000)
    fresh = await backend.node()
    assert fresh.known_fence("j") == 0
    second = await acquire(fresh, request(tick=101))
    assert second.fence > first.fence


async def test_every_fence_is_at_least_the_server_time_in_microseconds(
    store: Store, backend: Backend
) -> None:
    await backend.faults.set_fence_counter("j", 5)
    beat = await store.heartbeat("n1", now_ms=0, ttl_ms=1, epoch_candidate="e")
    reply = await acquire(store, request(tick=100))
    assert reply.fence >= round(beat.server_time_s * 1_000_000)
    released = await store.release(
        "j", reply.fence, owner=N1, lease_ttl_ms=5000, continue_tick_s=101
    )
    assert released.fence > reply.fence


async def test_a_node_keeps_the_highest_fence_it_has_seen(store: Store, backend: Backend) -> None:
    """Its evidence that a job has had fences (sent with every decision)."""
    assert store.known_fence("j") == 0
    granted = await acquire(store, request(100))
    assert store.known_fence("j") == granted.fence
    other = await backend.node()
    assert other.known_fence("j") == 0
    await other.watermarks(["j"])  # reads the counter too
    assert other.known_fence("j") == granted.fence
    handed = await store.release(
        "j", granted.fence, owner=N1, lease_ttl_ms=5000, continue_tick_s=101
    )
    assert store.known_fence("j") == handed.fence
