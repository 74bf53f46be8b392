"""Manual triggers: asked once, read by every node, claimed by one, run through the lease.

A trigger is outstanding from its post until a decision removes it: decided once, whoever
claims it and however late (a trigger no longer outstanding is ``stale``), and swept
``missed`` by a tick's decision once older than the request's window.
"""

from __future__ import annotations

import anyio

from cronrace.model.policies import Outcome, Overlap
from cronrace.protocol import Answer, Release, Verdict
from cronrace.stores.contract import Store
from cronrace.stores.values import Claim
from tests.stores.contract.helpers import (
    CLAIM_TTL_MS,
    N2,
    cursor,
    decide,
    end,
    request,
    won,
)
from tests.stores.harness import Backend


async def test_a_trigger_asked_after_the_position_is_read_by_every_node(
    store: Store,
) -> None:
    position = await store.control_position()
    trigger_id = await store.request_trigger("j")
    entries = await store.read_control(position, block_ms=1)
    assert [fields for _id, fields in entries] == [{"op": "trigger", "job": "j", "id": trigger_id}]
    # Read again from there: every node gets it (reading takes nothing away).
    assert await store.read_control(position, block_ms=1) == entries
    # And from after it, nothing is new.
    (last_id, _fields) = entries[-1]
    assert await store.read_control(last_id, block_ms=1) == []


async def test_each_trigger_has_its_own_id(store: Store) -> None:
    position = await store.control_position()
    ids = [await store.request_trigger("j") for _ in range(3)]
    assert len(set(ids)) == 3
    entries = await store.read_control(position, block_ms=1)
    assert [fields["id"] for _id, fields in entries] == ids


async def test_a_trigger_runs_beside_the_schedule_and_never_moves_the_cursor(
    store: Store,
) -> None:
    await decide(store, request(100, fire=()))
    t1 = await store.request_trigger("j")
    trigger = await won(store, request(50, trigger_id=t1))
    assert (trigger.verdict, trigger.cursor_s) == (Verdict.RUN, 100)
    assert [(r.outcome, r.trigger_id) for r in trigger.records] == [(Outcome.GRANTED, t1)]
    assert await store.trigger_claimant("j", t1) == "n1"
    assert await cursor(store) == 100
    # The scheduled tick after it is decided as usual (and finds the trigger's run alive).
    tick = await decide(store, request(101, cursor=100, owner=N2))
    assert tick.verdict is Verdict.SKIPPED_OVERLAP
    assert await cursor(store) == 101


async def test_a_trigger_that_has_to_wait_is_handed_on_as_that_trigger(store: Store) -> None:
    running = await decide(store, request(100, overlap=Overlap.QUEUE_ONE))
    t1 = await store.request_trigger("j")
    queued = await won(store, request(120, owner=N2, overlap=Overlap.QUEUE_ONE, trigger_id=t1))
    assert queued.verdict is Verdict.QUEUED
    handed = await store.end_run(end(running.fence))
    assert (handed.decision, handed.tick_s, handed.trigger_id) == (Release.HANDED_ON, 120, t1)


async def test_a_queued_tick_supersedes_a_waiting_trigger_and_records_which(
    store: Store,
) -> None:
    await decide(store, request(100, overlap=Overlap.QUEUE_ONE))
    t1 = await store.request_trigger("j")
    await won(store, request(120, overlap=Overlap.QUEUE_ONE, trigger_id=t1))
    newer = await decide(store, request(101, cursor=100, overlap=Overlap.QUEUE_ONE, owner=N2))
    assert newer.verdict is Verdict.QUEUED
    assert [(r.tick_s, r.outcome, r.trigger_id) for r in newer.records] == [
        (120, Outcome.SKIPPED_OVERLAP, t1),
        (101, Outcome.QUEUED, None),
    ]


async def test_a_trigger_nobody_claimed_has_no_claimant(store: Store) -> None:
    trigger_id = await store.request_trigger("j")
    assert await store.trigger_claimant("j", trigger_id) is None
    assert await store.claim([Claim("j", 0, 60_000, trigger_id)], N2) == [True]
    assert await store.trigger_claimant("j", trigger_id) == "n2"


async def runs_again(store: Store, tick: int, trigger_id: str) -> bool:
    """Whether N2, claiming ``trigger_id`` anew, is granted a run of it."""
    claim = Claim("j", tick, CLAIM_TTL_MS, trigger_id)
    if await store.claim([claim], N2) != [True]:
        return False  # the claim still holds it
    reply = await decide(store, request(tick, owner=N2, trigger_id=trigger_id))
    assert reply.answer in (Answer.DECIDED, Answer.STALE), reply
    if reply.verdict is Verdict.RUN:
        await store.end_run(end(reply.fence, owner=N2))
    return reply.verdict is Verdict.RUN


async def test_a_trigger_is_decided_once_also_after_its_claim_ran_out(
    store: Store, backend: Backend
) -> None:
    # N1 ran trigger t1; N2 read it in time but was paused before claiming it, past the
    # claim's lifetime: it wins the claim anew, and finds t1 no longer outstanding.
    t1 = await store.request_trigger("j")
    first = await won(store, request(100, trigger_id=t1))
    assert first.verdict is Verdict.RUN
    await store.end_run(end(first.fence))
    await backend.faults.expire_claim(Claim("j", 100, CLAIM_TTL_MS, t1))
    assert not await runs_again(store, 160, t1)
    # Other triggers run, and t1 stays decided however many came after it.
    for n in range(20):
        assert await runs_again(store, 200 + n, await store.request_trigger("j")), n
    await backend.faults.expire_claim(Claim("j", 160, CLAIM_TTL_MS, t1))
    assert not await runs_again(store, 300, t1)
    granted = [r for r in await store.history("j", 100) if r.outcome is Outcome.GRANTED]
    assert [r.trigger_id for r in granted].count(t1) == 1


async def test_a_trigger_whose_grant_ran_out_unstarted_never_starts(
    store: Store, backend: Backend
) -> None:
    # Its own retry after a lost answer, the lease having run out before: its answer
    # again, not to start; the job's next decision records it abandoned.
    t1 = await store.request_trigger("j")
    first = await won(store, request(100, trigger_id=t1))
    await backend.faults.expire_lease("j")
    again = await decide(store, request(100, trigger_id=t1))
    assert (again.fence, again.replayed, again.renewed) == (first.fence, True, False)
    later = await decide(store, request(101, owner=N2))
    assert [(r.outcome, r.trigger_id, r.fence) for r in later.records] == [
        (Outcome.ABANDONED, t1, first.fence),
        (Outcome.GRANTED, None, later.fence),
    ]


async def test_a_trigger_outstanding_past_its_window_is_swept_missed(store: Store) -> None:
    t1 = await store.request_trigger("j")
    await anyio.sleep(0.01)  # older than the window below
    swept = await decide(store, request(100, trigger_window_ms=5))
    assert [(r.outcome, r.trigger_id) for r in swept.records] == [
        (Outcome.MISSED, t1),
        (Outcome.GRANTED, None),
    ]
    # Swept, it is no longer outstanding: whoever claims it finds it stale.
    late = await won(store, request(100, owner=N2, trigger_id=t1))
    assert late.answer is Answer.STALE
    # A trigger inside the window is left for its own decision.
    t2 = await store.request_trigger("j")
    kept = await decide(store, request(101, cursor=100, trigger_window_ms=60_000))
    assert [r.outcome for r in kept.records] == [Outcome.SKIPPED_OVERLAP]
    assert (await won(store, request(101, trigger_id=t2, overlap=Overlap.ALLOW))).fence > 0
