"""Manual triggers: asked once, read by every node, claimed by one, run through the lease."""

from __future__ import annotations

from cronrace.model.policies import Overlap
from cronrace.stores.contract import Store
from cronrace.stores.values import AcquireDecision, AcquireMode, Claim, ReleaseDecision
from tests.stores.contract.helpers import N1, N2, acquire, request, watermark, won


async def test_a_trigger_asked_after_the_position_is_read_by_every_node(
    store: Store,
) -> None:
    position = await store.control_position()
    trigger_id = await store.request_trigger("j")
    entries = await store.read_control(position, block_ms=1)
    assert [fields for _id, fields in entries] == [{"op": "trigger", "job": "j", "id": trigger_id}]
    # Read again from there: every node gets it (reading takes nothing away).
    assert await store.read_control(position, block_ms=1) == entries
    # And from after it, nothing is new.
    (last_id, _fields) = entries[-1]
    assert await store.read_control(last_id, block_ms=1) == []


async def test_each_trigger_has_its_own_id(store: Store) -> None:
    position = await store.control_position()
    ids = [await store.request_trigger("j") for _ in range(3)]
    assert len(set(ids)) == 3
    entries = await store.read_control(position, block_ms=1)
    assert [fields["id"] for _id, fields in entries] == ids


async def test_a_trigger_runs_beside_the_schedule_and_never_moves_the_watermark(
    store: Store,
) -> None:
    await acquire(store, request(100, mode=AcquireMode.MARK))
    trigger = await won(
        store, request(50, overlap=Overlap.SKIP, mode=AcquireMode.TRIGGER, trigger_id="t1")
    )
    assert trigger.decision is AcquireDecision.RUN
    assert await store.trigger_claimant("j", "t1") == "n1"
    assert await watermark(store) == 100
    # The scheduled tick after it is decided as usual (and finds the trigger's run alive).
    tick = await acquire(store, request(101, owner=N2))
    assert (tick.decision, tick.holder_fence) == (AcquireDecision.SKIPPED_OVERLAP, trigger.fence)
    assert await watermark(store) == 101


async def test_a_trigger_that_has_to_wait_is_handed_on_as_that_trigger(store: Store) -> None:
    running = await acquire(store, request(100, overlap=Overlap.QUEUE_ONE))
    queued = await won(
        store,
        request(
            120, owner=N2, overlap=Overlap.QUEUE_ONE, mode=AcquireMode.TRIGGER, trigger_id="t1"
        ),
    )
    assert queued.decision is AcquireDecision.QUEUED
    handed = await store.release("j", running.fence, owner=N1, lease_ttl_ms=5000)
    assert (handed.decision, handed.tick_s, handed.trigger_id) == (
        ReleaseDecision.HANDED_ON,
        120,
        "t1",
    )


async def test_a_queued_tick_supersedes_a_waiting_trigger_and_says_which(store: Store) -> None:
    await acquire(store, request(100, overlap=Overlap.QUEUE_ONE))
    await won(
        store,
        request(120, overlap=Overlap.QUEUE_ONE, mode=AcquireMode.TRIGGER, trigger_id="t1"),
    )
    newer = await acquire(store, request(101, overlap=Overlap.QUEUE_ONE, owner=N2))
    assert newer.decision is AcquireDecision.QUEUED
    assert (newer.superseded_tick_s, newer.superseded_trigger_id) == (120, "t1")


async def test_a_trigger_nobody_claimed_has_no_claimant(store: Store) -> None:
    trigger_id = await store.request_trigger("j")
    assert await store.trigger_claimant("j", trigger_id) is None
    assert await store.claim([Claim("j", 0, 60_000, trigger_id)], N2) == [True]
    assert await store.trigger_claimant("j", trigger_id) == "n2"
