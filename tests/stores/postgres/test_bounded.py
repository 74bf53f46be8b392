"""The tables stay bounded: claims, records and members are deleted as the clock moves.

A schema of its own per test, its ``now_us()`` replaced by a clock the test sets
(benchmarks/tables.py, the day measurement, drives the same node at full scale): ticks
advance without waiting for real seconds, and every expiry the store computes follows.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from benchmarks.tables import (
    START_S,
    TABLES,
    Day,
    SimulatedNode,
    clock_setter,
    fake_clock_sql,
    table_sizes,
)
from cronrace.fleet.heartbeat import PRUNE_EVERY_BEATS
from cronrace.stores.postgres import PostgresStore
from cronrace.stores.postgres.schema import upgrade
from tests.postgres_server import PostgresServer
from tests.stores.postgres.conftest import sql

pytestmark = pytest.mark.postgres


@pytest.fixture
async def clocked_store(
    postgres_server: PostgresServer, namespace: str
) -> AsyncIterator[PostgresStore]:
    """A store on a schema of its own whose database clock the test sets."""
    store = PostgresStore.from_url(f"{postgres_server.url}?schema=s_{namespace}", namespace)
    await upgrade(store.db)
    await sql(store, fake_clock_sql(store.db.target.schema))
    yield store
    await sql(store, "DROP SCHEMA IF EXISTS @schema@ CASCADE")
    await store.aclose()


async def test_one_prune_deletes_every_expired_claim_up_to_the_cursor(
    clocked_store: PostgresStore,
) -> None:
    """12,000 prunable claims (a node's 20 s between prunes of 600 one-second jobs, each
    holding its decision's answer) go in one call; a claim not yet expired, and a decided
    one above the cursor, stay. One batch of 5,000 a call kept up with 250 claims a second
    (12,000 -> 7,000 left)."""
    store = clocked_store
    now_s = START_S + 1000
    await clock_setter(store)(now_s)
    await sql(
        store,
        "INSERT INTO @schema@.jobs (ns, job, cursor_tick, fence) "
        "SELECT %(ns)s, 'j' || g, %(now)s, 1 FROM generate_series(0, 599) g",
        now=now_s,
    )
    await sql(
        store,
        "INSERT INTO @schema@.claims (ns, job, tick, owner, expires_us, memo) "
        "SELECT %(ns)s, 'j' || g, t, 'n:1', (t + 306) * 1000000, '{\"answer\": \"decided\"}' "
        "FROM generate_series(0, 599) g, generate_series(%(first)s::bigint, %(first)s + 19) t",
        first=now_s - 326,
    )
    kept = [
        ("j1", now_s - 400, (now_s + 10) * 1_000_000),  # not expired yet
        ("j2", now_s + 1, (now_s - 1) * 1_000_000),  # decided above the cursor
    ]
    for job, tick, expires_us in kept:
        await sql(
            store,
            "INSERT INTO @schema@.claims (ns, job, tick, owner, expires_us, memo) "
            "VALUES (%(ns)s, %(job)s, %(tick)s, 'n:2', %(expires)s, '{\"answer\": \"decided\"}')",
            job=job,
            tick=tick,
            expires=expires_us,
        )

    reply = await store.db.value(
        "heartbeat",
        {
            "ns": store.ns,
            "node": "n0",
            "now_ms": now_s * 1000,
            "ttl_ms": 6000,
            "epoch": "e",
            "prune": True,
            "since": None,
            "joined": True,
            "live_after_ms": 0,
            "asserted": "",
            "read_asserted": False,
            "recheck": [],
        },
    )

    left = await sql(store, "SELECT job, tick FROM @schema@.claims WHERE ns = %(ns)s ORDER BY job")
    assert sorted(left) == sorted((job, tick) for job, tick, _expires in kept)
    assert reply["pruned"] == 12_000


async def test_tables_stay_bounded_over_many_ticks(clocked_store: PostgresStore) -> None:
    """120 ticks of 20 one-second jobs on one node (claim TTL 6 s, history 5) and a member
    that beats for 10 s and dies: claims stay within the TTL plus one prune period of
    ticks, records at the history, the dead member's rows go (live set and fleet);
    nothing grows after the plateau."""
    store = clocked_store
    day = Day(jobs=20, full_s=120, hours=0, history=5, claim_ttl_ms=6000, namespace=store.ns)
    node = SimulatedNode(store, day, clock_setter(store))
    prune_period_s = 2 * PRUNE_EVERY_BEATS
    claims_bound = day.jobs * (day.claim_ttl_ms // 1000 + prune_period_s + 2)
    await node.beat("dies", START_S - 1)
    sizes = []
    for tick in range(START_S, START_S + day.full_s):
        await node.tick(tick)
        if tick - START_S < 10 and tick % 2 == 0:
            await node.beat("dies", tick)
        if (tick - START_S) % 20 == 19:
            sizes.append(await table_sizes(store))

    assert node.ran == day.jobs * day.full_s
    for found in sizes:
        assert found["claims"]["rows"] <= claims_bound, found
    assert sizes[-1]["runs"]["rows"] == day.jobs * day.history
    assert sizes[-1]["jobs"]["rows"] == day.jobs
    live = await sql(store, "SELECT node FROM @schema@.nodes WHERE ns = %(ns)s")
    assert live == [("n0",)]
    published = await sql(store, "SELECT node FROM @schema@.fleet WHERE ns = %(ns)s")
    assert published == [("n0",)]
    # The plateau: after the first prune periods the claims neither grow nor vanish.
    settled = [found["claims"]["rows"] for found in sizes[2:]]
    assert max(settled) - min(settled) <= day.jobs * prune_period_s, settled
    assert set(TABLES) == set(sizes[-1])
