"""A run's side of the store: renewal, release, hand-on, and its record written once."""

from __future__ import annotations

from cronrace.model.policies import Outcome, Overlap
from cronrace.model.records import RunRecord
from cronrace.protocol import Release, ReleaseReply, Renewal, RenewRequest
from cronrace.stores.contract import Store
from cronrace.stores.values import RunEnd
from tests.stores.contract.helpers import N1, N2, decide, end, lease, request
from tests.stores.harness import Backend


def renewal(fence: int) -> RenewRequest:
    return RenewRequest(fence, 5000)


async def test_renewal_extends_the_lease_of_its_fence_only(store: Store, backend: Backend) -> None:
    granted = await decide(store, request(100))
    await backend.faults.age_lease("j", 1000)
    assert await store.renew_lease("j", renewal(granted.fence)) is Renewal.RENEWED
    held = await lease(store)
    assert held is not None
    assert held.ttl_ms > 4000
    assert await store.renew_lease("j", renewal(granted.fence + 1)) is Renewal.TAKEN
    await backend.faults.expire_lease("j")
    assert await store.renew_lease("j", renewal(granted.fence)) is Renewal.GONE


async def test_release_deletes_the_lease_only_for_its_fence(store: Store) -> None:
    first = await decide(store, request(tick=100))
    assert (await store.end_run(end(first.fence + 1))).decision is Release.NOT_OWNER
    assert (await store.end_run(end(first.fence))).decision is Release.RELEASED
    assert await lease(store) is None
    assert await store.renew_lease("j", renewal(first.fence)) is Renewal.GONE


async def test_release_continues_a_catch_up_under_the_same_grant(store: Store) -> None:
    first = await decide(store, request(tick=101, fire=(100, 101)))
    reply = await store.end_run(end(first.fence))
    assert (reply.decision, reply.tick_s) == (Release.HANDED_ON, 101)
    assert reply.fence > first.fence
    assert await store.renew_lease("j", renewal(reply.fence)) is Renewal.RENEWED
    assert await store.renew_lease("j", renewal(first.fence)) is Renewal.TAKEN


async def test_a_queued_tick_is_handed_to_the_releasing_node(store: Store) -> None:
    first = await decide(store, request(100, overlap=Overlap.QUEUE_ONE))
    await decide(store, request(101, cursor=100, overlap=Overlap.QUEUE_ONE, owner=N2))  # queued
    handed = await store.end_run(end(first.fence))
    assert (handed.decision, handed.tick_s, handed.trigger_id) == (Release.HANDED_ON, 101, None)
    held = await lease(store)
    assert held is not None
    assert (held.owner, held.fence, held.tick_s) == (N1, handed.fence, 101)


async def test_release_appends_the_record_once_even_when_retried(store: Store) -> None:
    first = await decide(store, request(tick=100))
    record = RunRecord("j", 100, "n1", Outcome.ERROR, fence=first.fence, error="boom")
    done = await store.end_run(RunEnd("j", first.fence, N1, 5000, record, 10))
    assert done.decision is Release.RELEASED
    # A retry after a lost reply: the fence no longer holds, nothing is appended twice.
    again = await store.end_run(RunEnd("j", first.fence, N1, 5000, record, 10))
    assert again.decision is Release.NOT_OWNER
    assert again.records == ()
    history = await store.history("j", 10)
    assert history[0] == record
    assert [(r.outcome, r.fence) for r in history] == [
        (Outcome.ERROR, first.fence),
        (Outcome.GRANTED, first.fence),
    ]


async def test_a_replaced_runs_end_writes_nothing_its_replacement_recorded_it(
    store: Store,
) -> None:
    first = await decide(store, request(tick=100, overlap=Overlap.REPLACE))
    await decide(store, request(tick=101, cursor=100, overlap=Overlap.REPLACE, owner=N2))
    record = RunRecord("j", 100, "n1", Outcome.LEASE_LOST, fence=first.fence)
    reply = await store.end_run(RunEnd("j", first.fence, N1, 5000, record, 10))
    assert reply.decision is Release.NOT_OWNER
    assert [(r.tick_s, r.outcome) for r in await store.history("j", 10)] == [
        (101, Outcome.GRANTED),
        (100, Outcome.LEASE_LOST),
        (100, Outcome.GRANTED),
    ]


async def test_a_run_whose_lease_lapsed_still_ends_once_with_its_record(
    store: Store, backend: Backend
) -> None:
    """Until a decision records it abandoned, the lapsed run's fence may still end it: one
    result record, whichever comes first."""
    first = await decide(store, request(tick=100))
    await backend.faults.expire_lease("j")
    record = RunRecord("j", 100, "n1", Outcome.OK, fence=first.fence)
    done = await store.end_run(RunEnd("j", first.fence, N1, 5000, record, 10))
    assert done.decision is Release.RELEASED
    later = await decide(store, request(tick=101, cursor=100, owner=N2))
    assert [r.outcome for r in later.records] == [Outcome.GRANTED]  # not abandoned
    assert [r.outcome for r in await store.history("j", 10)] == [
        Outcome.GRANTED,
        Outcome.OK,
        Outcome.GRANTED,
    ]


async def test_a_run_recorded_abandoned_can_no_longer_end(store: Store, backend: Backend) -> None:
    first = await decide(store, request(tick=100))
    await backend.faults.expire_lease("j")
    later = await decide(store, request(tick=101, cursor=100, owner=N2))
    assert [r.outcome for r in later.records] == [Outcome.ABANDONED, Outcome.GRANTED]
    record = RunRecord("j", 100, "n1", Outcome.OK, fence=first.fence)
    late = await store.end_run(RunEnd("j", first.fence, N1, 5000, record, 10))
    assert late.decision is Release.NOT_OWNER
    assert Outcome.OK not in [r.outcome for r in await store.history("j", 10)]


async def test_record_appends_without_a_lease(store: Store) -> None:
    record = RunRecord("j", 100, "n1", Outcome.OK, fence=7)
    await store.record([record], history=10)
    assert await store.history("j", 10) == [record]


async def test_runs_ending_together_end_in_one_call(store: Store, backend: Backend) -> None:
    jobs = [f"job{index}" for index in range(12)]
    granted = [await decide(store, request(100, job=job)) for job in jobs]
    ends = [
        RunEnd(job, g.fence, N1, 5000, RunRecord(job, 100, "n1", Outcome.OK, fence=g.fence), 10)
        for job, g in zip(jobs, granted, strict=True)
    ]
    ends[0] = RunEnd(jobs[0], granted[0].fence + 1, N1, 5000, ends[0].record, 10)  # wrong
    async with backend.round_trips() as trips:
        replies = await store.end_runs(ends)
    assert all(isinstance(reply, ReleaseReply) for reply in replies)
    decisions = [getattr(reply, "decision", reply) for reply in replies]
    assert decisions == [Release.NOT_OWNER] + [Release.RELEASED] * 11
    assert 1 <= trips.count <= backend.shards
    histories = await store.histories(jobs, 10)
    assert {job: [r.outcome for r in records] for job, records in histories.items()} == {
        job: [Outcome.OK, Outcome.GRANTED] if job != jobs[0] else [Outcome.GRANTED] for job in jobs
    }


async def test_history_is_kept_to_its_cap_newest_first(store: Store) -> None:
    records = [RunRecord("j", tick, "n1", Outcome.OK, fence=tick) for tick in range(1, 301)]
    for start in range(0, 300, 100):
        await store.record(records[start : start + 100], history=100)
    kept = await store.history("j", 1000)
    # The cap is approximate (Redis trims whole nodes of its stream) but bounds the history.
    assert 100 <= len(kept) < 300
    assert kept == records[::-1][: len(kept)]
    assert await store.history("j", 5) == records[::-1][:5]


async def test_a_missed_record_counts_its_ticks(store: Store) -> None:
    await store.record(
        [RunRecord("j", 100, "n1", Outcome.MISSED, count=3), RunRecord("j", 101, "n1", Outcome.OK)],
        history=10,
    )
    (state,) = await store.job_states(["j"])
    assert state.counters["missed"] == 3
    assert [r.outcome for r in await store.history("j", 10)] == [Outcome.OK, Outcome.MISSED]


async def test_records_since_finds_what_was_written_after_an_instant(store: Store) -> None:
    before = await store.heartbeat("n1", now_ms=0, ttl_ms=1, epoch_candidate="e")
    since_ms = int(before.server_time_s * 1000)
    records = [RunRecord("j", tick, "n1", Outcome.OK, fence=tick) for tick in (1, 2, 3)]
    await store.record(records, history=10)
    assert await store.records_since("j", since_ms, 10) == records
    assert await store.records_since("j", since_ms, 2) == records[:2]
    assert await store.records_since("j", since_ms + 3_600_000, 10) == []
    assert await store.records_since("k", since_ms, 10) == []
