"""A wiped job holds new grants for one lease_ttl; a brand-new job never does.

Inside the store the two look much the same (the job's data missing). The difference is
the node's evidence, sent with each decision: the cursor it planned from (a store without
one has lost it: a ``data_lost`` record), and the highest fence it has seen for the job
(its own grants, every decision and release answer, the counter read with the cursors or
with a claim; a lost claim alone is none).
"""

from __future__ import annotations

import pytest

from cronrace.model.policies import Outcome, Overlap
from cronrace.protocol import DecideRequest, Release, Verdict
from cronrace.stores.contract import Store
from cronrace.stores.values import Claim, Owner
from tests.stores.contract import helpers
from tests.stores.contract.helpers import N1, N2, decide, end
from tests.stores.harness import Backend


def request(
    tick: int,
    *,
    cursor: int | None = None,
    overlap: Overlap = Overlap.SKIP,
    owner: Owner = N1,
) -> DecideRequest:
    return helpers.request(tick, cursor=cursor, overlap=overlap, owner=owner)


@pytest.fixture
async def other_node(backend: Backend) -> Store:
    """A second node's store on the same data: its own evidence."""
    return await backend.node()


async def test_a_brand_new_job_is_granted_at_once(store: Store) -> None:
    reply = await decide(store, request(100))
    assert (reply.verdict, reply.hold_ms, reply.data_lost) == (Verdict.RUN, 0, False)
    await store.end_run(end(reply.fence))
    assert (await decide(store, request(101, cursor=100))).hold_ms == 0  # no hold was started


@pytest.mark.parametrize("overlap", list(Overlap))
async def test_a_wiped_job_holds_every_grant_for_one_lease_ttl(
    store: Store, backend: Backend, overlap: Overlap
) -> None:
    first = await decide(store, request(100, overlap=overlap))
    await backend.faults.wipe("j")
    after = await decide(store, request(101, cursor=100, overlap=overlap))
    assert (after.verdict, after.data_lost) == (Verdict.RUN, True)
    assert [(r.tick_s, r.outcome) for r in after.records] == [
        (100, Outcome.DATA_LOST),
        (101, Outcome.GRANTED),
    ]
    assert 4000 < after.hold_ms <= 5000
    assert after.fence > first.fence
    assert await helpers.cursor(store) == 101  # it went on from the cursor it expected
    # Every grant while the hold lasts says so, also replace and allow (and the others,
    # once the lease is free again).
    if overlap not in (Overlap.REPLACE, Overlap.ALLOW):
        await store.end_run(end(after.fence))
    next_grant = await decide(store, request(102, cursor=101, overlap=overlap, owner=N2))
    assert next_grant.verdict is Verdict.RUN
    assert not next_grant.data_lost
    assert next_grant.hold_ms > 3000
    await backend.faults.end_hold("j")  # the hold expired
    later = await decide(store, request(103, cursor=102, overlap=Overlap.ALLOW))
    assert (later.hold_ms, later.data_lost) == (0, False)


async def test_a_hand_on_during_the_hold_waits_too(store: Store, backend: Backend) -> None:
    await decide(store, request(100))
    await backend.faults.wipe("j")
    held = await decide(store, request(101, cursor=100, overlap=Overlap.QUEUE_ONE))
    assert held.hold_ms > 0
    await decide(store, request(102, cursor=101, overlap=Overlap.QUEUE_ONE, owner=N2))  # queued
    handed = await store.end_run(end(held.fence))
    assert (handed.decision, handed.tick_s) == (Release.HANDED_ON, 102)
    assert handed.hold_ms > 3000


async def test_a_claim_lost_after_the_winner_decided_reads_its_fence(
    store: Store, other_node: Store, backend: Backend
) -> None:
    assert await store.claim([Claim("j", 100, 5000)], N1) == [True]
    await decide(store, request(100))
    assert await other_node.claim([Claim("j", 100, 5000)], N2) == [False]
    await backend.faults.wipe("j")
    # Knowing no cursor, the other node tells the wipe by the fence it read with its claim.
    reply = await decide(other_node, request(101, owner=N2))
    assert reply.data_lost
    assert reply.hold_ms > 0


async def test_a_claim_lost_to_an_undecided_winner_is_no_evidence(
    store: Store, other_node: Store
) -> None:
    """The winner's decision has not reached the store yet, or the winner died: the job may
    have no fence at all, and the next winner finding no counter is no wipe."""
    assert await store.claim([Claim("j", 100, 5000)], N1) == [True]
    assert await other_node.claim([Claim("j", 100, 5000)], N2) == [False]
    assert other_node.known_fence("j") == 0
    reply = await decide(other_node, request(101, owner=N2))
    assert (reply.verdict, reply.data_lost, reply.hold_ms) == (Verdict.RUN, False, 0)
    await other_node.end_run(end(reply.fence, owner=N2))
    assert (await decide(store, request(102, cursor=101))).hold_ms == 0  # no hold was started


async def test_the_counter_read_with_the_cursors_is_evidence(
    store: Store, other_node: Store, backend: Backend
) -> None:
    await decide(store, request(100))
    await other_node.cursors(["j"])  # a node starting up
    await backend.faults.wipe("j")
    assert (await decide(other_node, request(101, owner=N2))).data_lost


async def test_a_node_that_never_saw_the_job_cannot_tell_a_wipe(
    store: Store, other_node: Store, backend: Backend
) -> None:
    """The limit of the evidence (README): the heartbeat's epoch check is the second line."""
    await decide(store, request(100))
    await backend.faults.wipe("j")
    reply = await decide(other_node, request(101, owner=N2))
    assert (reply.verdict, reply.data_lost, reply.hold_ms) == (Verdict.RUN, False, 0)


async def test_the_cursor_a_node_planned_from_is_evidence_enough(
    store: Store, other_node: Store, backend: Backend
) -> None:
    """A node that knows no fence of the job but expects its cursor tells the wipe."""
    await decide(store, request(100))
    await backend.faults.wipe("j")
    assert other_node.known_fence("j") == 0
    reply = await decide(other_node, request(101, cursor=100, owner=N2))
    assert (reply.verdict, reply.data_lost) == (Verdict.RUN, True)
    assert reply.hold_ms > 0
    assert [r.outcome for r in reply.records] == [Outcome.DATA_LOST, Outcome.GRANTED]


async def test_a_counter_behind_a_known_fence_holds_and_is_raised(
    store: Store, backend: Backend
) -> None:
    """A lossy failover: the promoted replica missed the last grants."""
    first = await decide(store, request(100))
    await store.end_run(end(first.fence))
    await backend.faults.set_fence_counter("j", first.fence - 5)
    reply = await decide(store, request(101, cursor=100))
    assert reply.data_lost
    assert reply.fence > first.fence
    assert reply.hold_ms > 0
