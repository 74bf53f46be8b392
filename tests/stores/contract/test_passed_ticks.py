"""A won tick whose answer comes after a later tick's decision is decided late, not lost.

Node A wins tick 100, but its acquire reaches the store only after node B, on time for tick
101, has decided 101 (A's answer was slow, or its claim's reply was lost and is read back
after an outage). Before, A's acquire found the watermark past 100 and answered ``stale``:
the tick never ran, recorded only as stale, though nobody else had decided it (found by
the Cluster fault test, README's known gap). Now B's decision, seeing 100's claim won and
undecided, notes it passed; A's acquire then decides it late: under catchup = all it runs
(by the overlap policy), otherwise it is answered ``missed``. A tick some decision covered
(a catch-up) stays stale: that decision ran it or recorded it.
"""

from __future__ import annotations

import dataclasses

import pytest

from cronrace.model.policies import Overlap
from cronrace.stores.contract import Store
from cronrace.stores.values import (
    AcquireDecision,
    AcquireMode,
    AcquireReply,
    AcquireRequest,
    Claim,
    Owner,
    ReleaseDecision,
)
from tests.stores.contract import helpers
from tests.stores.contract.helpers import acquire, lease, watermark
from tests.stores.harness import Backend

A, B, C, D = (Owner.parse(text) for text in ("a:1", "b:2", "c:3", "d:4"))


def request(
    tick: int,
    owner: Owner,
    *,
    prior: int = 0,
    late_ok: bool = True,
    overlap: Overlap = Overlap.SKIP,
) -> AcquireRequest:
    return helpers.request(tick, owner=owner, prior=prior, late_ok=late_ok, overlap=overlap)


async def claim(store: Store, tick: int, owner: Owner) -> None:
    assert await store.claim([Claim("j", tick, 60_000)], owner) == [True]


async def test_a_won_tick_passed_while_undecided_runs_late_under_catchup_all(store: Store) -> None:
    await claim(store, 100, A)
    await claim(store, 101, B)
    later = await acquire(store, request(101, B, prior=100, overlap=Overlap.ALLOW))
    assert later.decision is AcquireDecision.RUN
    late = await acquire(store, request(100, A, overlap=Overlap.ALLOW))
    assert late.decision is AcquireDecision.RUN
    assert late.fence > later.fence
    assert late.prev_watermark_s == 101
    assert await watermark(store) == 101  # a late decision never moves the watermark back
    again = await acquire(store, request(100, A, overlap=Overlap.ALLOW))
    assert (again.decision, again.fence, again.replayed) == (AcquireDecision.RUN, late.fence, True)


async def test_a_passed_tick_is_answered_missed_when_the_policy_runs_no_late_tick(
    store: Store,
) -> None:
    await claim(store, 100, A)
    await claim(store, 101, B)
    await acquire(store, request(101, B, prior=100))
    late = await acquire(store, request(100, A, late_ok=False))
    assert late.decision is AcquireDecision.MISSED
    assert late.fence == 0


@pytest.mark.parametrize("late_ok", [False, True])  # marking runs nothing, whatever the policy
async def test_a_passed_tick_whose_plan_runs_nothing_is_answered_missed(
    store: Store, late_ok: bool
) -> None:
    """A backlog under catchup = skip decides its claim in mode mark: read back after its
    answer was lost and passed meanwhile, it was answered ``stale`` (which no record counts),
    and the tick was neither run nor counted (the scheduler model found it)."""
    await claim(store, 100, A)
    await claim(store, 101, B)
    newer = await acquire(store, request(101, B, prior=100))
    req = dataclasses.replace(request(100, A, late_ok=late_ok), mode=AcquireMode.MARK)
    late = await acquire(store, req)
    assert (late.decision, late.fence, late.replayed) == (AcquireDecision.MISSED, 0, False)
    held = await lease(store)
    assert held is not None
    assert held.fence == newer.fence  # the newer run's lease, untouched
    assert await watermark(store) == 101
    # C never won 100: a mark of it stays stale.
    await claim(store, 102, A)
    await acquire(store, request(102, A, prior=101))
    marked = dataclasses.replace(request(101, C), mode=AcquireMode.MARK)
    assert (await acquire(store, marked)).decision is AcquireDecision.STALE


async def test_a_late_tick_never_replaces_the_newer_run_holding_the_lease(store: Store) -> None:
    await claim(store, 100, A)
    await claim(store, 101, B)
    newer = await acquire(store, request(101, B, prior=100, overlap=Overlap.REPLACE))
    late = await acquire(store, request(100, A, overlap=Overlap.REPLACE))
    assert late.decision is AcquireDecision.SKIPPED_OVERLAP
    assert late.holder_fence == newer.fence
    held = await lease(store)
    assert held is not None
    assert held.fence == newer.fence


async def test_a_tick_no_decision_passed_stays_stale(store: Store) -> None:
    """The later decision covered 100 itself (its prior tick is older): it ran or recorded it."""
    await claim(store, 100, A)
    await claim(store, 101, B)
    await acquire(store, request(101, B, prior=99))
    assert (await acquire(store, request(100, A))).decision is AcquireDecision.STALE


async def test_only_the_claims_owner_may_decide_a_passed_tick_and_only_once(
    store: Store, backend: Backend
) -> None:
    await claim(store, 100, A)
    await claim(store, 101, B)
    await acquire(store, request(101, B, prior=100, overlap=Overlap.ALLOW))
    # C never won 100: stale, and the passed note stays for A.
    assert (await acquire(store, request(100, C))).decision is AcquireDecision.STALE
    first = await acquire(store, request(100, A, overlap=Overlap.ALLOW))
    assert first.decision is AcquireDecision.RUN
    # Taken off the list: with the claim's memo gone too, nothing decides it again.
    await backend.faults.forget_answer(Claim("j", 100, 60_000), A)
    assert (await acquire(store, request(100, A))).decision is AcquireDecision.STALE


async def test_a_decided_prior_claim_is_not_noted_passed(store: Store, backend: Backend) -> None:
    await claim(store, 100, A)
    await acquire(store, request(100, A))
    await claim(store, 101, B)
    await acquire(store, request(101, B, prior=100))
    # Noted passed, 100 would be decided again, late, once its remembered answer is gone.
    await backend.faults.forget_answer(Claim("j", 100, 60_000), A)
    reply: AcquireReply = await acquire(store, request(100, A))
    assert (reply.decision, reply.replayed) == (AcquireDecision.STALE, False)


# -- several decisions held back together (passed ranges) --------------------------------
#
# A Cluster slot moving between shards holds back every decision of its jobs until it has
# moved (TRYAGAIN), and a row lock another session holds on a job's row does the same on
# PostgreSQL; then the decisions come back in whatever order their retries come. The first
# to pass the watermark must leave every tick between the watermark and its own previous
# tick to whoever holds that tick's claim, not only its previous tick: before, the others
# were answered ``stale`` and never ran (the slot-migration fault test lost one this way).


async def test_every_tick_between_the_watermark_and_the_prior_is_left_to_its_winner(
    store: Store, backend: Backend
) -> None:
    await claim(store, 100, A)
    await acquire(store, request(100, A))
    for tick, owner in ((101, A), (102, B), (103, C), (104, D)):
        await claim(store, tick, owner)
    newest = await acquire(store, request(104, D, prior=103, overlap=Overlap.ALLOW))
    assert newest.decision is AcquireDecision.RUN
    # Not C's claim: stale, and the tick stays left to its winner.
    assert (await acquire(store, request(102, C))).decision is AcquireDecision.STALE
    fences = set()
    for tick, owner in ((102, B), (101, A), (103, C)):
        late = await acquire(store, request(tick, owner, overlap=Overlap.ALLOW))
        assert late.decision is AcquireDecision.RUN, (tick, late)
        fences.add(late.fence)
    assert len(fences) == 3
    assert await watermark(store) == 104
    # Each once: with its claim's remembered answer gone, nothing decides it again.
    await backend.faults.forget_answer(Claim("j", 102, 60_000), B)
    assert (await acquire(store, request(102, B))).decision is AcquireDecision.STALE


@pytest.mark.parametrize("first", ["backlog", "single"])
async def test_a_late_backlog_runs_the_ticks_left_to_its_claim_once(
    store: Store, first: str
) -> None:
    """C's one claim on 103 covers its backlog from 101 (catchup = all, after an outage);
    B, on time for 104, lost 103 to C and passed it with every tick from the watermark.
    Before, C's late decision ran 103 alone and 101-102, left in the passed range, ran
    nowhere (the Cluster failover test lost them). D's claim on 102, covering 101 too, is
    undecided as well: whichever decides first runs the ticks it covers, the other none."""
    await claim(store, 100, A)
    await acquire(store, request(100, A))
    await claim(store, 102, D)
    await claim(store, 103, C)
    await claim(store, 104, B)
    await acquire(store, request(104, B, prior=103, overlap=Overlap.ALLOW))
    backlog = dataclasses.replace(request(103, C, overlap=Overlap.ALLOW), run_tick_s=101)
    single = dataclasses.replace(request(102, D, overlap=Overlap.ALLOW), run_tick_s=101)
    one, two = (backlog, single) if first == "backlog" else (single, backlog)
    early = await acquire(store, one)
    assert (early.decision, early.late_from_s) == (AcquireDecision.RUN, 101)
    later = await acquire(store, two)
    if two is backlog:  # 103 is its own (passed): it runs, alone
        assert (later.decision, later.late_from_s) == (AcquireDecision.RUN, 103)
    else:  # 101-102 were run by C's decision
        assert later.decision is AcquireDecision.STALE
    again = await acquire(store, one)  # a retry is answered the same
    assert (again.replayed, again.fence, again.late_from_s) == (True, early.fence, 101)
    assert await watermark(store) == 104


async def test_a_late_backlog_answered_missed_takes_the_ticks_left_to_its_claim_once(
    store: Store,
) -> None:
    """As above, but C's plan runs nothing (catch-up skip: mode mark): answered missed, it
    takes its backlog's ticks 101-102 out of the passed range too, and says from which
    (late_from), for the caller to count them missed with 103. Before, they stayed in
    the range and no record counted them (the scheduler model with racers = 2, seed 41).
    D's decision of 102 then finds it taken: stale."""
    await claim(store, 100, A)
    await acquire(store, request(100, A))
    await claim(store, 102, D)
    await claim(store, 103, C)
    await claim(store, 104, B)
    await acquire(store, request(104, B, prior=103))
    mark = dataclasses.replace(request(103, C, late_ok=False), mode=AcquireMode.MARK)
    late = await acquire(store, dataclasses.replace(mark, run_tick_s=101))
    assert (late.decision, late.fence, late.late_from_s) == (AcquireDecision.MISSED, 0, 101)
    single = dataclasses.replace(request(102, D), run_tick_s=101)
    assert (await acquire(store, single)).decision is AcquireDecision.STALE
    again = await acquire(store, dataclasses.replace(mark, run_tick_s=101))
    assert (again.decision, again.late_from_s) == (AcquireDecision.MISSED, 101)


@pytest.mark.parametrize("late_ok", [False, True])
async def test_a_late_run_takes_its_backlog_from_the_oldest_tick_it_covers(
    store: Store, late_ok: bool
) -> None:
    """As above, but C's plan runs its newest tick alone (103: catch-up latest, or all with
    101-102 past the window): its run is for 103, and it names its backlog's oldest tick
    apart (first_tick 101). Decided late, it takes 101-102 out of the passed range with
    103: answered missed (latest) or run (all), from 101, its run still for 103. Before,
    the backlog was taken from the run's tick, and 101-102 stayed in the range, left to
    no one (the scheduler model with racers = 2 and catch-up latest)."""
    await claim(store, 100, A)
    await acquire(store, request(100, A, overlap=Overlap.ALLOW))
    await claim(store, 102, D)
    await claim(store, 103, C)
    await claim(store, 104, B)
    await acquire(store, request(104, B, prior=103, overlap=Overlap.ALLOW))
    run = dataclasses.replace(request(103, C, late_ok=late_ok), first_tick_s=101)
    late = await acquire(store, run)
    decision = AcquireDecision.RUN if late_ok else AcquireDecision.MISSED
    assert (late.decision, late.late_from_s) == (decision, 101)
    if late_ok:
        held = await lease(store)
        assert held is not None
        assert held.tick_s == 103, "the run is for the tick it fires, not the oldest taken"
    single = dataclasses.replace(request(102, D, overlap=Overlap.ALLOW), run_tick_s=101)
    assert (await acquire(store, single)).decision is AcquireDecision.STALE


async def test_a_decision_knowing_no_tick_before_leaves_the_ticks_below_its_own(
    store: Store,
) -> None:
    """A taker's decision (it names no prior tick) of 103, covering 103 alone, passes 101
    and 102 above the watermark: C, frozen since it won 101, decides it late and is
    answered missed, not stale. Before, nothing was noted, and 101 was neither run nor
    counted (the scheduler model with racers = 2, seed 41)."""
    await claim(store, 100, A)
    await acquire(store, request(100, A))
    await claim(store, 101, C)
    await claim(store, 103, B)
    taker = dataclasses.replace(
        request(103, B, late_ok=False), mode=AcquireMode.MARK, first_tick_s=103
    )
    assert (await acquire(store, taker)).decision is AcquireDecision.MARKED
    late = await acquire(store, request(101, C, late_ok=False))
    assert late.decision is AcquireDecision.MISSED
    # One that covers the ticks below its own leaves none of them (its plan decided them).
    await claim(store, 104, D)
    await claim(store, 106, D)
    covering = dataclasses.replace(request(106, D), first_tick_s=104)
    assert (await acquire(store, covering)).decision is AcquireDecision.SKIPPED_OVERLAP
    stale = await acquire(store, request(104, D, late_ok=False))
    assert stale.decision is AcquireDecision.STALE


async def test_a_tick_the_newer_decision_covered_is_not_left_to_anyone(store: Store) -> None:
    """Ticks after the caller's prior are the caller's plan (a catch-up): it decided them."""
    await claim(store, 100, A)
    await acquire(store, request(100, A))
    await claim(store, 102, B)
    await claim(store, 103, C)
    await acquire(store, request(103, C, prior=101))
    assert (await acquire(store, request(102, B))).decision is AcquireDecision.STALE


# -- queue one and a late older tick ------------------------------------------------------
#
# Queue one keeps the newest waiting tick (DESIGN.md section 4: a newer tick overwrites the
# waiting one). A tick decided late, after a newer one was queued, is the older of the two:
# before, it overwrote the queued newer tick (and reported it superseded), so the newest
# waiting tick was dropped and the older one ran in its place (the PostgreSQL row-lock
# fault test saw it; both stores did it). Now it is recorded skipped: the newer one waits.


async def test_a_late_older_tick_never_displaces_a_newer_queued_tick(store: Store) -> None:
    running = await acquire(store, request(99, A, overlap=Overlap.QUEUE_ONE))
    assert running.decision is AcquireDecision.RUN
    await claim(store, 100, A)
    await claim(store, 101, B)
    queued = await acquire(store, request(101, B, prior=100, overlap=Overlap.QUEUE_ONE))
    assert queued.decision is AcquireDecision.QUEUED
    late = await acquire(store, request(100, A, overlap=Overlap.QUEUE_ONE))
    assert (late.decision, late.superseded_tick_s) == (AcquireDecision.SKIPPED_OVERLAP, 0)
    assert late.holder_fence == running.fence
    handed = await store.release("j", running.fence, owner=A, lease_ttl_ms=5000)
    assert (handed.decision, handed.tick_s) == (ReleaseDecision.HANDED_ON, 101)
    assert handed.fence > running.fence


async def test_a_late_older_tick_replaces_an_even_older_queued_tick(store: Store) -> None:
    running = await acquire(store, request(98, A, overlap=Overlap.QUEUE_ONE))
    for tick, owner in ((99, C), (100, A), (101, B)):
        await claim(store, tick, owner)
    await acquire(store, request(101, B, prior=100, overlap=Overlap.QUEUE_ONE))
    # The queued 101 ran and was released: 99 waits (decided late, queued behind a run).
    handed = await store.release("j", running.fence, owner=A, lease_ttl_ms=5000)
    assert handed.tick_s == 101
    older = await acquire(store, request(99, C, overlap=Overlap.QUEUE_ONE))
    assert older.decision is AcquireDecision.QUEUED
    late = await acquire(store, request(100, A, overlap=Overlap.QUEUE_ONE))
    assert (late.decision, late.superseded_tick_s) == (AcquireDecision.QUEUED, 99)


async def test_a_late_older_tick_runs_before_a_newer_tick_queued_behind_a_dead_run(
    store: Store, backend: Backend
) -> None:
    """The run the newer tick waited for died: the late tick runs, and the newer one after it."""
    await acquire(store, request(99, A, overlap=Overlap.QUEUE_ONE))
    await claim(store, 100, A)
    await claim(store, 101, B)
    await acquire(store, request(101, B, prior=100, overlap=Overlap.QUEUE_ONE))
    await backend.faults.expire_lease("j")
    late = await acquire(store, request(100, A, overlap=Overlap.QUEUE_ONE))
    assert (late.decision, late.superseded_tick_s) == (AcquireDecision.RUN, 0)
    handed = await store.release("j", late.fence, owner=A, lease_ttl_ms=5000)
    assert (handed.decision, handed.tick_s) == (ReleaseDecision.HANDED_ON, 101)
    assert handed.fence > late.fence


async def test_a_grant_decided_again_after_its_lease_ran_out_keeps_a_newer_queued_tick(
    store: Store, backend: Backend
) -> None:
    """A's grant of 100 was never answered and its lease ran out, while 101 queued behind
    it: A's retry decides 100 again (late, a new fence) and 101 still waits behind it."""
    await claim(store, 100, A)
    first = await acquire(store, request(100, A, overlap=Overlap.QUEUE_ONE))
    assert first.decision is AcquireDecision.RUN
    await claim(store, 101, B)
    queued = await acquire(store, request(101, B, prior=100, overlap=Overlap.QUEUE_ONE))
    assert queued.decision is AcquireDecision.QUEUED
    await backend.faults.expire_lease("j")
    again = await acquire(store, request(100, A, overlap=Overlap.QUEUE_ONE))
    assert (again.decision, again.replayed, again.superseded_tick_s) == (
        AcquireDecision.RUN,
        False,
        0,
    )
    assert again.abandoned_fence == first.fence
    handed = await store.release("j", again.fence, owner=A, lease_ttl_ms=5000)
    assert (handed.decision, handed.tick_s) == (ReleaseDecision.HANDED_ON, 101)


@pytest.mark.parametrize("late_ok", [False, True])
async def test_a_passed_tick_whose_claim_is_gone_when_its_winner_decides_is_missed_once(
    store: Store, backend: Backend, late_ok: bool
) -> None:
    """A winner frozen right after its win, past its claim's lifetime (which outlasts the
    catch-up window), and thawed after others decided later ticks: the tick is answered
    missed (recorded), once, whatever the catch-up policy: no catch-up reaches that far.
    Answered stale, no record counted it (the scheduler model found it)."""
    await claim(store, 100, A)
    await claim(store, 101, B)
    await acquire(store, request(101, B, prior=100))
    await backend.faults.expire_claim(Claim("j", 100, 60_000))
    late = await acquire(store, request(100, A, late_ok=late_ok))
    assert (late.decision, late.fence) == (AcquireDecision.MISSED, 0)
    assert (await acquire(store, request(100, A, late_ok=late_ok))).decision is (
        AcquireDecision.STALE
    )
    # A tick no decision passed stays stale, its claim gone or not.
    await claim(store, 102, C)
    await acquire(store, request(103, D, prior=101))
    await backend.faults.expire_claim(Claim("j", 102, 60_000))
    assert (await acquire(store, request(102, C))).decision is AcquireDecision.STALE


@pytest.mark.parametrize("decided_before", [True, False])
async def test_a_prior_claim_gone_before_the_later_decision_is_left_to_its_winner(
    store: Store, backend: Backend, decided_before: bool
) -> None:
    """The claim of 100 ran out before anyone decided a later tick: its holder froze past
    the claim's lifetime (the scheduler model with racers = 2, seed 41: a node that took
    the claim over from a frozen winner froze too). B's decision of 101 (its prior tick
    100, which it lost) finds no claim. 100 is above the watermark, so no decision took
    it: it is left to its winner all the same, who is answered missed once. Before: stale,
    and no record counted 100. Without a watermark (a new or wiped store) a claim gone
    does not show that 100 was not decided (a wipe takes decided claims too): stale, as
    before, on Redis; PostgreSQL keeps a run-out row until it is swept, and it shows the
    claim undecided: missed."""
    if decided_before:
        await claim(store, 99, B)
        await acquire(store, request(99, B))
    await claim(store, 100, A)
    await backend.faults.expire_claim(Claim("j", 100, 60_000))
    await claim(store, 101, B)
    await acquire(store, request(101, B, prior=100))
    late = await acquire(store, request(100, A))
    if not decided_before and backend.name != "postgres":
        assert late.decision is AcquireDecision.STALE
        return
    assert (late.decision, late.fence) == (AcquireDecision.MISSED, 0)
    assert (await acquire(store, request(100, A))).decision is AcquireDecision.STALE


async def test_a_late_backlog_queued_behind_a_run_waits_with_its_own_tick(
    store: Store,
) -> None:
    """A late backlog queued behind a live run queues the tick it decided (queue one keeps
    the newest), never its plan's first tick, which another decision already took.

    B runs 103 and passed 101-102 (D's and C's claims undecided). D's late decision of 101
    queues it. C's claim on 102 covers 101 too (a catch-up backlog), but 101 is D's: before,
    C queued 101 again and reported 101 superseded (so 101 was recorded twice, once as
    superseded though it ran) while 102, recorded queued, never ran (the deep protocol
    model, seed 11). Now 102 waits and 101 is superseded by it."""
    await claim(store, 100, A)
    ran = await acquire(store, request(100, A, overlap=Overlap.QUEUE_ONE))
    await store.release("j", ran.fence, owner=A, lease_ttl_ms=5000)
    await claim(store, 101, D)
    await claim(store, 102, C)
    await claim(store, 103, B)
    running = await acquire(store, request(103, B, prior=102, overlap=Overlap.QUEUE_ONE))
    assert running.decision is AcquireDecision.RUN
    first = await acquire(store, request(101, D, overlap=Overlap.QUEUE_ONE))
    assert (first.decision, first.late_from_s) == (AcquireDecision.QUEUED, 101)
    backlog = dataclasses.replace(request(102, C, overlap=Overlap.QUEUE_ONE), run_tick_s=101)
    later = await acquire(store, backlog)
    assert (later.decision, later.late_from_s) == (AcquireDecision.QUEUED, 102)
    assert later.superseded_tick_s == 101
    handed = await store.release("j", running.fence, owner=B, lease_ttl_ms=5000)
    assert (handed.decision, handed.tick_s) == (ReleaseDecision.HANDED_ON, 102)
