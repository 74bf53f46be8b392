"""acquire.lua is idempotent for its owner and tick: a retry after a lost answer gets it again.

Each test runs on fakeredis and on a real redis-server. Before, a second acquire for the
same won tick answered ``stale`` (the first had advanced the watermark), so a node whose
answer was lost could never learn that it had been granted the run.
"""

from __future__ import annotations

import pytest

from cronrace.stores.redis import Store
from cronrace.stores.values import AcquireReply, AcquireRequest, Claim


def request(
    tick: int = 100,
    *,
    overlap: str = "skip",
    owner: str = "n1:x",
    mode: str = "run",
    trigger_id: str | None = None,
    ttl_ms: int = 5000,
) -> AcquireRequest:
    return AcquireRequest("j", tick, tick, tick, owner, ttl_ms, overlap, mode, trigger_id)


async def won(store: Store, req: AcquireRequest) -> AcquireReply:
    """Claim the request's tick for its owner, then acquire it."""
    claim = Claim(req.job, req.decide_tick_s, 60_000, req.trigger_id)
    assert await store.claim([claim], req.owner) == [True]
    return await acquire(store, req)


async def acquire(store: Store, req: AcquireRequest) -> AcquireReply:
    (reply,) = await store.acquire([req])
    assert isinstance(reply, AcquireReply), reply
    return reply


async def test_a_retried_grant_answers_the_same_fence_and_keeps_the_lease(store: Store) -> None:
    first = await won(store, request())
    await store.client.pexpire(store.keys.lease("j"), 1000)  # time passed since the grant
    again = await acquire(store, request())
    assert (again.decision, again.fence) == ("run", first.fence)
    assert (again.replayed, again.renewed) == (True, True)
    assert not first.replayed
    # Extended from the retry: the run may start now with a whole lease.
    assert await store.client.pttl(store.keys.lease("j")) > 4000
    assert await store.client.get(store.keys.fence("j")) == str(first.fence).encode()
    assert await store.client.get(store.keys.last("j")) == b"100"


async def test_a_retry_after_other_nodes_decided_later_ticks_is_never_stale(store: Store) -> None:
    first = await won(store, request(100, overlap="replace"))
    later = await won(store, request(101, overlap="replace", owner="n2:y"))
    assert later.fence > first.fence
    again = await acquire(store, request(100, overlap="replace"))
    # The lease moved on to a newer fence: the same answer, but the run must not start.
    assert (again.decision, again.fence, again.replayed, again.renewed) == (
        "run",
        first.fence,
        True,
        False,
    )


@pytest.mark.parametrize(
    ("overlap", "decision", "counter"),
    [("skip", "skipped:overlap", "skipped_overlap"), ("queue_one", "queued", "queued")],
)
async def test_a_retried_refusal_is_answered_again_and_counted_once(
    store: Store, overlap: str, decision: str, counter: str
) -> None:
    holder = await won(store, request(100, overlap=overlap))
    refused = await won(store, request(101, overlap=overlap, owner="n2:y"))
    again = await acquire(store, request(101, overlap=overlap, owner="n2:y"))
    assert refused.decision == again.decision == decision
    assert again.holder_fence == holder.fence
    assert again.replayed
    assert await store.client.hget(store.keys.state("j"), counter) == b"1"


async def test_a_grant_whose_lease_ran_out_unanswered_is_decided_again(store: Store) -> None:
    first = await won(store, request())
    await store.client.delete(store.keys.lease("j"))  # its lease ran out before the retry
    again = await acquire(store, request())
    assert again.decision == "run"
    assert again.fence > first.fence
    assert not again.replayed
    # The first grant never ran: it is reported abandoned; the watermark is not moved.
    assert (again.abandoned_tick_s, again.abandoned_fence) == (100, first.fence)
    assert again.prev_watermark_s is None
    # And that new answer is what a further retry gets.
    third = await acquire(store, request())
    assert (third.fence, third.replayed, third.renewed) == (again.fence, True, True)


async def test_a_trigger_is_remembered_under_its_own_claim(store: Store) -> None:
    first = await won(store, request(100, mode="trigger", trigger_id="t1"))
    again = await acquire(store, request(100, mode="trigger", trigger_id="t1"))
    assert (again.fence, again.replayed) == (first.fence, True)
    await store.release("j", first.fence, owner="n1:x", lease_ttl_ms=5000)
    other = await won(store, request(100, mode="trigger", trigger_id="t2"))
    assert other.fence > first.fence
    assert not other.replayed


async def test_nothing_is_remembered_without_a_won_claim(store: Store) -> None:
    # The runner's further catch-up ticks under one lease (allow) are never retried.
    first = await acquire(store, request(100, overlap="allow", mode="trigger"))
    second = await acquire(store, request(100, overlap="allow", mode="trigger"))
    assert second.fence > first.fence
    assert not second.replayed
    # Another owner's claim holds no answer for this one.
    await store.claim([Claim("j", 200, 60_000)], "n2:y")
    (mine,) = await store.acquire([request(200)])
    assert isinstance(mine, AcquireReply)
    assert not mine.replayed
    assert await store.client.get(store.keys.claim("j", 200)) == b"n2:y"
