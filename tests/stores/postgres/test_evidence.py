"""A job's lost rows, told by what a node has seen (PostgreSQL's evidence, in rows).

A job whose row is gone (a restore from an old backup, a failover to a standby that lacked
the last commits, an operator's DELETE) looks new inside the database. A node tells the
difference by its evidence, sent with each decision (``known_fence``): the fences it was
granted, the counter read with a claim (claim.sql) or with the cursors, and a claim it
lost that vanished before its expiry (a witness). With evidence, the decision records
``data_lost`` and holds new grants for one lease_ttl; without, the job is new.
"""

from __future__ import annotations

import pytest

from cronrace.model.policies import Overlap
from cronrace.protocol import DecideReply, DecideRequest, Verdict
from cronrace.stores.postgres import PostgresStore
from cronrace.stores.values import Claim, Owner
from tests.stores.postgres.conftest import sql

pytestmark = pytest.mark.postgres

A, B = Owner.parse("a:1"), Owner.parse("b:2")


def request(tick: int, owner: Owner = A, *, cursor: int | None = None) -> DecideRequest:
    """The decision of ``tick`` from ``cursor`` (None: a first decision), firing it."""
    from_s = tick - 60 if cursor is None else cursor
    return DecideRequest(
        "j", tick, cursor, from_s, (tick,), (), str(owner), Overlap.SKIP, 5000, 60_000
    )


async def decide(store: PostgresStore, req: DecideRequest) -> DecideReply:
    (reply,) = await store.decide([req])
    assert isinstance(reply, DecideReply), reply
    return reply


async def wipe(store: PostgresStore) -> None:
    """The job's row lost: what a restore or a lossy failover leaves."""
    await sql(store, "DELETE FROM @schema@.jobs WHERE ns = %(ns)s AND job = 'j'")


async def claim(store: PostgresStore, tick: int, owner: Owner, ttl_ms: int = 60_000) -> bool:
    (won,) = await store.claim([Claim("j", tick, ttl_ms)], owner)
    return won


def lost_data(reply: DecideReply) -> tuple[bool, bool]:
    """Whether the decision said so, and whether it holds its grant."""
    return reply.data_lost, reply.hold_ms > 0


# -- a node's evidence ---------------------------------------------------------------------


async def test_a_brand_new_job_is_granted_at_once(pg_store: PostgresStore) -> None:
    reply = await decide(pg_store, request(600))
    assert reply.verdict is Verdict.RUN
    assert lost_data(reply) == (False, False)


async def test_its_own_grant_is_evidence(pg_store: PostgresStore) -> None:
    first = await decide(pg_store, request(600))
    assert pg_store.known_fence("j") == first.fence
    await wipe(pg_store)
    # Its cursor read again: none (a wipe looks new), but the counter it knows is missing.
    assert await pg_store.cursors(["j"]) == {"j": None}
    after = await decide(pg_store, request(660))
    assert lost_data(after) == (True, True)
    assert after.fence > first.fence


async def test_a_claim_lost_after_the_winner_decided_reads_its_fence(
    pg_store: PostgresStore, other_pg_node: PostgresStore
) -> None:
    assert await claim(pg_store, 600, A)
    granted = await decide(pg_store, request(600))
    assert not await claim(other_pg_node, 600, B, 5000)
    assert other_pg_node.known_fence("j") == granted.fence
    await wipe(pg_store)
    assert lost_data(await decide(other_pg_node, request(660, B))) == (True, True)


async def test_a_claim_lost_to_an_undecided_winner_is_no_evidence(
    pg_store: PostgresStore, other_pg_node: PostgresStore
) -> None:
    assert await claim(pg_store, 600, A)
    assert not await claim(other_pg_node, 600, B, 5000)
    assert other_pg_node.known_fence("j") == 0
    assert lost_data(await decide(other_pg_node, request(660, B))) == (False, False)


async def test_the_counter_read_with_the_cursors_is_evidence(
    pg_store: PostgresStore, other_pg_node: PostgresStore
) -> None:
    await decide(pg_store, request(600))
    assert await other_pg_node.cursors(["j"]) == {"j": 600}
    await wipe(pg_store)
    # Planned from the cursor it read: the database has none where it saw one.
    assert lost_data(await decide(other_pg_node, request(660, B, cursor=600))) == (True, True)


async def test_a_node_that_never_saw_the_job_cannot_tell_a_wipe(
    pg_store: PostgresStore, other_pg_node: PostgresStore
) -> None:
    await decide(pg_store, request(600))
    await wipe(pg_store)
    assert lost_data(await decide(other_pg_node, request(660, B))) == (False, False)


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
    assert await claim(pg_store, 600, A, 30_000)
    assert not await claim(other_pg_node, 600, B, 30_000)
    assert other_pg_node.known_fence("j") == 0
    await decide(pg_store, request(600))
    await lose_rows(pg_store, 600)
    assert await claim(other_pg_node, 660, B, 30_000)
    assert other_pg_node.known_fence("j") > 0
    assert lost_data(await decide(other_pg_node, request(660, B))) == (True, True)


async def test_a_winner_that_never_decided_is_no_loss(
    pg_store: PostgresStore, other_pg_node: PostgresStore
) -> None:
    assert await claim(pg_store, 600, A, 30_000)
    assert not await claim(other_pg_node, 600, B, 30_000)
    assert await claim(other_pg_node, 660, B, 30_000)
    assert other_pg_node.known_fence("j") == 0
    assert lost_data(await decide(other_pg_node, request(660, B))) == (False, False)


async def test_a_lost_claim_near_its_expiry_witnesses_nothing(
    pg_store: PostgresStore, other_pg_node: PostgresStore
) -> None:
    assert await claim(pg_store, 600, A, 1_000)
    assert not await claim(other_pg_node, 600, B, 1_000)
    await lose_rows(pg_store, 600)
    assert await claim(other_pg_node, 660, B, 30_000)
    assert other_pg_node.known_fence("j") == 0


# -- control notices -----------------------------------------------------------------------


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
