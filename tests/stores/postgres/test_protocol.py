"""The dense cursor on PostgreSQL: what the behaviour suite (tests/stores/contract/, which
runs on PostgreSQL too) states, pinned in the database's rows: the cursor and its origin,
the lease with its ticks, the run it mirrors, the queued tick, one request's failure."""

from __future__ import annotations

import pytest

from cronrace.model.policies import Outcome, Overlap
from cronrace.model.records import RunRecord
from cronrace.protocol import DecideReply, DecideRequest, Release, Renewal, RenewRequest, Verdict
from cronrace.stores.postgres import PostgresStore
from cronrace.stores.values import Claim, ClaimOutcome, Owner
from tests.stores.contract import helpers
from tests.stores.contract.helpers import end
from tests.stores.postgres.conftest import job_row, sql

pytestmark = pytest.mark.postgres

N1, N2 = helpers.N1, helpers.N2


def request(
    job: str = "j",
    tick: int = 100,
    *,
    cursor: int | None = None,
    fire: tuple[int, ...] | None = None,
    overlap: Overlap = Overlap.SKIP,
    owner: Owner = N1,
    trigger_id: str | None = None,
) -> DecideRequest:
    return helpers.request(
        tick, cursor=cursor, job=job, fire=fire, overlap=overlap, owner=owner, trigger_id=trigger_id
    )


async def decide_one(store: PostgresStore, req: DecideRequest) -> DecideReply:
    (reply,) = await store.decide([req])
    assert isinstance(reply, DecideReply), reply
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


async def test_a_claim_read_back_finds_a_claim_whose_reply_was_lost(
    pg_store: PostgresStore,
) -> None:
    a, b = Owner.parse("a:1"), Owner.parse("b:1")
    await pg_store.claim([Claim("j", 100, 5000)], a)

    async def read_back(claim: Claim, owner: Owner) -> ClaimOutcome:
        (reply,) = await pg_store.claim_each([claim], owner, read_back=True)
        return reply.outcome

    assert await read_back(Claim("j", 100, 5000), a) is ClaimOutcome.WON
    assert await read_back(Claim("j", 100, 5000), b) is ClaimOutcome.LOST
    assert await read_back(Claim("j", 101, 5000), b) is ClaimOutcome.WON
    assert await pg_store.read_claims([Claim("j", 100, 5000), Claim("j", 101, 5000)], a) == [
        True,
        False,
    ]


async def test_a_decision_grants_a_fence_and_sets_the_cursor_in_the_jobs_row(
    pg_store: PostgresStore,
) -> None:
    reply = await decide_one(pg_store, request(tick=101, fire=(100, 101)))
    assert reply.verdict is Verdict.RUN
    assert reply.fence > 1_000_000_000_000_000  # floored at the clock in microseconds
    row = await job_row(pg_store)
    assert (row["cursor_tick"], row["origin_tick"]) == (101, 99)
    assert (row["lease_owner"], row["lease_fence"], row["lease_ticks"]) == (
        "n1:x",
        reply.fence,
        [100, 101],
    )
    assert (row["run_owner"], row["run_fence"], row["run_ticks"]) == (
        "n1:x",
        reply.fence,
        [100, 101],
    )
    (state,) = await pg_store.job_states(["j"])
    assert state.lease is not None
    assert (state.lease.tick_s, state.cursor_s) == (100, 101)
    assert 0 < state.lease.ttl_ms <= 5000
    handed = await pg_store.end_run(end(reply.fence))
    assert (handed.decision, handed.tick_s) == (Release.HANDED_ON, 101)
    assert (await job_row(pg_store))["lease_ticks"] == [101]


async def test_queue_one_keeps_only_the_newest_waiting_tick(pg_store: PostgresStore) -> None:
    first = await decide_one(pg_store, request(tick=100, overlap=Overlap.QUEUE_ONE))
    await decide_one(pg_store, request(tick=101, cursor=100, overlap=Overlap.QUEUE_ONE))
    newer = await decide_one(pg_store, request(tick=102, cursor=101, overlap=Overlap.QUEUE_ONE))
    assert newer.verdict is Verdict.QUEUED
    assert (await job_row(pg_store))["pending_tick"] == 102
    reply = await pg_store.end_run(end(first.fence))
    assert (reply.decision, reply.tick_s) == (Release.HANDED_ON, 102)
    assert reply.fence > first.fence
    assert (await job_row(pg_store))["pending_tick"] is None


async def test_a_queued_trigger_is_handed_on_as_that_trigger(pg_store: PostgresStore) -> None:
    first = await decide_one(pg_store, request(tick=100, overlap=Overlap.QUEUE_ONE))
    t9 = await pg_store.request_trigger("j")
    trigger = request(tick=150, owner=N2, overlap=Overlap.QUEUE_ONE, trigger_id=t9)
    assert (await decide_one(pg_store, trigger)).verdict is Verdict.QUEUED
    row = await job_row(pg_store)
    assert (row["pending_tick"], row["pending_trigger"], row["outstanding"]) == (150, t9, [])
    reply = await pg_store.end_run(end(first.fence))
    assert (reply.decision, reply.tick_s, reply.trigger_id) == (Release.HANDED_ON, 150, t9)
    assert (await job_row(pg_store))["lease_trigger"] == t9


async def test_allow_gives_each_run_a_distinct_increasing_fence_without_a_lease(
    pg_store: PostgresStore,
) -> None:
    reply = await decide_one(
        pg_store, request(tick=102, fire=(100, 101, 102), overlap=Overlap.ALLOW)
    )
    assert reply.fences == tuple(sorted(set(reply.fences)))
    assert len(reply.fences) == 3
    row = await job_row(pg_store)
    assert (row["lease_fence"], row["fence"]) == (None, reply.fences[-1])


async def test_release_deletes_the_lease_only_for_its_fence(pg_store: PostgresStore) -> None:
    first = await decide_one(pg_store, request(tick=100))
    assert (await pg_store.end_run(end(first.fence + 1))).decision is Release.NOT_OWNER
    assert (await pg_store.end_run(end(first.fence))).decision is Release.RELEASED
    row = await job_row(pg_store)
    assert (row["lease_fence"], row["run_fence"]) == (None, None)
    assert await pg_store.renew_lease("j", RenewRequest(first.fence, 5000)) is Renewal.GONE


async def test_expired_lease_is_recorded_abandoned_by_the_next_decision(
    pg_store: PostgresStore,
) -> None:
    first = await decide_one(pg_store, request(tick=100))
    await expire_lease(pg_store)
    second = await decide_one(pg_store, request(tick=101, cursor=100, owner=N2))
    assert second.verdict is Verdict.RUN
    assert [(r.outcome, r.fence, r.node) for r in second.records] == [
        (Outcome.ABANDONED, first.fence, "n1"),
        (Outcome.GRANTED, second.fence, "n2"),
    ]
    assert (await job_row(pg_store))["run_fence"] == second.fence
    assert await pg_store.renew_lease("j", RenewRequest(first.fence, 5000)) is Renewal.TAKEN


async def test_an_expired_lease_renews_as_gone_and_its_run_still_ends_once(
    pg_store: PostgresStore,
) -> None:
    first = await decide_one(pg_store, request(tick=100))
    await expire_lease(pg_store)
    assert await pg_store.renew_lease("j", RenewRequest(first.fence, 5000)) is Renewal.GONE
    late = await pg_store.end_run(end(first.fence))
    assert late.decision is Release.RELEASED  # no decision recorded it abandoned yet
    assert (await job_row(pg_store))["run_fence"] is None
    assert (await pg_store.end_run(end(first.fence))).decision is Release.NOT_OWNER


async def test_every_fence_is_at_least_the_database_clock_in_microseconds(
    pg_store: PostgresStore,
) -> None:
    await sql(
        pg_store,
        "INSERT INTO @schema@.jobs (ns, job, fence) VALUES (%(ns)s, 'j', 5)",
    )
    ((now_us,),) = await sql(pg_store, "SELECT @schema@.now_us()")
    reply = await decide_one(pg_store, request(tick=101, fire=(100, 101)))
    assert reply.fence >= now_us
    handed = await pg_store.end_run(end(reply.fence))
    assert handed.fence > reply.fence


async def test_one_failing_request_costs_its_job_only(pg_store: PostgresStore) -> None:
    await sql(
        pg_store,
        "INSERT INTO @schema@.jobs (ns, job, fence) VALUES (%(ns)s, 'bad', 9223372036854775807)",
    )
    replies = await pg_store.decide([request(job="a"), request(job="bad"), request(job="c")])
    assert isinstance(replies[0], DecideReply)
    assert isinstance(replies[2], DecideReply)
    assert isinstance(replies[1], Exception)
    assert "bad" in str(replies[1])
    assert await pg_store.cursors(["a", "bad", "c"]) == {"a": 100, "bad": None, "c": 100}


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
async def test_job_states_report_lease_pause_and_cursor(
    pg_store: PostgresStore, paused: bool
) -> None:
    reply = await decide_one(pg_store, request(tick=100))
    await pg_store.set_paused("j", paused)
    state, unknown = await pg_store.job_states(["j", "never"])
    assert state.cursor_s == 100
    assert state.lease is not None
    assert state.lease.fence == reply.fence
    assert state.paused is paused
    assert (unknown.cursor_s, unknown.lease, unknown.last_fence) == (None, None, None)


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
