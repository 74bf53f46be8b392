"""A wiped job holds new grants for one lease_ttl; a brand-new job never does.

Inside the store the two look the same (all of the job's data missing). The difference is
the node's evidence, sent with each acquire: the highest fence it has seen for the job
(its own grants, every acquire and release answer, the counter read at start-up or with a
claim; a lost claim alone is none).
"""

from __future__ import annotations

import pytest

from cronrace.model.policies import Overlap
from cronrace.stores.contract import Store
from cronrace.stores.values import AcquireDecision, AcquireReply, AcquireRequest, Claim, Owner
from tests.stores.contract import helpers
from tests.stores.contract.helpers import N1, N2, acquire
from tests.stores.harness import Backend


def request(
    tick: int, *, overlap: Overlap = Overlap.SKIP, owner: Owner = N1, ttl_ms: int = 5000
) -> AcquireRequest:
    return helpers.request(tick, overlap=overlap, owner=owner, ttl_ms=ttl_ms)


@pytest.fixture
async def other_node(backend: Backend) -> Store:
    """A second node's store on the same data: its own evidence."""
    return await backend.node()


async def test_a_brand_new_job_is_granted_at_once(store: Store) -> None:
    reply = await acquire(store, request(100))
    assert (reply.decision, reply.hold_ms, reply.data_lost) == (AcquireDecision.RUN, 0, False)
    await store.release("j", reply.fence, owner=N1, lease_ttl_ms=5000)
    assert (await acquire(store, request(101))).hold_ms == 0  # no hold was started


@pytest.mark.parametrize("overlap", list(Overlap))
async def test_a_wiped_job_holds_every_grant_for_one_lease_ttl(
    store: Store, backend: Backend, overlap: Overlap
) -> None:
    first = await acquire(store, request(100, overlap=overlap))
    await backend.faults.wipe("j")
    after = await acquire(store, request(101, overlap=overlap))
    assert (after.decision, after.data_lost) == (AcquireDecision.RUN, True)
    assert 4000 < after.hold_ms <= 5000
    assert after.fence > first.fence
    # Every grant while the hold lasts says so, also replace and allow (and the others,
    # once the lease is free again).
    if overlap not in (Overlap.REPLACE, Overlap.ALLOW):
        await store.release("j", after.fence, owner=N1, lease_ttl_ms=5000)
    next_grant = await acquire(store, request(102, overlap=overlap, owner=N2))
    assert next_grant.decision is AcquireDecision.RUN
    assert not next_grant.data_lost
    assert next_grant.hold_ms > 3000
    await backend.faults.end_hold("j")  # the hold expired
    later = await acquire(store, request(103, overlap=Overlap.ALLOW))
    assert (later.hold_ms, later.data_lost) == (0, False)


async def test_a_hand_on_during_the_hold_waits_too(store: Store, backend: Backend) -> None:
    await acquire(store, request(100))
    await backend.faults.wipe("j")
    held = await acquire(store, request(101, overlap=Overlap.QUEUE_ONE))
    assert held.hold_ms > 0
    await acquire(store, request(102, overlap=Overlap.QUEUE_ONE, owner=N2))  # queued
    handed = await store.release("j", held.fence, owner=N1, lease_ttl_ms=5000)
    assert (handed.decision, handed.tick_s) == ("run", 102)
    assert handed.hold_ms > 3000


async def test_a_claim_lost_after_the_winner_decided_reads_its_fence(
    store: Store, other_node: Store, backend: Backend
) -> None:
    assert await store.claim([Claim("j", 100, 5000)], N1) == [True]
    await acquire(store, request(100))
    assert await other_node.claim([Claim("j", 100, 5000)], N2) == [False]
    await backend.faults.wipe("j")
    reply = await acquire(other_node, request(101, owner=N2))
    assert reply.data_lost
    assert reply.hold_ms > 0


async def test_a_claim_lost_to_an_undecided_winner_is_no_evidence(
    store: Store, other_node: Store
) -> None:
    """The winner's acquire has not reached the store yet, or the winner died: the job may
    have no fence at all, and the next winner finding no counter is no wipe."""
    assert await store.claim([Claim("j", 100, 5000)], N1) == [True]
    assert await other_node.claim([Claim("j", 100, 5000)], N2) == [False]
    assert other_node.known_fence("j") == 0
    reply = await acquire(other_node, request(101, owner=N2))
    assert (reply.decision, reply.data_lost, reply.hold_ms) == (AcquireDecision.RUN, False, 0)
    await other_node.release("j", reply.fence, owner=N2, lease_ttl_ms=5000)
    assert (await acquire(store, request(102))).hold_ms == 0  # no hold was started


async def test_the_counter_read_at_start_up_is_evidence(
    store: Store, other_node: Store, backend: Backend
) -> None:
    await acquire(store, request(100))
    await other_node.watermarks(["j"])  # a node starting up
    await backend.faults.wipe("j")
    assert (await acquire(other_node, request(101, owner=N2))).data_lost


async def test_a_node_that_never_saw_the_job_cannot_tell_a_wipe(
    store: Store, other_node: Store, backend: Backend
) -> None:
    """The limit of the evidence (README): the heartbeat's epoch check is the second line."""
    await acquire(store, request(100))
    await backend.faults.wipe("j")
    reply: AcquireReply = await acquire(other_node, request(101, owner=N2))
    assert (reply.decision, reply.data_lost, reply.hold_ms) == (AcquireDecision.RUN, False, 0)


async def test_a_counter_behind_a_known_fence_holds_and_is_raised(
    store: Store, backend: Backend
) -> None:
    """A lossy failover: the promoted replica missed the last grants."""
    first = await acquire(store, request(100))
    await store.release("j", first.fence, owner=N1, lease_ttl_ms=5000)
    await backend.faults.set_fence_counter("j", first.fence - 5)
    reply = await acquire(store, request(101))
    assert reply.data_lost
    assert reply.fence > first.fence
    assert reply.hold_ms > 0
