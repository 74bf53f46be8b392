"""PostgreSQL store tests: a real server per test process, a namespace per test."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest

from cronrace.stores.postgres import PostgresStore
from cronrace.stores.postgres.queries import bind_schema
from tests.postgres_server import PostgresServer

pytestmark = pytest.mark.postgres


@pytest.fixture
async def pg_store(postgres_server: PostgresServer, namespace: str) -> AsyncIterator[PostgresStore]:
    """A PostgreSQL store in this test's namespace (the schema exists)."""
    store = PostgresStore.from_url(postgres_server.url, namespace)
    await store.prepare()
    yield store
    await store.aclose()


@pytest.fixture
async def other_pg_node(
    postgres_server: PostgresServer, namespace: str
) -> AsyncIterator[PostgresStore]:
    """A second node's store on the same database: its own evidence of fences."""
    store = PostgresStore.from_url(postgres_server.url, namespace)
    yield store
    await store.aclose()


async def sql(store: PostgresStore, text: str, **params: Any) -> list[tuple[Any, ...]]:
    """Run one statement on the store's database as the test's superuser (schema bound)."""
    query = bind_schema(text, store.db.target.schema)
    async with await psycopg.AsyncConnection.connect(
        store.db.target.conninfo, autocommit=True
    ) as conn:
        cursor = await conn.execute(query.encode(), {"ns": store.ns, **params})
        return list(await cursor.fetchall()) if cursor.description else []


async def job_row(store: PostgresStore, job: str = "j") -> dict[str, Any]:
    """The job's row as a dict (empty when it has none)."""
    schema = store.db.target.schema
    async with await psycopg.AsyncConnection.connect(
        store.db.target.conninfo, autocommit=True
    ) as conn:
        query = bind_schema("SELECT * FROM @schema@.jobs WHERE ns = %s AND job = %s", schema)
        cursor = await conn.execute(query.encode(), (store.ns, job))
        row = await cursor.fetchone()
        names = [column.name for column in cursor.description or []]
        return dict(zip(names, row, strict=True)) if row else {}
