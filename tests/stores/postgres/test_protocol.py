"""The PostgreSQL store's own calls, in rows: claims, records, job states, fenced writes.

What a decision, a renewal and a run's end do is the reference's (the differential tests
hold each to it, tests/stores/differential/test_postgres.py); here is what only this store
shows: the rows a claim leaves, the records table and its readers, the operator's reads,
a failing request in a batch.
"""

from __future__ import annotations

import pytest

from cronrace.model.policies import Outcome, Overlap
from cronrace.model.records import RunRecord
from cronrace.protocol import DecideReply, DecideRequest
from cronrace.stores.postgres import PostgresStore
from cronrace.stores.values import Claim, Owner
from tests.stores.postgres.conftest import job_row, sql

pytestmark = pytest.mark.postgres

N1, N2 = Owner.parse("n1:x"), Owner.parse("n2:y")


def request(job: str = "j", tick: int = 600) -> DecideRequest:
    return DecideRequest(
        job, tick, None, tick - 60, (tick,), (), str(N1), Overlap.SKIP, 5000, 60_000
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


async def test_a_claim_read_back_is_won_only_while_undecided(pg_store: PostgresStore) -> None:
    """claim_each(read_back=True) after a lost reply: its own undecided claim counts won,
    one its owner decided (decide() kept the answer there) never does."""
    claims = [Claim("j", 600, 5000)]
    assert await pg_store.claim(claims, N1) == [True]
    assert [r.outcome.value for r in await pg_store.claim_each(claims, N1, read_back=True)] == [
        "won"
    ]
    assert [r.outcome.value for r in await pg_store.claim_each(claims, N2, read_back=True)] == [
        "lost"
    ]
    (decided,) = await pg_store.decide([request()])
    assert isinstance(decided, DecideReply)
    assert [r.outcome.value for r in await pg_store.claim_each(claims, N1, read_back=True)] == [
        "lost"
    ]
    assert await pg_store.read_claims(claims, N1) == [True]


async def test_one_failing_request_costs_its_job_only(pg_store: PostgresStore) -> None:
    """Each request of decide() runs in a subtransaction: one that fails (here a tick no
    caller sends) answers its error, its writes undone; the others are decided."""
    requests = (
        '[{"job": "a", "tick": 600, "cursor": null, "from": 540, "fire": [600], '
        '"missed": [], "owner": "n1:x", "overlap": "skip", "lease_ttl_ms": 5000, '
        '"claim_ttl_ms": 60000}, {"job": "bad", "tick": "soon", "owner": "n1:x", '
        '"lease_ttl_ms": 5000}]'
    )
    rows = await sql(
        pg_store,
        "SELECT i, reply FROM @schema@.decide(%(ns)s, %(requests)s::jsonb)",
        requests=requests,
    )
    replies = dict(rows)
    assert replies[0]["answer"] == "decided"
    assert "soon" in replies[1]["error"]
    assert replies[1]["sqlstate"] == "22P02"
    assert await pg_store.cursors(["a", "bad"]) == {"a": 600, "bad": None}


@pytest.mark.parametrize("paused", [True, False])
async def test_job_states_report_cursor_lease_pause_and_counters(
    pg_store: PostgresStore, paused: bool
) -> None:
    (reply,) = await pg_store.decide([request()])
    assert isinstance(reply, DecideReply)
    await pg_store.set_paused("j", paused)
    state, unknown = await pg_store.job_states(["j", "never"])
    assert state.cursor_s == 600
    assert state.lease is not None
    assert (state.lease.fence, state.lease.tick_s) == (reply.fence, 600)
    assert 0 < state.lease.ttl_ms <= 5000
    assert state.paused is paused
    assert state.last_fence == reply.fence
    assert (unknown.cursor_s, unknown.lease, unknown.last_fence) == (None, None, None)
    row = await job_row(pg_store)
    assert (row["lease_owner"], row["lease_ticks"], row["run_fence"]) == (
        "n1:x",
        [600],
        reply.fence,
    )
