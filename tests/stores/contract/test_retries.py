"""A decision is idempotent for its owner and claim: a retry after a lost answer gets it again.

The decision keeps its answer under its claim for ``claim_ttl`` (writing the claim anew if
it had run out): a retry by the same owner is answered from it (``replayed``) and writes
nothing. A replayed grant may start (``renewed``) only while its lease still holds its
fence and no higher fence is known.
"""

from __future__ import annotations

import anyio
import pytest

from cronrace.model.policies import Outcome, Overlap
from cronrace.protocol import Answer, Verdict
from cronrace.stores.contract import Store
from cronrace.stores.values import Claim
from tests.stores.contract.helpers import (
    CLAIM_TTL_MS,
    N1,
    N2,
    cursor,
    decide,
    end,
    request,
    state,
    won,
)
from tests.stores.harness import Backend


async def test_a_retried_grant_answers_the_same_fence_and_keeps_the_lease(
    store: Store, backend: Backend
) -> None:
    first = await won(store, request())
    await backend.faults.age_lease("j", 1000)  # time passed since the grant
    again = await decide(store, request())
    assert (again.answer, again.verdict, again.fence) == (Answer.DECIDED, Verdict.RUN, first.fence)
    assert (again.replayed, again.renewed, again.records) == (True, True, ())
    assert not first.replayed
    # Extended from the retry: the run may start now with a whole lease.
    job = await state(store)
    assert job.lease is not None
    assert job.lease.ttl_ms > 4000
    assert job.last_fence == first.fence
    assert job.cursor_s == 100
    assert len(await store.history("j", 10)) == 1  # written once


async def test_a_retry_after_other_nodes_decided_later_ticks_is_never_covered(
    store: Store,
) -> None:
    first = await won(store, request(100, overlap=Overlap.REPLACE))
    later = await won(store, request(101, cursor=100, overlap=Overlap.REPLACE, owner=N2))
    assert later.fence > first.fence
    again = await decide(store, request(100, overlap=Overlap.REPLACE))
    # The lease moved on to a newer fence: the same answer, but the run must not start.
    assert (again.answer, again.fence, again.replayed, again.renewed) == (
        Answer.DECIDED,
        first.fence,
        True,
        False,
    )


@pytest.mark.parametrize(
    ("overlap", "verdict", "counter"),
    [
        (Overlap.SKIP, Verdict.SKIPPED_OVERLAP, "skipped_overlap"),
        (Overlap.QUEUE_ONE, Verdict.QUEUED, "queued"),
    ],
)
async def test_a_retried_refusal_is_answered_again_and_counted_once(
    store: Store, overlap: Overlap, verdict: Verdict, counter: str
) -> None:
    await won(store, request(100, overlap=overlap))
    refused = await won(store, request(101, cursor=100, overlap=overlap, owner=N2))
    again = await decide(store, request(101, cursor=100, overlap=overlap, owner=N2))
    assert refused.verdict == again.verdict == verdict
    assert (again.replayed, again.renewed, again.records) == (True, False, ())
    assert (await state(store)).counters[counter] == 1


async def test_a_grant_whose_lease_ran_out_unanswered_never_starts(
    store: Store, backend: Backend
) -> None:
    first = await won(store, request())
    await backend.faults.expire_lease("j")  # its lease ran out before the retry
    again = await decide(store, request())
    assert (again.verdict, again.fence, again.replayed, again.renewed) == (
        Verdict.RUN,
        first.fence,
        True,
        False,
    )
    # Not decided again: the job's next decision records the grant abandoned.
    later = await decide(store, request(101, cursor=100, owner=N2))
    assert [(r.tick_s, r.outcome, r.fence) for r in later.records] == [
        (100, Outcome.ABANDONED, first.fence),
        (101, Outcome.GRANTED, later.fence),
    ]


async def test_a_trigger_is_remembered_under_its_own_claim(store: Store) -> None:
    t1 = await store.request_trigger("j")
    first = await won(store, request(100, trigger_id=t1))
    again = await decide(store, request(100, trigger_id=t1))
    assert (again.fence, again.replayed, again.renewed) == (first.fence, True, True)
    await store.end_run(end(first.fence))
    t2 = await store.request_trigger("j")
    other = await won(store, request(100, trigger_id=t2))
    assert other.fence > first.fence
    assert not other.replayed


async def test_another_owners_claim_holds_no_answer_for_this_one(store: Store) -> None:
    # Asked again, it is lost again, not answered from memory; the claim is still the other's.
    claim = Claim("j", 200, CLAIM_TTL_MS)
    await store.claim([claim], N2)
    mine = await decide(store, request(200))
    assert (mine.answer, mine.replayed) == (Answer.LOST, False)
    again = await decide(store, request(200))
    assert (again.answer, again.replayed) == (Answer.LOST, False)
    assert await store.read_claims([claim], N2) == [True]
    assert await store.read_claims([claim], N1) == [False]
    assert await cursor(store) is None


async def test_a_decision_made_as_its_claim_runs_out_keeps_its_answer(
    store: Store, backend: Backend
) -> None:
    # A node thawed past the tick's catch-up window decides it as its claim runs out; the
    # answer is lost. Its retry, past the claim's first lifetime, reads it back: the
    # missed record it wrote is written once.
    claim = Claim("j", 100, CLAIM_TTL_MS)
    assert await store.claim([claim], N1) == [True]
    await backend.faults.age_claim(claim, 300)
    first = await decide(store, request(100, fire=()))
    assert (first.verdict, [r.outcome for r in first.records]) == (
        Verdict.NOTHING,
        [Outcome.MISSED],
    )
    await anyio.sleep(0.6)  # the claim's first lifetime is over
    again = await decide(store, request(100, fire=()))
    assert (again.verdict, again.cursor_s, again.replayed) == (Verdict.NOTHING, 100, True)
    assert await store.read_claims([claim], N1) == [True], "still this owner's"
    assert len(await store.history("j", 10)) == 1


async def test_a_decision_made_after_its_claim_ran_out_is_remembered_in_a_claim_made_anew(
    store: Store, backend: Backend
) -> None:
    # Frozen past the claim's lifetime, the node decides the tick it won (the cursor is
    # below it: no one else decided it). The cursor makes that safe; the store makes the
    # claim anew with the answer.
    claim = Claim("j", 100, CLAIM_TTL_MS)
    assert await store.claim([claim], N1) == [True]
    await backend.faults.expire_claim(claim)
    first = await decide(store, request(100, fire=()))
    assert first.answer is Answer.DECIDED
    again = await decide(store, request(100, fire=()))
    assert (again.answer, again.replayed) == (Answer.DECIDED, True)
    assert await store.read_claims([claim], N1) == [True]
    # Another node racing the tick now loses: it is decided.
    assert await store.claim([claim], N2) == [False]


async def test_a_covered_answer_makes_no_claim_anew(store: Store, backend: Backend) -> None:
    # A later tick was decided (covering this one): covered, and nothing is remembered for
    # a claim that ran out (the tick stays free of claims).
    claim = Claim("j", 100, CLAIM_TTL_MS)
    assert await store.claim([claim], N1) == [True]
    await won(store, request(110, owner=N2))
    await backend.faults.expire_claim(claim)
    covered = await decide(store, request(100, fire=()))
    assert (covered.answer, covered.replayed, covered.cursor_s) == (Answer.COVERED, False, 110)
    assert await store.read_claims([claim], N1) == [False]


async def test_a_replayed_grant_that_fences_above_it_followed_does_not_start(
    store: Store, backend: Backend
) -> None:
    """The deep model's second finding: a failover to a replica that lagged put back a
    grant whose answer was lost, with its lease, though fences above it had been handed
    out on the primary it replaced. A retry got the grant back and started it (its lease
    still held its fence): a run with an older fence after a newer one. A replayed grant
    starts only while no fence above it is known: here the counter knows one."""
    first = await won(store, request())
    await backend.faults.set_fence_counter("j", first.fence + 1000)
    again = await decide(store, request())
    assert (again.verdict, again.fence, again.replayed, again.renewed) == (
        Verdict.RUN,
        first.fence,
        True,
        False,
    )
