"""The PostgreSQL store under the behaviour suite: one real server per test session.

One connection pool per session, shared by every test; each test has a namespace of its
own (a column), and each of its nodes a :class:`~cronrace.stores.postgres.PostgresStore`
of its own on that pool (its own evidence of fences). The faults of
:mod:`tests.stores.harness` are spelled here in rows.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import psycopg
import pytest

from cronrace.stores.contract import Store
from cronrace.stores.postgres import PostgresStore
from cronrace.stores.postgres.database import Database
from cronrace.stores.postgres.queries import bind_schema
from cronrace.stores.postgres.urls import parse_postgres_url
from cronrace.stores.values import Claim, Owner
from tests.postgres_server import PostgresServer
from tests.stores.harness import JOB_PARTS, RoundTrips

#: The columns of a job's row each part of the harness's wipe erases.
_WIPED = {
    "lease": "lease_owner = NULL, lease_fence = NULL, lease_tick = NULL, lease_ticks = NULL, "
    "lease_trigger = NULL, lease_started_ms = NULL, lease_expires_us = NULL, "
    "lease_held = false, lease_reasserted = false",
    "fence": "fence = NULL",
    "cursor": "cursor_tick = NULL, origin_tick = NULL",
    "state": "paused = false, run_fence = NULL, run_tick = NULL, run_ticks = NULL, "
    "run_owner = NULL, run_trigger = NULL, outstanding = '[]', skipped_overlap = NULL, "
    "skipped_paused = NULL, missed = NULL, queued = NULL, abandoned = NULL, "
    "pending_trigger = NULL, spec = '{}', registered = false",
    "pending": "pending_tick = NULL",
}


class PostgresFaults:
    """The harness's faults, spelled in the rows of one namespace."""

    def __init__(self, db: Database, namespace: str) -> None:
        self.db = db
        self.ns = namespace

    async def _sql(self, text: str, **params: Any) -> None:
        query = bind_schema(text, self.db.target.schema)
        async with await psycopg.AsyncConnection.connect(
            self.db.target.conninfo, autocommit=True
        ) as conn:
            await conn.execute(query.encode(), {"ns": self.ns, **params})

    async def expire_lease(self, job: str) -> None:
        await self._sql(
            "UPDATE @schema@.jobs SET lease_expires_us = 0 WHERE ns = %(ns)s AND job = %(job)s",
            job=job,
        )

    async def age_lease(self, job: str, left_ms: int) -> None:
        await self._sql(
            "UPDATE @schema@.jobs SET lease_expires_us = @schema@.now_us() + %(left)s * 1000 "
            "WHERE ns = %(ns)s AND job = %(job)s",
            job=job,
            left=left_ms,
        )

    async def end_hold(self, job: str) -> None:
        await self._sql(
            "UPDATE @schema@.jobs SET hold_until_us = NULL WHERE ns = %(ns)s AND job = %(job)s",
            job=job,
        )

    async def wipe(self, job: str, *parts: str) -> None:
        columns = ", ".join(_WIPED[part] for part in parts or JOB_PARTS)
        await self._sql(
            f"UPDATE @schema@.jobs SET {columns} WHERE ns = %(ns)s AND job = %(job)s",  # noqa: S608 - our own column lists
            job=job,
        )

    async def set_fence_counter(self, job: str, value: int) -> None:
        await self._sql(
            "INSERT INTO @schema@.jobs (ns, job, fence) VALUES (%(ns)s, %(job)s, %(value)s) "
            "ON CONFLICT (ns, job) DO UPDATE SET fence = excluded.fence",
            job=job,
            value=value,
        )

    async def forget_answer(self, claim: Claim, owner: Owner) -> None:
        await self._sql(
            "UPDATE @schema@.claims SET memo = NULL, request_id = NULL, owner = %(owner)s "
            "WHERE ns = %(ns)s AND job = %(job)s AND tick = %(tick)s AND trigger_id = %(tid)s",
            owner=str(owner),
            job=claim.job,
            tick=0 if claim.trigger_id else claim.tick_s,
            tid=claim.trigger_id or "",
        )

    async def expire_claim(self, claim: Claim) -> None:
        # Run out, not yet swept: a new claim of the tick would take the row over.
        await self._sql(
            "UPDATE @schema@.claims SET expires_us = 0 "
            "WHERE ns = %(ns)s AND job = %(job)s AND tick = %(tick)s AND trigger_id = %(tid)s",
            job=claim.job,
            tick=0 if claim.trigger_id else claim.tick_s,
            tid=claim.trigger_id or "",
        )

    async def age_claim(self, claim: Claim, left_ms: int) -> None:
        await self._sql(
            "UPDATE @schema@.claims SET expires_us = @schema@.now_us() + %(left)s * 1000 "
            "WHERE ns = %(ns)s AND job = %(job)s AND tick = %(tick)s AND trigger_id = ''",
            job=claim.job,
            tick=claim.tick_s,
            left=left_ms,
        )

    async def wipe_schedules(self) -> None:
        await self._sql("DELETE FROM @schema@.schedules WHERE ns = %(ns)s")
        await self._sql("DELETE FROM @schema@.schedule_versions WHERE ns = %(ns)s")


class PostgresBackend:
    """One test's namespace on the PostgreSQL deployment."""

    name = "postgres"
    shards = 1

    def __init__(self, db: Database, namespace: str) -> None:
        self.db = db
        self.ns = namespace
        self.faults = PostgresFaults(db, namespace)

    async def node(self) -> Store:
        return PostgresStore(self.db, self.ns)

    @asynccontextmanager
    async def round_trips(self) -> AsyncIterator[RoundTrips]:
        """Count every statement the shared database sends inside the block."""
        trips = RoundTrips()
        rows = self.db.rows

        async def counted(*args: Any, **kwargs: Any) -> Any:
            trips.count += 1
            return await rows(*args, **kwargs)

        self.db.rows = counted  # type: ignore[method-assign]
        try:
            yield trips
        finally:
            del self.db.rows  # the class's method again


class PostgresDeployment:
    """The test session's PostgreSQL server and the pool every test on it shares."""

    name = "postgres"

    def __init__(self, db: Database) -> None:
        self.db = db

    def backend(self, namespace: str) -> AbstractAsyncContextManager[PostgresBackend]:
        @asynccontextmanager
        async def opened() -> AsyncIterator[PostgresBackend]:
            yield PostgresBackend(self.db, namespace)

        return opened()


@asynccontextmanager
async def open_postgres_deployment(request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    """Open the session's PostgreSQL deployment (its schema created by the fixture)."""
    server: PostgresServer = request.getfixturevalue("postgres_server")
    db = Database(parse_postgres_url(server.url))
    try:
        await PostgresStore(db, "cronrace").prepare()
        yield PostgresDeployment(db)
    finally:
        await db.aclose()


POSTGRES_DEPLOYMENTS = [
    pytest.param(open_postgres_deployment, id="postgres", marks=pytest.mark.postgres),
]
