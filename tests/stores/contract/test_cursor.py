"""The dense cursor's store calls where the differential tests do not look: batches across
jobs and shards, claims read back after a decision, manual triggers posted by an operator,
a run's whole record, and the history's cap.

The differential tests (``tests/stores/differential/``) hold each call to the reference
one job at a time; these hold what only a store shows.
"""

from __future__ import annotations

from cronrace.model.policies import Outcome, Overlap
from cronrace.model.records import RunRecord
from cronrace.protocol import (
    Answer,
    DecideReply,
    DecideRequest,
    Release,
    Renewal,
    RenewRequest,
    Verdict,
)
from cronrace.stores.contract import Store
from cronrace.stores.values import Claim, ClaimOutcome, Owner, RunEnd
from tests.stores.harness import Backend

A, B = Owner.parse("a:1"), Owner.parse("b:1")
PERIOD_S = 60


def decision(
    job: str,
    tick_s: int,
    *,
    cursor_s: int | None = None,
    owner: Owner = A,
    fire: tuple[int, ...] | None = None,
    overlap: Overlap = Overlap.SKIP,
    trigger_id: str | None = None,
    history: int = 0,
) -> DecideRequest:
    """The decision of ``tick_s`` from ``cursor_s`` (None: a first decision, from the tick
    before those it fires), firing ``fire`` (the tick alone unless told)."""
    fire_s = fire if fire is not None else (tick_s,)
    from_s = cursor_s if cursor_s is not None else fire_s[0] - PERIOD_S
    return DecideRequest(
        job=job,
        tick_s=tick_s,
        cursor_s=cursor_s,
        from_s=from_s,
        fire_s=fire_s,
        missed=(),
        owner=str(owner),
        overlap=overlap,
        lease_ttl_ms=5000,
        claim_ttl_ms=60_000,
        trigger_id=trigger_id,
        history=history,
    )


async def decide(store: Store, request: DecideRequest) -> DecideReply:
    (reply,) = await store.decide([request])
    assert isinstance(reply, DecideReply), reply
    return reply


async def test_a_batch_of_decisions_across_jobs_is_one_round_trip_per_shard(
    store: Store, backend: Backend
) -> None:
    jobs = [f"job{index}" for index in range(40)]
    await store.claim([Claim(job, 600, 5000) for job in jobs], A)
    async with backend.round_trips() as trips:
        replies = await store.decide([decision(job, 600) for job in jobs])
    assert 1 <= trips.count <= backend.shards
    decided = [r for r in replies if isinstance(r, DecideReply)]
    assert [(r.answer, r.verdict) for r in decided] == [(Answer.DECIDED, Verdict.RUN)] * 40
    assert len({r.fence for r in decided}) == 40
    assert await store.cursors([*jobs, "never"]) == {**dict.fromkeys(jobs, 600), "never": None}
    # Sent again (a lost answer), the whole batch replays, one round trip per shard again.
    async with backend.round_trips() as trips:
        again = await store.decide([decision(job, 600) for job in jobs])
    assert 1 <= trips.count <= backend.shards
    assert [getattr(r, "fence", r) for r in again] == [r.fence for r in decided]
    assert all(isinstance(r, DecideReply) and r.replayed and r.renewed for r in again)


async def test_a_decided_claim_read_back_is_not_won_again(store: Store) -> None:
    claim = Claim("j", 600, 5000)
    assert await store.claim([claim], A) == [True]
    (read,) = await store.claim_each([claim], A, read_back=True)
    assert read.outcome is ClaimOutcome.WON  # undecided: a lost reply's claim is ours
    await decide(store, decision("j", 600))
    (read,) = await store.claim_each([claim], A, read_back=True)
    assert read.outcome is ClaimOutcome.LOST  # decided: its memo is for retries only
    assert await store.read_claims([claim], A) == [True]


async def test_a_claim_held_by_another_owner_is_lost_and_writes_nothing(store: Store) -> None:
    await store.claim([Claim("j", 600, 5000)], B)
    reply = await decide(store, decision("j", 600, owner=A))
    assert reply.answer is Answer.LOST
    assert await store.cursors(["j"]) == {"j": None}
    assert await store.history("j", 10) == []


async def test_a_posted_trigger_is_decided_once(store: Store, backend: Backend) -> None:
    await decide(store, decision("j", 600))
    trigger_id = await store.request_trigger("j")
    first = await decide(store, decision("j", 630, trigger_id=trigger_id, overlap=Overlap.ALLOW))
    assert (first.answer, first.verdict) == (Answer.DECIDED, Verdict.RUN)
    assert first.cursor_s == 600  # a trigger leaves the cursor alone
    (granted,) = first.records
    assert (granted.outcome, granted.trigger_id) == (Outcome.GRANTED, trigger_id)
    # Another node read it late and won its claim anew once the first claim had run out:
    # the trigger is no longer outstanding.
    await backend.faults.expire_claim(Claim("j", 630, 5000, trigger_id=trigger_id))
    again = await decide(store, decision("j", 630, trigger_id=trigger_id, owner=B))
    assert again.answer is Answer.STALE
    assert await store.cursors(["j"]) == {"j": 600}
    outcomes = [r.outcome for r in await store.history("j", 10)]
    assert outcomes == [Outcome.GRANTED, Outcome.GRANTED]


async def test_a_trigger_nobody_posted_is_stale(store: Store) -> None:
    reply = await decide(store, decision("j", 630, trigger_id="0123456789abcdef"))
    assert reply.answer is Answer.STALE
    assert await store.history("j", 10) == []


async def test_a_run_end_writes_its_whole_record_and_hands_on_its_next_tick(store: Store) -> None:
    ticks = (540, 600)
    grant = await decide(store, decision("j", 600, cursor_s=None, fire=ticks))
    assert grant.ticks_s == ticks
    assert await store.renew_lease("j", RenewRequest(grant.fence, 5000)) is Renewal.RENEWED
    record = RunRecord(
        "j", 540, "a", Outcome.ERROR, grant.fence, 1_000, 2_000, "boom", detail={"rows": 3}
    )
    ended = await store.end_run(RunEnd("j", grant.fence, A, 5000, record, 0))
    assert (ended.decision, ended.tick_s) == (Release.HANDED_ON, 600)
    assert ended.fence > grant.fence
    (newest, *_rest) = await store.history("j", 10)
    assert newest == record  # times, error and detail as the run wrote them
    # The old fence no longer holds the lease: a retry writes nothing.
    retried = await store.end_run(RunEnd("j", grant.fence, A, 5000, record, 0))
    assert retried.decision is Release.NOT_OWNER
    assert await store.renew_lease("j", RenewRequest(grant.fence, 5000)) is Renewal.TAKEN
    done = await store.end_run(RunEnd("j", ended.fence, A, 5000, None, 0))
    assert done.decision is Release.RELEASED
    assert await store.renew_lease("j", RenewRequest(ended.fence, 5000)) is Renewal.GONE


async def test_the_history_is_kept_to_the_requests_cap_newest_first(store: Store) -> None:
    await store.set_paused("j", True)
    cursor = None
    for batch in range(3):  # every paused tick is recorded: 100 records a decision
        tick_s = (batch + 1) * 100 * PERIOD_S
        fire = tuple(range(tick_s - 99 * PERIOD_S, tick_s + 1, PERIOD_S))
        reply = await decide(store, decision("j", tick_s, cursor_s=cursor, fire=fire, history=100))
        assert (reply.verdict, len(reply.records)) == (Verdict.SKIPPED_PAUSED, 100)
        cursor = tick_s
    kept = await store.history("j", 1000)
    # The cap is approximate (Redis trims whole nodes of its stream) but bounds the history.
    assert 100 <= len(kept) < 300
    ticks = [r.tick_s for r in kept]
    assert ticks == list(range(300 * PERIOD_S, 0, -PERIOD_S))[: len(kept)]


async def test_runs_ending_together_share_one_round_trip_per_shard(
    store: Store, backend: Backend
) -> None:
    jobs = [f"job{index}" for index in range(12)]
    replies = await store.decide([decision(job, 600) for job in jobs])
    fences = [r.fence for r in replies if isinstance(r, DecideReply)]
    assert len(fences) == 12
    ends = [
        RunEnd(job, fence, A, 5000, RunRecord(job, 600, "a", Outcome.OK, fence), 10)
        for job, fence in zip(jobs, fences, strict=True)
    ]
    ends[0] = RunEnd(jobs[0], fences[0] + 1, A, 5000, ends[0].record, 10)  # not its fence
    async with backend.round_trips() as trips:
        ended = await store.end_runs(ends)
    assert 1 <= trips.count <= backend.shards
    assert [getattr(r, "decision", r) for r in ended] == [Release.NOT_OWNER] + [
        Release.RELEASED
    ] * 11
    assert [r.outcome for r in (await store.histories(jobs[:2], 10))[jobs[1]]] == [
        Outcome.OK,
        Outcome.GRANTED,
    ]
    assert (await store.histories(jobs[:1], 10))[jobs[0]][0].outcome is Outcome.GRANTED


async def test_the_status_counters_count_the_ticks_not_run(store: Store) -> None:
    await decide(store, decision("j", 600, fire=(600,), overlap=Overlap.QUEUE_ONE))
    reply = await decide(
        store, decision("j", 780, cursor_s=600, fire=(660, 720, 780), overlap=Overlap.QUEUE_ONE)
    )
    assert reply.verdict is Verdict.QUEUED
    (state,) = await store.job_states(["j"])
    assert state.counters == {"skipped_overlap": 2, "queued": 1}
