"""A won claim whose winner died before deciding it is taken over, and decided once.

Node A wins tick 100 and freezes (SIGSTOP, a VM pause) or dies before its decision
reaches the store. Every other node lost that claim and moved on: before, the tick was
lost with A. Now a live node that sees A's heartbeat expire takes the claim over with a
compare-and-set (``take_over``: only a claim still naming a process of a departed node,
and holding no decision, changes owner), claims it again with ``read_back`` and decides
it. A, should it thaw, finds another owner under its claim: its late decision is answered
``stale``, so the tick is decided once.
"""

from __future__ import annotations

import anyio

from cronrace.model.policies import Overlap
from cronrace.stores.contract import Store
from cronrace.stores.values import AcquireDecision, AcquireReply, Claim, Owner
from tests.stores.contract.helpers import CLAIM_TTL_MS, acquire, lease, request, watermark, won
from tests.stores.harness import Backend

A, B, C = Owner("a", "1"), Owner("b", "2"), Owner("c", "3")
TICK = Claim("j", 100, CLAIM_TTL_MS)


async def claimed_by_a(backend: Backend) -> tuple[Store, Store]:
    """A wins tick 100 and decides nothing; B is a live node that lost it."""
    a, b = await backend.node(), await backend.node()
    assert await a.claim([TICK], A) == [True]
    assert await b.claim([TICK], B) == [False]
    return a, b


async def test_a_departed_winners_claim_is_taken_over_and_its_late_decision_refused(
    backend: Backend,
) -> None:
    a, b = await claimed_by_a(backend)
    assert await b.take_over([TICK], {"a"}, B) == [A]
    assert await b.resolve_claims([TICK], B) == [True]  # read back: the claim is B's now
    taken = await acquire(b, request(100, owner=B))
    assert taken.decision is AcquireDecision.RUN
    late = await acquire(a, request(100, owner=A))  # A thaws and sends its decision
    assert (late.decision, late.fence) == (AcquireDecision.STALE, 0)
    holder = await lease(b)
    assert holder is not None
    assert (holder.fence, holder.owner) == (taken.fence, B)
    assert await watermark(b) == 100
    again = await acquire(b, request(100, owner=B))  # the taker's retry replays its answer
    assert (again.decision, again.fence, again.replayed) == (AcquireDecision.RUN, taken.fence, True)


async def test_a_frozen_winner_that_decides_before_the_taker_keeps_nothing(
    backend: Backend,
) -> None:
    """Taken over, then the old winner's decision arrives before the taker's: refused, and
    the taker still decides the tick (it would otherwise have been decided by nobody)."""
    a, b = await claimed_by_a(backend)
    assert await b.take_over([TICK], {"a"}, B) == [A]
    late = await acquire(a, request(100, owner=A))
    assert late.decision is AcquireDecision.STALE
    assert await watermark(a) is None  # the refusal decided nothing
    taken = await acquire(b, request(100, owner=B))
    assert taken.decision is AcquireDecision.RUN


async def test_only_claims_of_departed_nodes_without_a_decision_are_taken(
    backend: Backend,
) -> None:
    a, b = await claimed_by_a(backend)
    missing = Claim("j", 99, CLAIM_TTL_MS)
    assert await b.take_over([TICK, missing], {"c"}, B) == [None, None]  # A is alive
    assert await b.take_over([TICK], set(), B) == [None]
    decided = await acquire(a, request(100, owner=A))
    assert decided.decision is AcquireDecision.RUN
    assert await b.take_over([TICK, missing], {"a"}, B) == [None, None]  # decided, absent
    again = await acquire(a, request(100, owner=A))
    assert (again.decision, again.fence, again.replayed) == (
        AcquireDecision.RUN,
        decided.fence,
        True,
    )


async def test_of_several_takers_one_takes_the_claim(backend: Backend) -> None:
    _a, b = await claimed_by_a(backend)
    c = await backend.node()
    results: dict[str, list[Owner | None]] = {}

    async def take(name: str, store: Store, owner: Owner) -> None:
        results[name] = await store.take_over([TICK], {"a"}, owner)

    async with anyio.create_task_group() as tg:
        tg.start_soon(take, "b", b, B)
        tg.start_soon(take, "c", c, C)
    assert sorted(results.values(), key=repr) == [[None], [A]]
    winner, loser = (b, B) if results["b"] == [A] else (c, C)
    other, other_owner = (c, C) if winner is b else (b, B)
    assert await winner.resolve_claims([TICK], loser) == [True]
    assert await other.resolve_claims([TICK], other_owner) == [False]
    assert await winner.take_over([TICK], {"a"}, other_owner) == [None]  # A holds it no more


async def test_a_taken_tick_that_a_later_decision_passed_runs_late_once(
    backend: Backend,
) -> None:
    """A wins 100 and freezes; B wins and decides 101, passing 100 (A's claim undecided);
    C takes 100 over and runs it late (catchup = all). A's answer, when it thaws: stale."""
    a, b = await claimed_by_a(backend)
    c = await backend.node()
    assert await b.claim([Claim("j", 101, CLAIM_TTL_MS)], B) == [True]
    later = await acquire(b, request(101, owner=B, prior=100, overlap=Overlap.ALLOW))
    assert later.decision is AcquireDecision.RUN
    assert await c.take_over([TICK], {"a"}, C) == [A]
    assert await c.resolve_claims([TICK], C) == [True]
    late = await acquire(c, request(100, owner=C, overlap=Overlap.ALLOW, late_ok=True))
    assert (late.decision, late.prev_watermark_s) == (AcquireDecision.RUN, 101)
    assert late.fence > later.fence
    refused = await acquire(a, request(100, owner=A, overlap=Overlap.ALLOW, late_ok=True))
    assert refused.decision is AcquireDecision.STALE
    assert await watermark(a) == 101


async def test_a_replayed_grant_that_fences_above_it_followed_does_not_start(
    store: Store, backend: Backend
) -> None:
    """The deep model's second finding: a failover to a replica that lagged put back a
    grant whose answer was lost, with its lease, though fences above it had been handed
    out on the primary it replaced. A retry got the grant back and started it (its lease
    still held its fence): a run with an older fence after a newer one. Now a replayed
    grant starts only while no fence above it is known: here the counter knows one."""
    first = await won(store, request())
    await backend.faults.set_fence_counter("j", first.fence + 1000)
    again = await acquire(store, request())
    assert isinstance(again, AcquireReply)
    assert (again.decision, again.fence, again.replayed, again.renewed) == (
        AcquireDecision.RUN,
        first.fence,
        True,
        False,
    )
