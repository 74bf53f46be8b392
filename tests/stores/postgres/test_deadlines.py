"""A call past its deadline leaves nothing waiting on the server, and a heartbeat does not
wait for another node's.

What a table locked for seconds did to a fleet of three (tests/faults, the exhausted pool):
every statement cut off by its deadline lived on in its backend, the heartbeats pruning
expired members waited for each other's rows, and the nodes claimed again only seconds
after the lock was let go.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
import psycopg
import pytest

from cronrace.errors import StoreAmbiguousError
from cronrace.stores.postgres import PostgresStore
from cronrace.stores.postgres.queries import bind_schema
from tests.postgres_server import PostgresServer

pytestmark = pytest.mark.postgres


@pytest.fixture
async def quick_store(
    postgres_server: PostgresServer, namespace: str
) -> AsyncIterator[PostgresStore]:
    """A store whose calls have 0.5 s (twice its 0.25 s timeout) to be answered."""
    store = PostgresStore.from_url(postgres_server.url, namespace, timeout_s=0.25)
    await store.prepare()
    yield store
    await store.aclose()


def beat(store: PostgresStore, node: str, now_ms: int, *, prune: bool) -> dict[str, Any]:
    """The parameters of one heartbeat statement."""
    return {
        "ns": store.ns,
        "node": node,
        "now_ms": now_ms,
        "ttl_ms": 1000,
        "epoch": "e",
        "prune": prune,
        "since": None,
        "joined": False,
        "live_after_ms": 0,
        "asserted": "",
        "read_asserted": False,
        "recheck": [],
    }


async def waiting_on_locks(server: PostgresServer, marker: str) -> list[tuple[Any, ...]]:
    """The server's backends waiting on a lock in a statement containing ``marker``."""
    async with await psycopg.AsyncConnection.connect(server.url, autocommit=True) as conn:
        cursor = await conn.execute(
            "SELECT pid, state, left(query, 60) FROM pg_stat_activity "
            "WHERE wait_event_type = 'Lock' AND position(%s in query) > 0 "
            "AND pid <> pg_backend_pid()",
            (marker,),
        )
        return list(await cursor.fetchall())


async def test_a_statement_past_its_deadline_is_cancelled_on_the_server_and_its_connection_kept(
    quick_store: PostgresStore, postgres_server: PostgresServer
) -> None:
    """Before, the anyio deadline also interrupted psycopg's cancel request: psycopg logged
    'query cancellation interrupted', dropped the connection, and the backend kept waiting
    for the lock (then ran the heartbeat once the lock was let go)."""
    store = quick_store
    schema = store.db.target.schema
    now_ms = int(time.time() * 1000)
    await store.db.value("heartbeat", beat(store, "n0", now_ms, prune=False))
    async with await psycopg.AsyncConnection.connect(postgres_server.url) as locker:
        await locker.execute(
            bind_schema("LOCK TABLE @schema@.nodes IN ACCESS EXCLUSIVE MODE", schema).encode()
        )
        started = time.monotonic()
        with pytest.raises(StoreAmbiguousError, match="did not answer heartbeat"):
            await store.db.value("heartbeat", beat(store, "n0", now_ms + 1, prune=False))
        assert time.monotonic() - started < 0.5 + 1.0  # the deadline, and the cancel's grace
        assert await waiting_on_locks(postgres_server, ".heartbeat(") == []
        stats = store.db.pool.get_stats()
        assert stats.get("returns_bad", 0) == 0, stats  # given back whole, not dropped
        await locker.rollback()
    reply = await store.db.value("heartbeat", beat(store, "n0", now_ms + 2, prune=False))
    assert "n0" in reply["members"]


async def test_a_pruning_heartbeat_skips_an_expired_member_whose_own_heartbeat_holds_its_row(
    quick_store: PostgresStore, postgres_server: PostgresServer
) -> None:
    """Two nodes expired by an outage beat at once: each holds its own row and prunes the
    other's. Before, prune() waited for the row (PostgreSQL broke the deadlock after a
    second, failing one heartbeat); now it leaves the row to the heartbeat refreshing it."""
    store = quick_store
    schema = store.db.target.schema
    now_ms = int(time.time() * 1000)
    for node in ("n0", "n1", "n2"):
        await store.db.value("heartbeat", beat(store, node, now_ms - 60_000, prune=False))
    async with await psycopg.AsyncConnection.connect(postgres_server.url) as other:
        # n1's heartbeat, in flight: its row locked, not yet committed.
        await other.execute(
            bind_schema(
                "UPDATE @schema@.nodes SET expires_ms = %s WHERE ns = %s AND node = 'n1'", schema
            ).encode(),
            (now_ms + 1000, store.ns),
        )
        with anyio.fail_after(5):
            await store.db.value("heartbeat", beat(store, "n0", now_ms, prune=True))
        await other.commit()
    async with await psycopg.AsyncConnection.connect(postgres_server.url, autocommit=True) as conn:
        cursor = await conn.execute(
            bind_schema(
                "SELECT node FROM @schema@.nodes WHERE ns = %s ORDER BY node", schema
            ).encode(),
            (store.ns,),
        )
        left = [row[0] for row in await cursor.fetchall()]
    assert left == ["n0", "n1"]  # n2, expired and not held, pruned
