"""Decisions held back together and answered in any order: every won tick is still decided.

A Cluster slot moving between shards holds back every decision of its jobs until it has
moved (``TRYAGAIN``); then they reach Redis in whatever order their retries come. The
first to pass the watermark must leave every tick between the watermark and its own
previous tick to whoever holds that tick's claim (``passed_ranges``), not only its
previous tick (``passed``): before, the others were answered ``stale`` and never ran
(the slot-migration fault test lost one tick this way).
"""

from __future__ import annotations

from cronrace.model.policies import Overlap
from cronrace.stores.redis import Store
from cronrace.stores.values import AcquireDecision, Claim, Owner
from tests.stores.contract.helpers import acquire, request, watermark

A, B, C, D = (Owner.parse(text) for text in ("a:1", "b:2", "c:3", "d:4"))


async def claim(store: Store, tick: int, owner: Owner) -> None:
    assert await store.claim([Claim("j", tick, 60_000)], owner) == [True]


async def test_every_tick_between_the_watermark_and_the_prior_is_left_to_its_winner(
    store: Store,
) -> None:
    await claim(store, 100, A)
    await acquire(store, request(100, owner=A))
    for tick, owner in ((101, A), (102, B), (103, C), (104, D)):
        await claim(store, tick, owner)
    newest = await acquire(store, request(104, owner=D, prior=103, overlap=Overlap.ALLOW))
    assert newest.decision is AcquireDecision.RUN
    # Not C's claim: stale, and the tick stays left to its winner.
    assert (await acquire(store, request(102, owner=C))).decision is AcquireDecision.STALE
    fences = set()
    for tick, owner in ((102, B), (101, A), (103, C)):
        late = await acquire(store, request(tick, owner=owner, overlap=Overlap.ALLOW, late_ok=True))
        assert late.decision is AcquireDecision.RUN, (tick, late)
        fences.add(late.fence)
    assert len(fences) == 3
    assert await watermark(store) == 104
    # Each once: with its claim's remembered answer gone, nothing decides it again.
    await store.client.set(store.keys.claim("j", 102), str(B))
    assert (await acquire(store, request(102, owner=B))).decision is AcquireDecision.STALE


async def test_a_tick_the_newer_decision_covered_is_not_left_to_anyone(store: Store) -> None:
    """Ticks after the caller's prior are the caller's plan (a catch-up): it decided them."""
    await claim(store, 100, A)
    await acquire(store, request(100, owner=A))
    await claim(store, 102, B)
    await claim(store, 103, C)
    await acquire(store, request(103, owner=C, prior=101))
    assert (await acquire(store, request(102, owner=B))).decision is AcquireDecision.STALE
