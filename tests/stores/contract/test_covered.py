"""A won tick whose decision comes after a later tick's decision is covered, and decided once.

Node A wins tick 100, but its decision reaches the store only after node B, on time for
tick 101, decided (99, 101] from the cursor 99: B's decision recorded 100 (granted under
catch-up ``all``, else ``missed``) in the same step. A's late decision is answered
``covered`` and writes nothing, whatever its policy: every tick is decided and recorded
once. A winner that froze past its claim's lifetime leaves its tick to be claimed again;
what it sends when it thaws is covered too (the old protocol's passed ticks and
takeovers are no longer needed for this).
"""

from __future__ import annotations

import pytest

from cronrace.model.policies import Outcome, Overlap
from cronrace.protocol import Answer, Verdict
from cronrace.stores.contract import Store
from cronrace.stores.values import Claim, Owner
from tests.stores.contract.helpers import CLAIM_TTL_MS, cursor, decide, lease, request, won
from tests.stores.harness import Backend

A, B, C = Owner("a", "1"), Owner("b", "2"), Owner("c", "3")


async def claim(store: Store, tick: int, owner: Owner) -> None:
    assert await store.claim([Claim("j", tick, CLAIM_TTL_MS)], owner) == [True]


async def ticks_recorded(store: Store) -> list[int]:
    """Every tick the job's decisions recorded (a range counts each of its ticks), sorted."""
    out = []
    for r in await store.history("j", 100):
        if r.outcome is not Outcome.DATA_LOST:
            out += list(range(r.tick_s, max(r.tick_s, r.last_tick_s) + 1))
    return sorted(out)


@pytest.mark.parametrize("fire", [(100, 101), (101,)], ids=["catchup-all", "latest"])
async def test_a_won_tick_decided_by_a_later_decision_is_covered(
    store: Store, fire: tuple[int, ...]
) -> None:
    await decide(store, request(99, fire=()))
    await claim(store, 100, A)
    await claim(store, 101, B)
    later = await decide(store, request(101, cursor=99, fire=fire, owner=B))
    assert later.answer is Answer.DECIDED
    late = await decide(store, request(100, cursor=99, owner=A))
    assert (late.answer, late.cursor_s, late.fence, late.records) == (Answer.COVERED, 101, 0, ())
    assert await cursor(store) == 101  # a late decision never moves the cursor back
    assert await ticks_recorded(store) == [99, 100, 101]
    # Covered writes no answer: the claim stays undecided, its retry is covered again.
    again = await decide(store, request(100, cursor=99, owner=A))
    assert (again.answer, again.replayed) == (Answer.COVERED, False)


async def test_a_late_tick_never_replaces_the_newer_run_holding_the_lease(store: Store) -> None:
    await decide(store, request(99, fire=()))
    await claim(store, 100, A)
    await claim(store, 101, B)
    newer = await decide(store, request(101, cursor=99, overlap=Overlap.REPLACE, owner=B))
    late = await decide(store, request(100, cursor=99, overlap=Overlap.REPLACE, owner=A))
    assert late.answer is Answer.COVERED
    held = await lease(store)
    assert held is not None
    assert held.fence == newer.fence


async def test_a_frozen_winners_tick_is_claimed_again_and_decided_once(
    store: Store, backend: Backend
) -> None:
    """A wins 100 and freezes past its claim's lifetime; C claims 100 anew and decides it.
    A's decision, when it thaws, is covered; C's retry replays C's answer."""
    tick = Claim("j", 100, CLAIM_TTL_MS)
    await claim(store, 100, A)
    assert await store.claim([tick], C) == [False]
    await backend.faults.expire_claim(tick)
    taken = await won(store, request(100, owner=C))
    assert taken.verdict is Verdict.RUN
    late = await decide(store, request(100, owner=A))
    assert (late.answer, late.fence) == (Answer.COVERED, 0)
    holder = await lease(store)
    assert holder is not None
    assert (holder.fence, holder.owner) == (taken.fence, C)
    again = await decide(store, request(100, owner=C))
    assert (again.verdict, again.fence, again.replayed) == (Verdict.RUN, taken.fence, True)
    assert await ticks_recorded(store) == [100]


async def test_a_winner_that_lost_its_claim_before_deciding_is_lost(
    store: Store, backend: Backend
) -> None:
    """Frozen before its decision, A's claim ran out and C holds the tick's claim, not yet
    decided: A's decision is lost and writes nothing; C decides the tick."""
    tick = Claim("j", 100, CLAIM_TTL_MS)
    await claim(store, 100, A)
    await backend.faults.expire_claim(tick)
    await claim(store, 100, C)
    late = await decide(store, request(100, owner=A))
    assert (late.answer, late.cursor_s) == (Answer.LOST, None)
    assert await store.history("j", 10) == []
    taken = await decide(store, request(100, owner=C))
    assert taken.verdict is Verdict.RUN


async def test_a_decision_covers_every_tick_since_the_cursor_once(store: Store) -> None:
    """I-cursor: every tick of (origin, cursor] has exactly one decision record."""
    await decide(store, request(100))
    await decide(store, request(104, cursor=100, fire=(103, 104), owner=B))  # skipped
    await decide(store, request(110, cursor=104, fire=(), owner=C))
    await decide(store, request(103, owner=A))  # covered
    assert await ticks_recorded(store) == list(range(100, 111))
