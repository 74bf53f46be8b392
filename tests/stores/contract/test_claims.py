"""Claims: one winner per tick, one round trip per wake-up, and a lost reply read back."""

from __future__ import annotations

from dataclasses import replace

from cronrace.stores.contract import Store
from cronrace.stores.values import Claim, ClaimOutcome, Owner
from tests.stores.contract.helpers import decide, request
from tests.stores.harness import Backend

A, B = Owner.parse("a:1"), Owner.parse("b:1")


async def read_back(store: Store, claim: Claim, owner: Owner) -> bool:
    """Whether ``owner`` wins ``claim`` read back (its earlier reply was lost)."""
    (reply,) = await store.claim_each([claim], owner, read_back=True)
    return reply.outcome is ClaimOutcome.WON


async def test_claim_is_won_by_exactly_one_node(store: Store) -> None:
    claims = [Claim("j", 100, 5000), Claim("k", 100, 5000)]
    assert await store.claim(claims, A) == [True, True]
    assert await store.claim(claims, B) == [False, False]
    assert await store.read_claims(claims, A) == [True, True]
    assert await store.read_claims(claims, B) == [False, False]


async def test_each_claim_of_a_wake_up_is_decided_on_its_own(store: Store) -> None:
    await store.claim([Claim("k", 100, 5000)], B)
    replies = await store.claim_each(
        [Claim("j", 100, 5000), Claim("k", 100, 5000), Claim("k", 101, 5000)], A
    )
    assert [reply.outcome for reply in replies] == [
        ClaimOutcome.WON,
        ClaimOutcome.LOST,
        ClaimOutcome.WON,
    ]


async def test_a_wake_up_claims_every_due_job_in_one_round_trip(
    store: Store, backend: Backend
) -> None:
    claims = [Claim(f"job{index}", 100, 5000) for index in range(60)]
    async with backend.round_trips() as trips:
        won = await store.claim(claims, A)
    assert won == [True] * 60
    # One per server holding some of the jobs (a Cluster's shards answer in parallel).
    assert 1 <= trips.count <= backend.shards
    async with backend.round_trips() as trips:
        lost = await store.claim(claims, B)
    assert lost == [False] * 60
    assert 1 <= trips.count <= backend.shards


async def test_a_claim_read_back_finds_a_claim_whose_reply_was_lost(store: Store) -> None:
    await store.claim([Claim("j", 100, 5000)], A)
    # Node a retries after an error: the read-back says it had won.
    assert await read_back(store, Claim("j", 100, 5000), A)
    assert not await read_back(store, Claim("j", 100, 5000), B)
    assert await read_back(store, Claim("j", 101, 5000), B)


async def test_a_claim_is_read_back_by_its_own_process_only(store: Store) -> None:
    """Another process of the same node id (a restart) did not win what this one did."""
    await store.claim([Claim("j", 100, 5000)], A)
    assert await store.read_claims([Claim("j", 100, 5000)], Owner("a", "2")) == [False]
    assert not await read_back(store, Claim("j", 100, 5000), Owner("a", "2"))
    assert await store.read_claims([Claim("j", 101, 5000)], A) == [False]  # never claimed


async def test_a_claim_holding_its_decision_is_never_won_again(store: Store) -> None:
    """Read back, a decided claim is lost even to its own process: it was decided once.

    The remembered answer serves retries of that decision; a second race of the same tick
    (racers = k: its racers left, and it was raced again) that counted it won decided it
    again, and a finished run's grant, its lease gone, was granted anew (a tick ran twice).
    Reading it (a forced stop accounting for its wake-up) still finds whose it is.
    """
    claim = Claim("j", 100, 5000)
    assert await store.claim([claim], A) == [True]
    await decide(store, request(100, owner=A))
    assert not await read_back(store, claim, A)
    assert not await read_back(store, claim, B)
    assert await store.read_claims([claim], A) == [True]


async def test_only_the_claims_asked_are_read_back(store: Store) -> None:
    """``Claim.read_back`` reads one claim back; the others of the call are raced as usual."""
    held, ambiguous = Claim("j", 100, 5000), Claim("k", 100, 5000)
    assert await store.claim([held], A) == [True]
    assert await store.claim([ambiguous], A) == [True]  # its reply "lost"
    replies = await store.claim_each([held, replace(ambiguous, read_back=True)], A)
    assert [r.outcome for r in replies] == [ClaimOutcome.LOST, ClaimOutcome.WON]


async def test_a_trigger_claims_its_own_key_beside_the_tick(store: Store) -> None:
    tick, trigger = Claim("j", 100, 5000), Claim("j", 100, 5000, trigger_id="t1")
    assert await store.claim([tick], A) == [True]
    assert await store.claim([trigger], B) == [True]
    assert await store.claim([trigger], A) == [False]
    assert await store.trigger_claimant("j", "t1") == "b"
    assert await store.trigger_claimant("j", "t2") is None
