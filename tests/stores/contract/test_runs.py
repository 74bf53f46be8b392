"""A run's side of the store: renewal, release, hand-on, and its record written once."""

from __future__ import annotations

from cronrace.model.policies import Outcome, Overlap
from cronrace.model.records import RunRecord
from cronrace.stores.contract import Store
from cronrace.stores.values import FinishRequest, ReleaseDecision, ReleaseReply, Renewal
from tests.stores.contract.helpers import N1, N2, acquire, lease, request
from tests.stores.harness import Backend


async def test_renewal_extends_the_lease_of_its_fence_only(store: Store, backend: Backend) -> None:
    granted = await acquire(store, request(100))
    await backend.faults.age_lease("j", 1000)
    assert await store.renew("j", granted.fence, 5000) == Renewal.RENEWED
    held = await lease(store)
    assert held is not None
    assert held.ttl_ms > 4000
    assert await store.renew("j", granted.fence + 1, 5000) == Renewal.TAKEN
    await backend.faults.expire_lease("j")
    assert await store.renew("j", granted.fence, 5000) == Renewal.GONE


async def test_release_deletes_the_lease_only_for_its_fence(store: Store) -> None:
    first = await acquire(store, request(tick=100))
    assert (
        await store.release("j", first.fence + 1, owner=N1, lease_ttl_ms=5000)
    ).decision is ReleaseDecision.NOT_OWNER
    assert (
        await store.release("j", first.fence, owner=N1, lease_ttl_ms=5000)
    ).decision is ReleaseDecision.RELEASED
    assert await lease(store) is None
    assert await store.renew("j", first.fence, 5000) == Renewal.GONE


async def test_release_can_continue_a_catch_up_under_the_same_lease(store: Store) -> None:
    first = await acquire(store, request(tick=100))
    reply = await store.release("j", first.fence, owner=N1, lease_ttl_ms=5000, continue_tick_s=101)
    assert (reply.decision, reply.tick_s) == (ReleaseDecision.HANDED_ON, 101)
    assert reply.fence > first.fence
    assert await store.renew("j", reply.fence, 5000) == Renewal.RENEWED
    assert await store.renew("j", first.fence, 5000) == Renewal.TAKEN


async def test_a_queued_tick_is_handed_to_the_releasing_node(store: Store) -> None:
    first = await acquire(store, request(100, overlap=Overlap.QUEUE_ONE))
    await acquire(store, request(101, overlap=Overlap.QUEUE_ONE, owner=N2))  # n2 queued it
    handed = await store.release("j", first.fence, owner=N1, lease_ttl_ms=5000)
    assert (handed.decision, handed.tick_s, handed.trigger_id) == (
        ReleaseDecision.HANDED_ON,
        101,
        None,
    )
    held = await lease(store)
    assert held is not None
    assert (held.owner, held.fence, held.tick_s) == (N1, handed.fence, 101)


async def test_release_appends_the_record_once_even_when_retried(store: Store) -> None:
    first = await acquire(store, request(tick=100))
    record = RunRecord("j", 100, "n1", Outcome.OK, fence=first.fence)
    done = await store.finish(
        record, history=10, release_fence=first.fence, owner=N1, lease_ttl_ms=5000
    )
    assert done is not None
    assert done.decision is ReleaseDecision.RELEASED
    # A retry after a lost reply: the fence no longer matches, nothing is appended twice.
    again = await store.finish(
        record, history=10, release_fence=first.fence, owner=N1, lease_ttl_ms=5000, retried=True
    )
    assert again is not None
    assert again.decision is ReleaseDecision.NOT_OWNER
    assert [r.fence for r in await store.history("j", 10)] == [first.fence]


async def test_record_of_a_run_whose_lease_moved_on_is_still_written(store: Store) -> None:
    first = await acquire(store, request(tick=100, overlap=Overlap.REPLACE))
    await acquire(store, request(tick=101, overlap=Overlap.REPLACE, owner=N2))
    record = RunRecord("j", 100, "n1", Outcome.LEASE_LOST, fence=first.fence)
    reply = await store.finish(
        record, history=10, release_fence=first.fence, owner=N1, lease_ttl_ms=5000
    )
    assert reply is not None
    assert reply.decision is ReleaseDecision.NOT_OWNER
    assert [r.outcome for r in await store.history("j", 10)] == [Outcome.LEASE_LOST]


async def test_a_record_given_to_release_is_written_with_it(store: Store) -> None:
    granted = await acquire(store, request(100))
    record = RunRecord("j", 100, "n1", Outcome.ERROR, fence=granted.fence, error="boom")
    reply = await store.release(
        "j", granted.fence, owner=N1, lease_ttl_ms=5000, record=record, history=10
    )
    assert reply.decision is ReleaseDecision.RELEASED
    again = await store.release(
        "j", granted.fence, owner=N1, lease_ttl_ms=5000, record=record, history=10
    )
    assert again.decision is ReleaseDecision.NOT_OWNER
    assert await store.history("j", 10) == [record]


async def test_finish_without_a_lease_only_records(store: Store) -> None:
    record = RunRecord("j", 100, "n1", Outcome.OK, fence=7)
    assert (
        await store.finish(record, history=10, release_fence=None, owner=N1, lease_ttl_ms=5000)
        is None
    )
    assert await store.history("j", 10) == [record]


async def test_runs_finishing_together_are_finished_in_one_call(
    store: Store, backend: Backend
) -> None:
    jobs = [f"job{index}" for index in range(12)]
    granted = [await acquire(store, request(100, job=job)) for job in jobs]
    requests = [
        FinishRequest(RunRecord(job, 100, "n1", Outcome.OK, fence=g.fence), 10, g.fence, N1, 5000)
        for job, g in zip(jobs, granted, strict=True)
    ]
    requests[0] = FinishRequest(requests[0].record, 10, granted[0].fence + 1, N1, 5000)  # wrong
    async with backend.round_trips() as trips:
        replies = await store.finish_many(requests)
    assert all(isinstance(reply, ReleaseReply) for reply in replies)
    decisions = [getattr(reply, "decision", reply) for reply in replies]
    assert decisions == [ReleaseDecision.NOT_OWNER] + [ReleaseDecision.RELEASED] * 11
    # A release that met another fence writes its record on its own, after the batch.
    assert trips.count <= backend.shards + 1
    histories = await store.histories(jobs, 10)
    assert {job: [r.fence for r in records] for job, records in histories.items()} == {
        job: [g.fence] for job, g in zip(jobs, granted, strict=True)
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
