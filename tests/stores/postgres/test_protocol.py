"""The protocol on PostgreSQL: each test states what the Redis scripts' tests state
(tests/store/test_scripts.py), with the database's rows where those read Redis keys."""

from __future__ import annotations

import pytest

from cronrace.model.policies import Outcome, Overlap
from cronrace.model.records import RunRecord
from cronrace.stores.postgres import PostgresStore
from cronrace.stores.values import (
    AcquireDecision,
    AcquireMode,
    AcquireReply,
    AcquireRequest,
    Claim,
    Owner,
    ReleaseDecision,
    Renewal,
)
from tests.stores.postgres.conftest import job_row, sql

pytestmark = pytest.mark.postgres

N1, N2 = Owner.parse("n1:x"), Owner.parse("n2:y")


def request(
    job: str = "j",
    tick: int = 100,
    *,
    overlap: Overlap = Overlap.SKIP,
    mode: AcquireMode = AcquireMode.RUN,
    owner: Owner = N1,
    ttl_ms: int = 5000,
    mark: int | None = None,
    run: int | None = None,
) -> AcquireRequest:
    return AcquireRequest(
        job,
        tick,
        mark if mark is not None else tick,
        run if run is not None else tick,
        owner,
        ttl_ms,
        overlap,
        mode,
    )


async def acquire_one(store: PostgresStore, req: AcquireRequest) -> AcquireReply:
    (reply,) = await store.acquire([req])
    assert isinstance(reply, AcquireReply), reply
    return reply


async def expire_lease(store: PostgresStore, job: str = "j") -> None:
    """As if the lease's time ran out."""
    await sql(
        store,
        "UPDATE @schema@.jobs SET lease_expires_us = 0 WHERE ns = %(ns)s AND job = %(job)s",
        job=job,
    )


async def test_claim_is_won_by_exactly_one_node(pg_store: PostgresStore) -> None:
    claims = [Claim("j", 100, 5000), Claim("k", 100, 5000)]
    assert await pg_store.claim(claims, Owner.parse("a:1")) == [True, True]
    assert await pg_store.claim(claims, Owner.parse("b:1")) == [False, False]
    rows = await sql(pg_store, "SELECT count(*) FROM @schema@.claims WHERE ns = %(ns)s")
    assert rows == [(2,)]  # the loser wrote nothing


async def test_a_trigger_claim_never_collides_with_a_tick(pg_store: PostgresStore) -> None:
    assert await pg_store.claim([Claim("j", 0, 5000)], N1) == [True]
    assert await pg_store.claim([Claim("j", 0, 5000, "t1")], N2) == [True]
    assert await pg_store.trigger_claimant("j", "t1") == "n2"
    assert await pg_store.trigger_claimant("j", "t2") is None


async def test_resolve_claims_finds_a_claim_whose_reply_was_lost(pg_store: PostgresStore) -> None:
    a, b = Owner.parse("a:1"), Owner.parse("b:1")
    await pg_store.claim([Claim("j", 100, 5000)], a)
    assert await pg_store.resolve_claims([Claim("j", 100, 5000)], a) == [True]
    assert await pg_store.resolve_claims([Claim("j", 100, 5000)], b) == [False]
    assert await pg_store.resolve_claims([Claim("j", 101, 5000)], b) == [True]
    assert await pg_store.read_claims([Claim("j", 100, 5000), Claim("j", 101, 5000)], a) == [
        True,
        False,
    ]


async def test_acquire_grants_fence_and_advances_watermark(pg_store: PostgresStore) -> None:
    reply = await acquire_one(pg_store, request(tick=100))
    assert reply.decision is AcquireDecision.RUN
    assert reply.fence > 1_000_000_000_000_000  # floored at the clock in microseconds
    assert reply.prev_watermark_s is None
    row = await job_row(pg_store)
    assert row["watermark"] == 100
    assert (row["lease_owner"], row["lease_fence"]) == ("n1:x", reply.fence)
    (state,) = await pg_store.job_states(["j"])
    assert state.lease is not None
    assert 0 < state.lease.ttl_ms <= 5000


async def test_acquire_refuses_tick_at_or_below_watermark(pg_store: PostgresStore) -> None:
    await acquire_one(pg_store, request(tick=100))
    stale = await acquire_one(pg_store, request(tick=100))
    assert (stale.decision, stale.prev_watermark_s) == (AcquireDecision.STALE, 100)
    assert (await acquire_one(pg_store, request(tick=99))).decision is AcquireDecision.STALE


async def test_skip_overlap_records_holder_and_runs_nothing(pg_store: PostgresStore) -> None:
    first = await acquire_one(pg_store, request(tick=100))
    second = await acquire_one(pg_store, request(tick=101, owner=N2))
    assert second.decision is AcquireDecision.SKIPPED_OVERLAP
    assert (second.holder_fence, second.holder_owner) == (first.fence, N1)
    (state,) = await pg_store.job_states(["j"])
    assert state.counters["skipped_overlap"] == 1


async def test_queue_one_keeps_only_the_newest_waiting_tick(pg_store: PostgresStore) -> None:
    first = await acquire_one(pg_store, request(tick=100, overlap=Overlap.QUEUE_ONE))
    queued = await acquire_one(pg_store, request(tick=101, overlap=Overlap.QUEUE_ONE))
    assert queued.decision is AcquireDecision.QUEUED
    newer = await acquire_one(pg_store, request(tick=102, overlap=Overlap.QUEUE_ONE))
    assert (newer.decision, newer.superseded_tick_s) == (AcquireDecision.QUEUED, 101)
    reply = await pg_store.release("j", first.fence, owner=N1, lease_ttl_ms=5000)
    assert (reply.decision, reply.tick_s) == (ReleaseDecision.HANDED_ON, 102)
    assert reply.fence > first.fence
    assert (await job_row(pg_store))["pending_tick"] is None


async def test_a_queued_trigger_is_handed_on_as_that_trigger(pg_store: PostgresStore) -> None:
    first = await acquire_one(pg_store, request(tick=100, overlap=Overlap.QUEUE_ONE))
    trigger = AcquireRequest(
        "j", 150, 150, 150, N2, 5000, Overlap.QUEUE_ONE, AcquireMode.TRIGGER, trigger_id="t9"
    )
    assert (await acquire_one(pg_store, trigger)).decision is AcquireDecision.QUEUED
    reply = await pg_store.release("j", first.fence, owner=N1, lease_ttl_ms=5000)
    assert (reply.decision, reply.tick_s, reply.trigger_id) == (
        ReleaseDecision.HANDED_ON,
        150,
        "t9",
    )


async def test_replace_takes_the_lease_and_the_old_fence_can_no_longer_renew(
    pg_store: PostgresStore,
) -> None:
    first = await acquire_one(pg_store, request(tick=100, overlap=Overlap.REPLACE))
    second = await acquire_one(pg_store, request(tick=101, overlap=Overlap.REPLACE, owner=N2))
    assert second.decision is AcquireDecision.RUN
    assert second.fence > first.fence
    assert await pg_store.renew("j", first.fence, 5000) is Renewal.TAKEN
    assert await pg_store.renew("j", second.fence, 5000) is Renewal.RENEWED
    refused = await pg_store.release("j", first.fence, owner=N1, lease_ttl_ms=5000)
    assert refused.decision is ReleaseDecision.NOT_OWNER


async def test_allow_gives_each_run_a_distinct_increasing_fence_without_a_lease(
    pg_store: PostgresStore,
) -> None:
    fences = [
        (await acquire_one(pg_store, request(tick=t, overlap=Overlap.ALLOW))).fence
        for t in (100, 101, 102)
    ]
    assert fences == sorted(set(fences))
    assert (await job_row(pg_store))["lease_fence"] is None


async def test_release_deletes_the_lease_only_for_its_fence(pg_store: PostgresStore) -> None:
    first = await acquire_one(pg_store, request(tick=100))
    wrong = await pg_store.release("j", first.fence + 1, owner=N1, lease_ttl_ms=5000)
    assert wrong.decision is ReleaseDecision.NOT_OWNER
    right = await pg_store.release("j", first.fence, owner=N1, lease_ttl_ms=5000)
    assert right.decision is ReleaseDecision.RELEASED
    assert (await job_row(pg_store))["lease_fence"] is None
    assert await pg_store.renew("j", first.fence, 5000) is Renewal.GONE


async def test_a_queued_catch_up_never_waits_with_a_tick_already_decided(
    pg_store: PostgresStore,
) -> None:
    first = await acquire_one(pg_store, request(tick=103, run=101, overlap=Overlap.QUEUE_ONE))
    queued = await acquire_one(
        pg_store, request(tick=104, run=101, overlap=Overlap.QUEUE_ONE, owner=N2)
    )
    assert queued.decision is AcquireDecision.QUEUED
    reply = await pg_store.release("j", first.fence, owner=N1, lease_ttl_ms=5000)
    assert (reply.decision, reply.tick_s) == (ReleaseDecision.HANDED_ON, 104)


async def test_release_can_continue_a_catch_up_under_the_same_lease(
    pg_store: PostgresStore,
) -> None:
    first = await acquire_one(pg_store, request(tick=100))
    reply = await pg_store.release(
        "j", first.fence, owner=N1, lease_ttl_ms=5000, continue_tick_s=101
    )
    assert (reply.decision, reply.tick_s) == (ReleaseDecision.HANDED_ON, 101)
    assert reply.fence > first.fence


async def test_expired_lease_is_reported_abandoned_by_the_next_acquirer(
    pg_store: PostgresStore,
) -> None:
    first = await acquire_one(pg_store, request(tick=100))
    await expire_lease(pg_store)
    second = await acquire_one(pg_store, request(tick=101, owner=N2))
    assert second.decision is AcquireDecision.RUN
    assert (second.abandoned_tick_s, second.abandoned_fence) == (100, first.fence)
    assert second.abandoned_owner == N1
    assert await pg_store.renew("j", first.fence, 5000) is Renewal.TAKEN


async def test_an_expired_lease_renews_as_gone(pg_store: PostgresStore) -> None:
    first = await acquire_one(pg_store, request(tick=100))
    await expire_lease(pg_store)
    assert await pg_store.renew("j", first.fence, 5000) is Renewal.GONE
    late = await pg_store.release("j", first.fence, owner=N1, lease_ttl_ms=5000)
    assert late.decision is ReleaseDecision.NOT_OWNER


async def test_a_counter_behind_its_last_grants_never_hands_out_a_fence_again(
    pg_store: PostgresStore, other_pg_node: PostgresStore
) -> None:
    first = await acquire_one(pg_store, request(tick=100))
    await pg_store.release("j", first.fence, owner=N1, lease_ttl_ms=5000)
    await sql(
        pg_store,
        "UPDATE @schema@.jobs SET fence = %(fence)s WHERE ns = %(ns)s AND job = 'j'",
        fence=first.fence - 1_000,
    )
    second = await acquire_one(other_pg_node, request(tick=101))
    assert second.fence > first.fence


async def test_every_fence_is_at_least_the_database_clock_in_microseconds(
    pg_store: PostgresStore,
) -> None:
    await sql(
        pg_store,
        "INSERT INTO @schema@.jobs (ns, job, fence) VALUES (%(ns)s, 'j', 5)",
    )
    ((now_us,),) = await sql(pg_store, "SELECT @schema@.now_us()")
    reply = await acquire_one(pg_store, request(tick=100))
    assert reply.fence >= now_us
    released = await pg_store.release(
        "j", reply.fence, owner=N1, lease_ttl_ms=5000, continue_tick_s=101
    )
    assert released.fence > reply.fence


async def test_paused_job_records_skip_but_still_advances_watermark(
    pg_store: PostgresStore,
) -> None:
    await pg_store.set_paused("j", True)
    reply = await acquire_one(pg_store, request(tick=100))
    assert reply.decision is AcquireDecision.SKIPPED_PAUSED
    assert (await job_row(pg_store))["watermark"] == 100
    await pg_store.set_paused("j", False)
    assert (await acquire_one(pg_store, request(tick=101))).decision is AcquireDecision.RUN


async def test_trigger_leaves_the_watermark_alone(pg_store: PostgresStore) -> None:
    await acquire_one(pg_store, request(tick=100, mode=AcquireMode.MARK))
    reply = await acquire_one(pg_store, request(tick=50, mode=AcquireMode.TRIGGER))
    assert reply.decision is AcquireDecision.RUN
    assert (await job_row(pg_store))["watermark"] == 100


async def test_mark_mode_decides_without_running(pg_store: PostgresStore) -> None:
    reply = await acquire_one(pg_store, request(tick=100, mode=AcquireMode.MARK, mark=130))
    assert reply.decision is AcquireDecision.MARKED
    row = await job_row(pg_store)
    assert (row["watermark"], row["lease_fence"]) == (130, None)


async def test_a_retried_acquire_gets_the_same_answer_and_renews_its_lease(
    pg_store: PostgresStore,
) -> None:
    await pg_store.claim([Claim("j", 100, 60_000)], N1)
    first = await acquire_one(pg_store, request(tick=100))
    again = await acquire_one(pg_store, request(tick=100))
    assert (again.decision, again.fence, again.replayed, again.renewed) == (
        AcquireDecision.RUN,
        first.fence,
        True,
        True,
    )


async def test_a_retry_whose_grant_expired_is_decided_again_with_a_new_fence(
    pg_store: PostgresStore,
) -> None:
    await pg_store.claim([Claim("j", 100, 60_000)], N1)
    first = await acquire_one(pg_store, request(tick=100))
    await expire_lease(pg_store)
    again = await acquire_one(pg_store, request(tick=100))
    assert (again.decision, again.replayed) == (AcquireDecision.RUN, False)
    assert again.fence > first.fence
    assert again.abandoned_fence == first.fence


async def test_one_failing_request_costs_its_job_only(pg_store: PostgresStore) -> None:
    bad = request(job="bad", tick=100)
    bad = AcquireRequest(bad.job, 100, 100, 100, N1, -1, Overlap.SKIP, AcquireMode.RUN)
    await sql(
        pg_store,
        "INSERT INTO @schema@.jobs (ns, job, fence) VALUES (%(ns)s, 'bad', 9223372036854775807)",
    )
    replies = await pg_store.acquire([request(job="a"), bad, request(job="c")])
    assert isinstance(replies[0], AcquireReply)
    assert isinstance(replies[2], AcquireReply)
    assert isinstance(replies[1], Exception)
    assert "bad" in str(replies[1])


async def test_release_appends_the_record_once_even_when_retried(
    pg_store: PostgresStore,
) -> None:
    first = await acquire_one(pg_store, request(tick=100))
    record = RunRecord("j", 100, "n1", Outcome.OK, fence=first.fence)
    done = await pg_store.finish(
        record, history=10, release_fence=first.fence, owner=N1, lease_ttl_ms=5000
    )
    assert done is not None
    assert done.decision is ReleaseDecision.RELEASED
    again = await pg_store.finish(
        record, history=10, release_fence=first.fence, owner=N1, lease_ttl_ms=5000, retried=True
    )
    assert again is not None
    assert again.decision is ReleaseDecision.NOT_OWNER
    assert [r.fence for r in await pg_store.history("j", 10)] == [first.fence]


async def test_record_of_a_run_whose_lease_moved_on_is_still_written(
    pg_store: PostgresStore,
) -> None:
    first = await acquire_one(pg_store, request(tick=100, overlap=Overlap.REPLACE))
    await acquire_one(pg_store, request(tick=101, overlap=Overlap.REPLACE, owner=N2))
    record = RunRecord("j", 100, "n1", Outcome.LEASE_LOST, fence=first.fence)
    reply = await pg_store.finish(
        record, history=10, release_fence=first.fence, owner=N1, lease_ttl_ms=5000
    )
    assert reply is not None
    assert reply.decision is ReleaseDecision.NOT_OWNER
    assert [r.outcome for r in await pg_store.history("j", 10)] == [Outcome.LEASE_LOST]


async def test_records_are_pruned_to_history_per_job(pg_store: PostgresStore) -> None:
    for tick in range(12):
        await pg_store.record([RunRecord("j", tick, "n1", Outcome.OK)], history=5)
    await pg_store.record([RunRecord("k", 1, "n1", Outcome.MISSED, count=3)], history=5)
    assert [r.tick_s for r in await pg_store.history("j", 100)] == [11, 10, 9, 8, 7]
    histories = await pg_store.histories(["j", "k", "none"], 2)
    assert [r.tick_s for r in histories["j"]] == [11, 10]
    assert [r.count for r in histories["k"]] == [3]
    assert histories["none"] == []
    (state,) = await pg_store.job_states(["k"])
    assert state.counters["missed"] == 3
    since = await pg_store.records_since("j", 0, 3)
    assert [r.tick_s for r in since] == [7, 8, 9]


async def test_history_skips_unreadable_records(pg_store: PostgresStore) -> None:
    await sql(
        pg_store,
        "INSERT INTO @schema@.runs (ns, job, written_ms, record) VALUES "
        """(%(ns)s, 'j', 1, '"not a record"'),"""
        """(%(ns)s, 'j', 2, '{"job": "j", "tick_s": 1, "node": "n", "outcome": "ok"}')""",
    )
    assert [r.outcome for r in await pg_store.history("j", 10)] == [Outcome.OK]


@pytest.mark.parametrize("paused", [True, False])
async def test_job_states_report_lease_pause_and_counters(
    pg_store: PostgresStore, paused: bool
) -> None:
    reply = await acquire_one(pg_store, request(tick=100))
    await pg_store.set_paused("j", paused)
    state, unknown = await pg_store.job_states(["j", "never"])
    assert state.watermark_s == 100
    assert state.lease is not None
    assert state.lease.fence == reply.fence
    assert state.paused is paused
    assert (unknown.watermark_s, unknown.lease, unknown.last_fence) == (None, None, None)


async def test_fenced_set_refuses_a_lower_fence(pg_store: PostgresStore) -> None:
    assert await pg_store.fenced_set("target", "from-5", 5)
    assert await pg_store.fenced_set("target", "from-7", 7)
    assert not await pg_store.fenced_set("target", "from-6", 6)
    assert await sql(
        pg_store,
        "SELECT value FROM @schema@.fenced_values WHERE ns = %(ns)s AND key = 'target'",
    ) == [(b"from-7",)]
    assert await pg_store.fenced_set("target", "again-7", 7)


async def test_registering_a_job_spec_stored_as_it_is_leaves_its_row_alone(
    pg_store: PostgresStore,
) -> None:
    """A node of 10,000 jobs starting where the fleet published the same definitions made
    a new row version of every job at every start."""
    await pg_store.register_jobs({"j": {"schedule": "@hourly", "timezone": "UTC"}})
    (version,) = await sql(
        pg_store, "SELECT xmin::text FROM @schema@.jobs WHERE ns = %(ns)s AND job = 'j'"
    )
    await pg_store.register_jobs({"j": {"timezone": "UTC", "schedule": "@hourly"}})
    assert await sql(
        pg_store, "SELECT xmin::text FROM @schema@.jobs WHERE ns = %(ns)s AND job = 'j'"
    ) == [version]
    await pg_store.register_jobs({"j": {"schedule": "@daily"}})
    assert (await job_row(pg_store))["spec"] == {"schedule": "@daily", "timezone": "UTC"}
