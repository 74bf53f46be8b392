"""A node that only lost a job's claims still knows a wipe when it meets one.

A lost claim is no evidence of a fence (its winner may not have decided yet, or died), so
a node keeps the claim it lost as a witness while the job's counter is not there: should
that claim be gone at its next claim although its TTL has not run out, Redis lost the
job's data, and the node's decision holds (docs/design.md section 8, "A wiped Redis").
"""

from __future__ import annotations

from cronrace.stores.redis import Store
from cronrace.stores.values import Claim, Owner
from tests.stores.contract.helpers import N2, decide, request
from tests.stores.redis.backend import RedisBackend

WINNER = Owner("n1", "aaaa")
LOSER = N2


async def wipe_job(store: Store, job: str, *ticks: int) -> None:
    """What a restart without persistence does to one job: its keys are gone."""
    keys = [store.keys.fence(job), store.keys.cursor(job), store.keys.lease(job)]
    keys += [store.keys.claim(job, tick) for tick in ticks]
    for key in keys:  # one at a time: on a Cluster, DEL of several keys must share a slot
        await store.client.delete(key)


async def test_a_lost_claim_gone_before_its_ttl_is_evidence_of_a_wipe(
    store: Store, backend: RedisBackend
) -> None:
    loser = await backend.node()
    assert await store.claim([Claim("j", 100, 30_000)], WINNER) == [True]
    assert await loser.claim([Claim("j", 100, 30_000)], LOSER) == [False]
    assert loser.known_fence("j") == 0  # the winner has not decided yet: no fence seen
    await decide(store, request(100, owner=WINNER))  # the winner's run starts
    await wipe_job(store, "j", 100)
    assert await loser.claim([Claim("j", 101, 30_000)], LOSER) == [True]
    assert loser.known_fence("j") > 0
    reply = await decide(loser, request(101, owner=LOSER))
    assert reply.data_lost
    assert reply.hold_ms > 0  # the winner's run may still be alive: no overlap


async def test_a_winner_that_never_decided_is_no_wipe(store: Store, backend: RedisBackend) -> None:
    loser = await backend.node()
    assert await store.claim([Claim("j", 100, 30_000)], WINNER) == [True]  # then it dies
    assert await loser.claim([Claim("j", 100, 30_000)], LOSER) == [False]
    assert await loser.claim([Claim("j", 101, 30_000)], LOSER) == [True]
    assert loser.known_fence("j") == 0
    reply = await decide(loser, request(101, owner=LOSER))
    assert (reply.data_lost, reply.hold_ms) == (False, 0)


async def test_a_lost_claim_near_its_expiry_witnesses_nothing(
    store: Store, backend: RedisBackend
) -> None:
    """A claim read back too close to its TTL could have expired on its own."""
    loser = await backend.node()
    assert await store.claim([Claim("j", 100, 1_000)], WINNER) == [True]
    assert await loser.claim([Claim("j", 100, 1_000)], LOSER) == [False]
    await wipe_job(store, "j", 100)
    assert await loser.claim([Claim("j", 101, 30_000)], LOSER) == [True]
    assert loser.known_fence("j") == 0


async def test_a_tick_and_a_trigger_of_one_job_in_one_batch_both_read_the_witness(
    store: Store, backend: RedisBackend
) -> None:
    """Both carry the lost claim's witness; the first answer takes it out of the node's
    bookkeeping, and the second must still be read (it raised KeyError, failing the claims
    of the whole batch)."""
    loser = await backend.node()
    assert await store.claim([Claim("j", 100, 30_000)], WINNER) == [True]
    assert await loser.claim([Claim("j", 100, 30_000)], LOSER) == [False]
    await decide(store, request(100, owner=WINNER))
    await wipe_job(store, "j", 100)
    batch = [Claim("j", 101, 30_000), Claim("j", 101, 30_000, trigger_id="t1")]
    assert await loser.claim(batch, LOSER) == [True, True]
    assert loser.known_fence("j") > 0
