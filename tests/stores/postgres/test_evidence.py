"""Wipe hold, passed ticks and garbage on PostgreSQL (tests/store's cases, in rows).

A job whose row lost its counter (a restore from an old backup, a failover to a standby
that lacked the last commits, an operator's DELETE) holds new grants for one lease_ttl,
when this node has evidence of a fence; a brand-new job never does. A won tick passed by
a later decision while undecided is decided late. A row edited into nonsense is moved to
the quarantine table, reported, and the job goes on.
"""

from __future__ import annotations

import pytest

from cronrace.model.policies import Overlap
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

A, B, C = Owner.parse("a:1"), Owner.parse("b:2"), Owner.parse("c:3")


def request(
    tick: int,
    owner: Owner = A,
    *,
    overlap: Overlap = Overlap.SKIP,
    prior: int = 0,
    late_ok: bool = True,
) -> AcquireRequest:
    return AcquireRequest(
        "j",
        tick,
        tick,
        tick,
        owner,
        5000,
        overlap,
        AcquireMode.RUN,
        prior_tick_s=prior,
        late_ok=late_ok,
    )


async def acquire(store: PostgresStore, req: AcquireRequest) -> AcquireReply:
    (reply,) = await store.acquire([req])
    assert isinstance(reply, AcquireReply), reply
    return reply


async def wipe(store: PostgresStore) -> None:
    """The job's row lost: what a restore or a lossy failover leaves."""
    await sql(store, "DELETE FROM @schema@.jobs WHERE ns = %(ns)s AND job = 'j'")


async def claim(store: PostgresStore, tick: int, owner: Owner) -> None:
    assert await store.claim([Claim("j", tick, 60_000)], owner) == [True]


# -- the wipe hold -------------------------------------------------------------------------


async def test_a_brand_new_job_is_granted_at_once(pg_store: PostgresStore) -> None:
    reply = await acquire(pg_store, request(100))
    assert (reply.decision, reply.hold_ms, reply.data_lost) == (AcquireDecision.RUN, 0, False)


@pytest.mark.parametrize("overlap", list(Overlap))
async def test_a_lost_job_row_holds_every_grant_for_one_lease_ttl(
    pg_store: PostgresStore, overlap: Overlap
) -> None:
    first = await acquire(pg_store, request(100, overlap=overlap))
    await wipe(pg_store)
    after = await acquire(pg_store, request(101, overlap=overlap))
    assert (after.decision, after.data_lost) == (AcquireDecision.RUN, True)
    assert 4000 < after.hold_ms <= 5000
    assert after.fence > first.fence
    if overlap in (Overlap.REPLACE, Overlap.ALLOW):
        next_grant = await acquire(pg_store, request(102, B, overlap=overlap))
        assert (next_grant.decision, next_grant.data_lost) == (AcquireDecision.RUN, False)
        assert next_grant.hold_ms > 3000
    await sql(pg_store, "UPDATE @schema@.jobs SET hold_until_us = NULL WHERE ns = %(ns)s")
    later = await acquire(pg_store, request(103, overlap=Overlap.ALLOW))
    assert (later.hold_ms, later.data_lost) == (0, False)


async def test_a_hand_on_during_the_hold_waits_too(pg_store: PostgresStore) -> None:
    await acquire(pg_store, request(100))
    await wipe(pg_store)
    held = await acquire(pg_store, request(101, overlap=Overlap.QUEUE_ONE))
    assert held.hold_ms > 0
    await acquire(pg_store, request(102, B, overlap=Overlap.QUEUE_ONE))
    handed = await pg_store.release("j", held.fence, owner=A, lease_ttl_ms=5000)
    assert (handed.decision, handed.tick_s) == (ReleaseDecision.HANDED_ON, 102)
    assert handed.hold_ms > 3000


async def test_a_claim_lost_after_the_winner_decided_reads_its_fence(
    pg_store: PostgresStore, other_pg_node: PostgresStore
) -> None:
    await claim(pg_store, 100, A)
    await acquire(pg_store, request(100))
    assert await other_pg_node.claim([Claim("j", 100, 5000)], B) == [False]
    await wipe(pg_store)
    reply = await acquire(other_pg_node, request(101, B))
    assert reply.data_lost
    assert reply.hold_ms > 0


async def test_a_claim_lost_to_an_undecided_winner_is_no_evidence(
    pg_store: PostgresStore, other_pg_node: PostgresStore
) -> None:
    await claim(pg_store, 100, A)
    assert await other_pg_node.claim([Claim("j", 100, 5000)], B) == [False]
    assert other_pg_node.known_fence("j") == 0
    reply = await acquire(other_pg_node, request(101, B))
    assert (reply.decision, reply.data_lost, reply.hold_ms) == (AcquireDecision.RUN, False, 0)


async def test_the_counter_read_at_start_up_is_evidence(
    pg_store: PostgresStore, other_pg_node: PostgresStore
) -> None:
    await acquire(pg_store, request(100))
    await other_pg_node.watermarks(["j"])
    await wipe(pg_store)
    assert (await acquire(other_pg_node, request(101, B))).data_lost


async def test_a_node_that_never_saw_the_job_cannot_tell_a_wipe(
    pg_store: PostgresStore, other_pg_node: PostgresStore
) -> None:
    await acquire(pg_store, request(100))
    await wipe(pg_store)
    reply = await acquire(other_pg_node, request(101, B))
    assert (reply.decision, reply.data_lost, reply.hold_ms) == (AcquireDecision.RUN, False, 0)


async def test_a_counter_behind_a_known_fence_holds_and_is_raised(pg_store: PostgresStore) -> None:
    first = await acquire(pg_store, request(100))
    await pg_store.release("j", first.fence, owner=A, lease_ttl_ms=5000)
    await sql(
        pg_store,
        "UPDATE @schema@.jobs SET fence = %(value)s WHERE ns = %(ns)s",
        value=first.fence - 5,
    )
    reply = await acquire(pg_store, request(101))
    assert (reply.data_lost, reply.fence > first.fence, reply.hold_ms > 0) == (True, True, True)


# -- passed ticks --------------------------------------------------------------------------


async def test_a_won_tick_passed_while_undecided_runs_late_under_catchup_all(
    pg_store: PostgresStore,
) -> None:
    await claim(pg_store, 100, A)
    await claim(pg_store, 101, B)
    later = await acquire(pg_store, request(101, B, prior=100, overlap=Overlap.ALLOW))
    assert later.decision is AcquireDecision.RUN
    late = await acquire(pg_store, request(100, overlap=Overlap.ALLOW))
    assert (late.decision, late.prev_watermark_s) == (AcquireDecision.RUN, 101)
    assert late.fence > later.fence
    assert (await job_row(pg_store))["watermark"] == 101
    again = await acquire(pg_store, request(100, overlap=Overlap.ALLOW))
    assert (again.decision, again.fence, again.replayed) == (AcquireDecision.RUN, late.fence, True)


async def test_a_passed_tick_is_answered_missed_when_the_policy_runs_no_late_tick(
    pg_store: PostgresStore,
) -> None:
    await claim(pg_store, 100, A)
    await claim(pg_store, 101, B)
    await acquire(pg_store, request(101, B, prior=100))
    late = await acquire(pg_store, request(100, late_ok=False))
    assert (late.decision, late.fence) == (AcquireDecision.MISSED, 0)


async def test_a_late_tick_never_replaces_the_newer_run_holding_the_lease(
    pg_store: PostgresStore,
) -> None:
    await claim(pg_store, 100, A)
    await claim(pg_store, 101, B)
    newer = await acquire(pg_store, request(101, B, prior=100, overlap=Overlap.REPLACE))
    late = await acquire(pg_store, request(100, overlap=Overlap.REPLACE))
    assert (late.decision, late.holder_fence) == (AcquireDecision.SKIPPED_OVERLAP, newer.fence)
    assert (await job_row(pg_store))["lease_fence"] == newer.fence


async def test_a_tick_no_decision_passed_stays_stale(pg_store: PostgresStore) -> None:
    await claim(pg_store, 100, A)
    await claim(pg_store, 101, B)
    await acquire(pg_store, request(101, B, prior=99))
    assert (await acquire(pg_store, request(100))).decision is AcquireDecision.STALE


async def test_only_the_claims_owner_may_decide_a_passed_tick_and_only_once(
    pg_store: PostgresStore,
) -> None:
    await claim(pg_store, 100, A)
    await claim(pg_store, 101, B)
    await acquire(pg_store, request(101, B, prior=100, overlap=Overlap.ALLOW))
    assert (await acquire(pg_store, request(100, C))).decision is AcquireDecision.STALE
    first = await acquire(pg_store, request(100, overlap=Overlap.ALLOW))
    assert first.decision is AcquireDecision.RUN
    await sql(
        pg_store,
        "UPDATE @schema@.claims SET memo = NULL, request_id = NULL "
        "WHERE ns = %(ns)s AND job = 'j' AND tick = 100",
    )
    assert (await acquire(pg_store, request(100))).decision is AcquireDecision.STALE


async def test_a_decided_prior_claim_is_not_noted_passed(pg_store: PostgresStore) -> None:
    await claim(pg_store, 100, A)
    await acquire(pg_store, request(100))
    await claim(pg_store, 101, B)
    await acquire(pg_store, request(101, B, prior=100))
    assert (await job_row(pg_store))["passed"] == []


# -- garbage -------------------------------------------------------------------------------


async def test_a_garbled_lease_is_quarantined_reported_and_holds_new_grants(
    pg_store: PostgresStore, caplog: pytest.LogCaptureFixture
) -> None:
    await acquire(pg_store, request(100))
    await sql(pg_store, "UPDATE @schema@.jobs SET lease_owner = NULL WHERE ns = %(ns)s")
    reply = await acquire(pg_store, request(101))
    assert (reply.decision, reply.warnings, reply.data_lost) == (
        AcquireDecision.RUN,
        ("lease",),
        False,
    )
    assert reply.hold_ms > 4000
    assert "quarantine" in caplog.text
    kept = await sql(pg_store, "SELECT kind FROM @schema@.quarantine WHERE ns = %(ns)s")
    assert kept == [("lease",)]


async def test_a_garbled_lease_met_by_a_renewal_stops_the_run_and_holds(
    pg_store: PostgresStore,
) -> None:
    first = await acquire(pg_store, request(100))
    await sql(pg_store, "UPDATE @schema@.jobs SET lease_fence = -3 WHERE ns = %(ns)s")
    assert await pg_store.renew("j", first.fence, 5000) is Renewal.GONE
    assert (await acquire(pg_store, request(101))).hold_ms > 4000


async def test_garbage_counter_watermark_and_pending_are_repaired_and_reported(
    pg_store: PostgresStore,
) -> None:
    await sql(
        pg_store,
        "INSERT INTO @schema@.jobs (ns, job, fence, watermark, pending_tick) "
        "VALUES (%(ns)s, 'j', -1, -7, -2)",
    )
    assert await pg_store.watermarks(["j"]) == {"j": None}
    reply = await acquire(pg_store, request(100))
    assert reply.decision is AcquireDecision.RUN
    assert set(reply.warnings) == {"fence", "watermark", "pending"}
    assert not reply.data_lost
    assert reply.fence > 1_000_000_000_000_000


async def test_unreadable_control_notice_fields_read_as_nothing(pg_store: PostgresStore) -> None:
    position = await pg_store.control_position()
    await sql(
        pg_store,
        "INSERT INTO @schema@.control (ns, posted_ms, fields) VALUES (%(ns)s, 1, '[1, 2]')",
    )
    trigger_id = await pg_store.request_trigger("j")
    notices = await pg_store.read_control(position, block_ms=10)
    assert [fields for _id, fields in notices] == [
        {},
        {"op": "trigger", "job": "j", "id": trigger_id},
    ]


# -- a lost claim as a witness (as tests/stores/redis/test_wipe_evidence.py) ---------------


async def lose_rows(store: PostgresStore, *ticks: int) -> None:
    """The job's rows gone, its claims on ``ticks`` too (a restore, a lossy failover)."""
    await wipe(store)
    await sql(
        store,
        "DELETE FROM @schema@.claims WHERE ns = %(ns)s AND job = 'j' AND tick = ANY(%(ticks)s)",
        ticks=list(ticks),
    )


async def test_a_lost_claim_gone_before_its_expiry_is_evidence_of_lost_rows(
    pg_store: PostgresStore, other_pg_node: PostgresStore
) -> None:
    assert await pg_store.claim([Claim("j", 100, 30_000)], A) == [True]
    assert await other_pg_node.claim([Claim("j", 100, 30_000)], B) == [False]
    assert other_pg_node.known_fence("j") == 0
    await acquire(pg_store, request(100))
    await lose_rows(pg_store, 100)
    assert await other_pg_node.claim([Claim("j", 101, 30_000)], B) == [True]
    assert other_pg_node.known_fence("j") > 0
    reply = await acquire(other_pg_node, request(101, B))
    assert reply.data_lost
    assert reply.hold_ms > 0


async def test_a_winner_that_never_decided_is_no_loss(
    pg_store: PostgresStore, other_pg_node: PostgresStore
) -> None:
    assert await pg_store.claim([Claim("j", 100, 30_000)], A) == [True]
    assert await other_pg_node.claim([Claim("j", 100, 30_000)], B) == [False]
    assert await other_pg_node.claim([Claim("j", 101, 30_000)], B) == [True]
    assert other_pg_node.known_fence("j") == 0
    reply = await acquire(other_pg_node, request(101, B))
    assert (reply.data_lost, reply.hold_ms) == (False, 0)


async def test_a_lost_claim_near_its_expiry_witnesses_nothing(
    pg_store: PostgresStore, other_pg_node: PostgresStore
) -> None:
    assert await pg_store.claim([Claim("j", 100, 1_000)], A) == [True]
    assert await other_pg_node.claim([Claim("j", 100, 1_000)], B) == [False]
    await lose_rows(pg_store, 100)
    assert await other_pg_node.claim([Claim("j", 101, 30_000)], B) == [True]
    assert other_pg_node.known_fence("j") == 0
