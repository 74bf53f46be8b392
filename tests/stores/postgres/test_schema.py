"""The schema: created and upgraded by an explicit step, versioned, checked by agents."""

from __future__ import annotations

import subprocess

import pytest

from cronrace.errors import StoreSchemaError
from cronrace.stores.postgres import PostgresStore
from cronrace.stores.postgres.ddl import upgrade_sql
from cronrace.stores.postgres.queries import functions_digest, latest_version
from cronrace.stores.postgres.schema import FUNCTION_DIGESTS, upgrade
from tests.postgres_server import BINDIR, PostgresServer
from tests.stores.postgres.conftest import sql

pytestmark = pytest.mark.postgres


def test_every_change_to_a_function_comes_with_a_new_schema_version() -> None:
    """Agents compare versions, not function bodies: a changed function needs a migration
    (a new sql/migrations/NNNN_*.sql, even one with no statement) and its digest here."""
    assert FUNCTION_DIGESTS[latest_version()] == functions_digest()


@pytest.fixture
async def fresh_schema_store(postgres_server: PostgresServer, namespace: str) -> PostgresStore:
    store = PostgresStore.from_url(f"{postgres_server.url}?schema=s_{namespace}", namespace)
    yield store  # type: ignore[misc]
    await sql(store, "DROP SCHEMA IF EXISTS @schema@ CASCADE")
    await store.aclose()


async def test_a_missing_schema_is_refused_naming_the_command(
    fresh_schema_store: PostgresStore,
) -> None:
    with pytest.raises(StoreSchemaError, match="cronrace db upgrade"):
        await fresh_schema_store.prepare()
    assert "cronrace db upgrade" in (fresh_schema_store.access.problem() or "")


async def test_upgrade_is_idempotent_and_an_older_schema_is_refused(
    fresh_schema_store: PostgresStore,
) -> None:
    assert await upgrade(fresh_schema_store.db) == (0, latest_version())
    assert await upgrade(fresh_schema_store.db) == (latest_version(), latest_version())
    await fresh_schema_store.prepare()
    assert fresh_schema_store.access.problem() is None
    await sql(fresh_schema_store, "UPDATE @schema@.schema_version SET version = 0")
    needs = rf"at version 0, this cronrace needs {latest_version()}.*db upgrade"
    with pytest.raises(StoreSchemaError, match=needs):
        await fresh_schema_store.prepare()


async def test_upgrades_racing_each_other_both_succeed(fresh_schema_store: PostgresStore) -> None:
    import anyio

    other = PostgresStore.from_url(
        fresh_schema_store.db.target.conninfo + f"?schema={fresh_schema_store.db.target.schema}"
    )
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(upgrade, fresh_schema_store.db)
            tg.start_soon(upgrade, other.db)
        await fresh_schema_store.prepare()
    finally:
        await other.aclose()


def test_the_printed_script_builds_the_schema_with_psql(postgres_server: PostgresServer) -> None:
    script = upgrade_sql("printed")
    assert BINDIR is not None
    psql = BINDIR / "psql"
    assert psql.exists()
    try:
        done = subprocess.run(
            [str(psql), postgres_server.url, "-v", "ON_ERROR_STOP=1", "-1", "-q", "-f", "-"],
            input=script * 2,  # twice: the script may be run on a schema at any version
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert postgres_server.execute("SELECT version FROM printed.schema_version") == [
            (latest_version(),)
        ]
    finally:
        postgres_server.execute("DROP SCHEMA IF EXISTS printed CASCADE")


async def test_the_heartbeat_of_the_release_before_still_answers_on_this_schema(
    pg_store: PostgresStore,
) -> None:
    """A rolling deploy upgrades the schema first (version 13 gave heartbeat() the members
    to ask for again): agents of the release before still call it with the eleven
    arguments of version 12, and read the changes as they did."""
    now_ms = int((await sql(pg_store, "SELECT @schema@.now_us()"))[0][0]) // 1000
    old = (
        "SELECT @schema@.heartbeat(%(ns)s, %(node)s, %(now)s, 6000, 'e', false, %(since)s,"
        " true, %(after)s, '', false)"
    )
    first = (await sql(pg_store, old, node="old", now=now_ms, since=None, after=0))[0][0]
    assert "old" in first["members"]
    await pg_store.heartbeat("new", now_ms=now_ms, ttl_ms=6000, epoch_candidate="e")
    since = int(first["cursor"])
    changes = await sql(pg_store, old, node="old", now=now_ms, since=since, after=now_ms)
    found = changes[0][0]
    assert [entry[1:3] for entry in found["changes"]["entries"]] == [
        ["new", "join"],
        ["old", "join"],  # its own, logged again: it was told it joined
    ]
    assert found["live_count"] == 2
