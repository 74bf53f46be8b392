"""A decision is idempotent for its owner and tick: a retry after a lost answer gets it again.

Before, a second acquire for the same won tick answered ``stale`` (the first had advanced
the watermark), so a node whose answer was lost could never learn that it had been
granted the run.
"""

from __future__ import annotations

from dataclasses import replace

import anyio
import pytest

from cronrace.model.policies import Overlap
from cronrace.stores.contract import Store
from cronrace.stores.values import AcquireDecision, AcquireMode, Claim
from tests.stores.contract.helpers import CLAIM_TTL_MS, N1, N2, acquire, request, state, won
from tests.stores.harness import Backend


async def test_a_retried_grant_answers_the_same_fence_and_keeps_the_lease(
    store: Store, backend: Backend
) -> None:
    first = await won(store, request())
    await backend.faults.age_lease("j", 1000)  # time passed since the grant
    again = await acquire(store, request())
    assert (again.decision, again.fence) == (AcquireDecision.RUN, first.fence)
    assert (again.replayed, again.renewed) == (True, True)
    assert not first.replayed
    # Extended from the retry: the run may start now with a whole lease.
    job = await state(store)
    assert job.lease is not None
    assert job.lease.ttl_ms > 4000
    assert job.last_fence == first.fence
    assert job.watermark_s == 100


async def test_a_retry_after_other_nodes_decided_later_ticks_is_never_stale(store: Store) -> None:
    first = await won(store, request(100, overlap=Overlap.REPLACE))
    later = await won(store, request(101, overlap=Overlap.REPLACE, owner=N2))
    assert later.fence > first.fence
    again = await acquire(store, request(100, overlap=Overlap.REPLACE))
    # The lease moved on to a newer fence: the same answer, but the run must not start.
    assert (again.decision, again.fence, again.replayed, again.renewed) == (
        AcquireDecision.RUN,
        first.fence,
        True,
        False,
    )


@pytest.mark.parametrize(
    ("overlap", "decision", "counter"),
    [
        (Overlap.SKIP, AcquireDecision.SKIPPED_OVERLAP, "skipped_overlap"),
        (Overlap.QUEUE_ONE, AcquireDecision.QUEUED, "queued"),
    ],
)
async def test_a_retried_refusal_is_answered_again_and_counted_once(
    store: Store, overlap: Overlap, decision: AcquireDecision, counter: str
) -> None:
    holder = await won(store, request(100, overlap=overlap))
    refused = await won(store, request(101, overlap=overlap, owner=N2))
    again = await acquire(store, request(101, overlap=overlap, owner=N2))
    assert refused.decision == again.decision == decision
    assert again.holder_fence == holder.fence
    assert again.replayed
    assert (await state(store)).counters[counter] == 1


async def test_a_grant_whose_lease_ran_out_unanswered_is_decided_again(
    store: Store, backend: Backend
) -> None:
    first = await won(store, request())
    await backend.faults.expire_lease("j")  # its lease ran out before the retry
    again = await acquire(store, request())
    assert again.decision is AcquireDecision.RUN
    assert again.fence > first.fence
    assert not again.replayed
    # The first grant never ran: it is reported abandoned; the watermark is not moved.
    assert (again.abandoned_tick_s, again.abandoned_fence) == (100, first.fence)
    assert again.prev_watermark_s is None
    # And that new answer is what a further retry gets.
    third = await acquire(store, request())
    assert (third.fence, third.replayed, third.renewed) == (again.fence, True, True)


async def test_a_trigger_is_remembered_under_its_own_claim(store: Store) -> None:
    first = await won(store, request(100, mode=AcquireMode.TRIGGER, trigger_id="t1"))
    again = await acquire(store, request(100, mode=AcquireMode.TRIGGER, trigger_id="t1"))
    assert (again.fence, again.replayed) == (first.fence, True)
    await store.release("j", first.fence, owner=N1, lease_ttl_ms=5000)
    other = await won(store, request(100, mode=AcquireMode.TRIGGER, trigger_id="t2"))
    assert other.fence > first.fence
    assert not other.replayed


async def test_nothing_is_remembered_without_a_won_claim(store: Store) -> None:
    # The runner's further catch-up ticks under one lease (allow) are never retried.
    first = await acquire(store, request(100, overlap=Overlap.ALLOW, mode=AcquireMode.TRIGGER))
    second = await acquire(store, request(100, overlap=Overlap.ALLOW, mode=AcquireMode.TRIGGER))
    assert second.fence > first.fence
    assert not second.replayed
    # Another owner's claim holds no answer for this one: asked again, it is decided
    # again (stale now), not answered from memory; and the claim is still the other's.
    claim = Claim("j", 200, CLAIM_TTL_MS)
    await store.claim([claim], N2)
    mine = await acquire(store, request(200))
    assert not mine.replayed
    again = await acquire(store, request(200))
    assert (again.decision, again.replayed) == (AcquireDecision.STALE, False)
    assert await store.read_claims([claim], N2) == [True]
    assert await store.read_claims([claim], N1) == [False]


#: How long a decision asks its answer to be kept (the claim's lifetime, for the agent).
KEEP_MS = 30_000


async def test_a_mark_decided_as_its_claim_runs_out_keeps_its_answer(
    store: Store, backend: Backend
) -> None:
    # A node thawed past the tick's catch-up window decides it as its claim runs out; the
    # answer is lost. Its retry, past the claim's first lifetime, reads it back: the
    # missed count it calls for is written once. Before, the claim ran out with the answer
    # and the retry found the tick decided by nobody it knew (stale).
    claim = Claim("j", 100, CLAIM_TTL_MS)
    assert await store.claim([claim], N1) == [True]
    await backend.faults.age_claim(claim, 300)
    mark = replace(request(100, mode=AcquireMode.MARK), keep_ms=KEEP_MS)
    first = await acquire(store, mark)
    assert first.decision is AcquireDecision.MARKED
    await anyio.sleep(0.6)  # the claim's first lifetime is over
    again = await acquire(store, mark)
    assert (again.decision, again.prev_watermark_s, again.replayed) == (
        AcquireDecision.MARKED,
        None,
        True,
    )
    assert await store.read_claims([claim], N1) == [True], "still this owner's"


@pytest.mark.parametrize("keep_ms", [KEEP_MS, 0])
async def test_a_mark_decided_after_its_claim_ran_out_is_remembered_in_a_claim_made_anew(
    store: Store, backend: Backend, keep_ms: int
) -> None:
    # Frozen past the claim's lifetime, the node decides the tick it won (the watermark is
    # below it: no one else decided it). Asked to keep its answer, the store makes the
    # claim anew with it; without keep_ms, nothing is remembered (as before).
    claim = Claim("j", 100, CLAIM_TTL_MS)
    assert await store.claim([claim], N1) == [True]
    await backend.faults.expire_claim(claim)
    mark = replace(request(100, mode=AcquireMode.MARK), keep_ms=keep_ms)
    first = await acquire(store, mark)
    assert first.decision is AcquireDecision.MARKED
    again = await acquire(store, mark)
    if keep_ms:
        assert (again.decision, again.replayed) == (AcquireDecision.MARKED, True)
        assert await store.read_claims([claim], N1) == [True]
        # Another node racing the tick now loses: it is decided.
        assert await store.claim([claim], N2) == [False]
    else:
        assert (again.decision, again.replayed) == (AcquireDecision.STALE, False)


async def test_a_stale_answer_makes_no_claim_anew(store: Store, backend: Backend) -> None:
    # A later tick was decided and this one was not passed while undecided: stale, and
    # nothing is remembered for a claim that ran out (the tick stays free of claims).
    claim = Claim("j", 100, CLAIM_TTL_MS)
    assert await store.claim([claim], N1) == [True]
    await won(store, request(110, owner=N2))
    await backend.faults.expire_claim(claim)
    stale = await acquire(store, replace(request(100, mode=AcquireMode.MARK), keep_ms=KEEP_MS))
    assert (stale.decision, stale.replayed) == (AcquireDecision.STALE, False)
    assert await store.read_claims([claim], N1) == [False]
