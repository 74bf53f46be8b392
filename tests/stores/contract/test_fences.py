"""Fences: strictly increasing with every grant, never reused, not after a wipe or failover."""

from __future__ import annotations

from cronrace.model.policies import Overlap
from cronrace.protocol import Release
from cronrace.stores.contract import Store
from tests.stores.contract.helpers import N2, decide, end, request, state
from tests.stores.harness import Backend


async def test_every_grant_and_hand_on_takes_a_higher_fence(store: Store) -> None:
    fences = [(await decide(store, request(100, overlap=Overlap.QUEUE_ONE))).fence]
    await decide(store, request(101, cursor=100, overlap=Overlap.QUEUE_ONE, owner=N2))  # queued
    handed = await store.end_run(end(fences[-1]))
    assert handed.decision is Release.HANDED_ON
    fences.append(handed.fence)
    fences.append((await decide(store, request(102, cursor=101, overlap=Overlap.REPLACE))).fence)
    fences.append((await decide(store, request(103, cursor=102, overlap=Overlap.ALLOW))).fence)
    trigger_id = await store.request_trigger("j")
    trigger = request(50, overlap=Overlap.ALLOW, trigger_id=trigger_id)
    fences.append((await decide(store, trigger)).fence)
    assert fences == sorted(set(fences))
    assert (await state(store)).last_fence == fences[-1]


async def test_fences_of_different_jobs_never_interfere(store: Store) -> None:
    j = await decide(store, request(100, overlap=Overlap.ALLOW))
    k = await decide(store, request(100, job="k", overlap=Overlap.ALLOW))
    j2 = await decide(store, request(101, cursor=100, overlap=Overlap.ALLOW))
    assert j2.fence > j.fence
    states = await store.job_states(["j", "k"])
    assert [s.last_fence for s in states] == [j2.fence, k.fence]


async def test_fence_survives_a_wiped_counter(store: Store, backend: Backend) -> None:
    first = await decide(store, request(tick=100))
    await store.end_run(end(first.fence))
    await backend.faults.wipe("j", "fence", "cursor")
    second = await decide(store, request(tick=101, cursor=100))
    assert second.data_lost
    assert second.fence > first.fence


async def test_a_counter_behind_its_last_grants_never_hands_out_a_fence_again(
    store: Store, backend: Backend
) -> None:
    # A promoted replica may lack the last grants: its counter is behind them. A node that
    # never saw those fences (known 0) must still get a higher one.
    first = await decide(store, request(tick=100))
    await store.end_run(end(first.fence))
    await backend.faults.set_fence_counter("j", first.fence - 1_000)
    fresh = await backend.node()
    assert fresh.known_fence("j") == 0
    second = await decide(fresh, request(tick=101, cursor=100))
    assert second.fence > first.fence


async def test_every_fence_is_at_least_the_server_time_in_microseconds(
    store: Store, backend: Backend
) -> None:
    await backend.faults.set_fence_counter("j", 5)
    beat = await store.heartbeat("n1", now_ms=0, ttl_ms=1, epoch_candidate="e")
    reply = await decide(store, request(tick=101, fire=(100, 101)))
    assert reply.fence >= round(beat.server_time_s * 1_000_000)
    handed = await store.end_run(end(reply.fence))
    assert (handed.decision, handed.tick_s) == (Release.HANDED_ON, 101)
    assert handed.fence > reply.fence


async def test_a_node_keeps_the_highest_fence_it_has_seen(store: Store, backend: Backend) -> None:
    """Its evidence that a job has had fences (sent with every decision)."""
    assert store.known_fence("j") == 0
    granted = await decide(store, request(101, fire=(100, 101)))
    assert store.known_fence("j") == granted.fence
    other = await backend.node()
    assert other.known_fence("j") == 0
    await other.cursors(["j"])  # reads the counter too
    assert other.known_fence("j") == granted.fence
    handed = await store.end_run(end(granted.fence))
    assert store.known_fence("j") == handed.fence
