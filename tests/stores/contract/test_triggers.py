"""Manual triggers: asked once, read by every node, claimed by one, run through the lease."""

from __future__ import annotations

from cronrace.model.policies import Overlap
from cronrace.stores.contract import Store
from cronrace.stores.values import AcquireDecision, AcquireMode, Claim, ReleaseDecision
from tests.stores.contract.helpers import (
    CLAIM_TTL_MS,
    N1,
    N2,
    acquire,
    request,
    watermark,
    won,
)
from tests.stores.harness import Backend


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


async def runs_again(store: Store, tick: int, trigger_id: str) -> bool:
    """Whether N2, claiming ``trigger_id`` anew, is granted a run of it."""
    claim = Claim("j", tick, CLAIM_TTL_MS, trigger_id)
    if await store.claim([claim], N2) != [True]:
        return False  # the claim still holds it (PostgreSQL until it is swept)
    reply = await acquire(
        store, request(tick, owner=N2, mode=AcquireMode.TRIGGER, trigger_id=trigger_id)
    )
    assert reply.decision in (AcquireDecision.RUN, AcquireDecision.STALE), reply
    if reply.decision is AcquireDecision.RUN:
        await store.release("j", reply.fence, owner=N2, lease_ttl_ms=5000)
    return reply.decision is AcquireDecision.RUN


async def test_a_trigger_is_decided_once_also_after_its_claim_ran_out(
    store: Store, backend: Backend
) -> None:
    # N1 ran trigger t1; N2 read it in time but was paused before claiming it, past the
    # claim's lifetime: on Redis it wins the claim anew. Before, it ran t1 again (the
    # scheduler model with racers = 2); the job's last triggers decided are kept, and t1
    # is stale.
    first = await won(store, request(100, mode=AcquireMode.TRIGGER, trigger_id="t1"))
    assert first.decision is AcquireDecision.RUN
    await store.release("j", first.fence, owner=N1, lease_ttl_ms=5000)
    await backend.faults.expire_claim(Claim("j", 100, CLAIM_TTL_MS, "t1"))
    assert not await runs_again(store, 160, "t1")
    # Other triggers run, and t1 stays known while fewer than 16 came after it.
    for n in range(15):
        assert await runs_again(store, 200 + n, f"u{n}"), n
    await backend.faults.expire_claim(Claim("j", 160, CLAIM_TTL_MS, "t1"))
    assert not await runs_again(store, 300, "t1")


async def test_a_trigger_whose_grant_ran_out_unstarted_is_decided_again(
    store: Store, backend: Backend
) -> None:
    # Its own retry after a lost answer, the lease having run out before: decided again
    # with a new fence (as a tick is), not refused as a trigger already decided.
    first = await won(store, request(100, mode=AcquireMode.TRIGGER, trigger_id="t1"))
    await backend.faults.expire_lease("j")
    again = await acquire(store, request(100, mode=AcquireMode.TRIGGER, trigger_id="t1"))
    assert again.decision is AcquireDecision.RUN
    assert again.fence > first.fence
    assert not again.replayed
