"""A wiped job holds new grants for one lease_ttl; a brand-new job never does.

Inside Redis the two look the same (every key missing). The difference is the node's
evidence, sent with each acquire: the highest fence it has seen for the job (its own
grants, every acquire and release answer, the counter read at start-up or with a claim;
a lost claim alone is none). Each test runs on fakeredis and on a real redis-server.
"""

from __future__ import annotations

import pytest

from cronrace.stores.redis import Store, make_client
from cronrace.stores.values import AcquireReply, AcquireRequest, Claim


def request(
    tick: int, *, overlap: str = "skip", owner: str = "n1:x", ttl_ms: int = 5000
) -> AcquireRequest:
    return AcquireRequest("j", tick, tick, tick, owner, ttl_ms, overlap, "run")


async def acquire(store: Store, req: AcquireRequest) -> AcquireReply:
    (reply,) = await store.acquire([req])
    assert isinstance(reply, AcquireReply), reply
    return reply


async def wipe(store: Store) -> None:
    """What a restart without persistence does to the job's keys."""
    keys = store.keys
    await store.client.delete(
        keys.lease("j"), keys.fence("j"), keys.last("j"), keys.state("j"), keys.pending("j")
    )


@pytest.fixture
async def other_node(redis_url: str, namespace: str) -> Store:
    """A second node's store on the same Redis: its own evidence."""
    store = Store(make_client(redis_url), namespace)
    yield store  # type: ignore[misc]
    await store.aclose()


async def test_a_brand_new_job_is_granted_at_once(store: Store) -> None:
    reply = await acquire(store, request(100))
    assert (reply.decision, reply.hold_ms, reply.data_lost) == ("run", 0, False)
    assert await store.client.exists(store.keys.hold("j")) == 0


@pytest.mark.parametrize("overlap", ["skip", "queue_one", "replace", "allow"])
async def test_a_wiped_job_holds_every_grant_for_one_lease_ttl(store: Store, overlap: str) -> None:
    first = await acquire(store, request(100, overlap=overlap))
    await wipe(store)
    after = await acquire(store, request(101, overlap=overlap))
    assert (after.decision, after.data_lost) == ("run", True)
    assert 4000 < after.hold_ms <= 5000
    assert after.fence > first.fence
    hold_key = store.keys.hold("j")
    assert 4000 < await store.client.pttl(hold_key) <= 5000
    # Every grant while the hold lasts says so, also replace and allow.
    if overlap in ("replace", "allow"):
        next_grant = await acquire(store, request(102, overlap=overlap, owner="n2:y"))
        assert next_grant.decision == "run"
        assert not next_grant.data_lost
        assert next_grant.hold_ms > 3000
    await store.client.delete(hold_key)  # the hold expired
    later = await acquire(store, request(103, overlap="allow"))
    assert (later.hold_ms, later.data_lost) == (0, False)


async def test_a_hand_on_during_the_hold_waits_too(store: Store) -> None:
    await acquire(store, request(100))
    await wipe(store)
    held = await acquire(store, request(101, overlap="queue_one"))
    assert held.hold_ms > 0
    await acquire(store, request(102, overlap="queue_one", owner="n2:y"))  # queued
    handed = await store.release("j", held.fence, owner="n1:x", lease_ttl_ms=5000)
    assert (handed.decision, handed.tick_s) == ("run", 102)
    assert handed.hold_ms > 3000


async def test_a_claim_lost_after_the_winner_decided_reads_its_fence(
    store: Store, other_node: Store
) -> None:
    assert await store.claim([Claim("j", 100, 5000)], "n1:x") == [True]
    await acquire(store, request(100))
    assert await other_node.claim([Claim("j", 100, 5000)], "n2:y") == [False]
    await wipe(store)
    reply = await acquire(other_node, request(101, owner="n2:y"))
    assert reply.data_lost
    assert reply.hold_ms > 0


async def test_a_claim_lost_to_an_undecided_winner_is_no_evidence(
    store: Store, other_node: Store
) -> None:
    """The winner's acquire has not reached Redis yet, or the winner died: the job may
    have no fence at all, and the next winner finding no counter is no wipe."""
    assert await store.claim([Claim("j", 100, 5000)], "n1:x") == [True]
    assert await other_node.claim([Claim("j", 100, 5000)], "n2:y") == [False]
    assert other_node.known_fence("j") == 0
    reply = await acquire(other_node, request(101, owner="n2:y"))
    assert (reply.decision, reply.data_lost, reply.hold_ms) == ("run", False, 0)
    assert await store.client.exists(store.keys.hold("j")) == 0


async def test_garbage_under_the_counter_read_with_a_claim_is_no_evidence(
    store: Store, other_node: Store
) -> None:
    await store.client.set(store.keys.fence("j"), "garbage")
    assert await other_node.claim([Claim("j", 100, 5000)], "n2:y") == [True]
    assert other_node.known_fence("j") == 0
    await store.client.delete(store.keys.fence("j"))
    await store.client.hset(store.keys.fence("j"), "a", "b")
    assert await other_node.claim([Claim("j", 101, 5000)], "n2:y") == [True]
    assert other_node.known_fence("j") == 0


async def test_the_counter_read_at_start_up_is_evidence(store: Store, other_node: Store) -> None:
    await acquire(store, request(100))
    await other_node.watermarks(["j"])  # a node starting up
    await wipe(store)
    assert (await acquire(other_node, request(101, owner="n2:y"))).data_lost


async def test_a_node_that_never_saw_the_job_cannot_tell_a_wipe(
    store: Store, other_node: Store
) -> None:
    """The limit of the evidence (README): the heartbeat's epoch check is the second line."""
    await acquire(store, request(100))
    await wipe(store)
    reply = await acquire(other_node, request(101, owner="n2:y"))
    assert (reply.decision, reply.data_lost, reply.hold_ms) == ("run", False, 0)


async def test_a_counter_behind_a_known_fence_holds_and_is_raised(store: Store) -> None:
    """A lossy failover: the promoted replica missed the last grants."""
    first = await acquire(store, request(100))
    await store.release("j", first.fence, owner="n1:x", lease_ttl_ms=5000)
    await store.client.set(store.keys.fence("j"), first.fence - 5)
    reply = await acquire(store, request(101))
    assert reply.data_lost
    assert reply.fence > first.fence
    assert reply.hold_ms > 0


async def test_garbage_under_the_lease_holds_new_grants(store: Store) -> None:
    await acquire(store, request(100))
    await store.client.delete(store.keys.lease("j"))
    await store.client.set(store.keys.lease("j"), "garbage")
    reply = await acquire(store, request(101))
    assert reply.decision == "run"
    assert reply.warnings == ("lease",)
    assert not reply.data_lost
    assert reply.hold_ms > 4000


async def test_garbage_under_the_lease_met_by_a_renewal_holds_new_grants(store: Store) -> None:
    first = await acquire(store, request(100))
    await store.client.delete(store.keys.lease("j"))
    await store.client.rpush(store.keys.lease("j"), "garbage")
    assert await store.renew("j", first.fence, 5000) == 0
    assert (await acquire(store, request(101))).hold_ms > 4000
