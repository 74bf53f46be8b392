"""The schema: created and upgraded by an explicit step, versioned, checked by agents."""

from __future__ import annotations

import subprocess

import pytest

from cronrace.errors import StoreSchemaError
from cronrace.stores.postgres import PostgresStore
from cronrace.stores.postgres.ddl import upgrade_sql
from cronrace.stores.postgres.queries import (
    bind_schema,
    functions_digest,
    latest_version,
    migrations,
    read_sql,
)
from cronrace.stores.postgres.schema import FUNCTION_DIGESTS, upgrade
from cronrace.stores.urls import upgrade_store_schema
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


def test_the_dense_cursor_is_schema_version_23_and_the_watermark_gone_in_24() -> None:
    """An agent of this release refuses a schema an older cronrace left (check() compares
    with latest_version()): the dense cursor's columns and functions came with version 23."""
    assert latest_version() == 24
    assert max(FUNCTION_DIGESTS) == 24
    assert [name for _v, name, _t in migrations()[-2:]] == [
        "0023_dense_cursor.sql",
        "0024_old_protocol_dropped.sql",
    ]


def _schema_at(version: int, schema: str) -> str:
    """The script that builds ``schema`` as cronrace left it at ``version`` (its tables; the
    functions are the next upgrade's to replace)."""
    parts = [read_sql("upgrade_begin.sql").replace("@lock@", "1")]
    parts += [text for number, _name, text in migrations() if number <= version]
    parts.append(
        read_sql("upgrade_end.sql").replace("@version@", str(version)).replace("@functions@", "x")
    )
    return bind_schema("\n".join(parts), schema)


async def test_upgrading_a_version_22_schema_seeds_each_cursor_from_its_watermark(
    fresh_schema_store: PostgresStore,
) -> None:
    store = fresh_schema_store
    await sql(store, _schema_at(22, store.db.target.schema))
    await sql(
        store,
        "INSERT INTO @schema@.jobs (ns, job, watermark, lease_owner, lease_fence, lease_tick, "
        "lease_expires_us, run_owner, run_fence, run_tick) VALUES "
        "(%(ns)s, 'running', 1800000060, 'n1:a', 77, 1800000060, 9e15, 'n1:a', 77, 1800000060),"
        "(%(ns)s, 'idle', 1800000120, NULL, NULL, NULL, NULL, NULL, NULL, NULL),"
        "(%(ns)s, 'new', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
    )
    with pytest.raises(StoreSchemaError, match="at version 22, this cronrace needs 24"):
        await store.prepare()

    message = await upgrade_store_schema(
        f"{store.db.target.conninfo}?schema={store.db.target.schema}"
    )

    assert "upgraded from version 22 to 24" in message
    assert "cursor was seeded from its watermark" in message
    await store.prepare()
    assert await store.cursors(["running", "idle", "new", "unknown"]) == {
        "running": 1800000060,
        "idle": 1800000120,
        "new": None,
        "unknown": None,
    }
    rows = await sql(
        store,
        "SELECT job, origin_tick, lease_ticks, run_ticks FROM @schema@.jobs "
        "WHERE ns = %(ns)s ORDER BY job",
    )
    assert rows == [
        ("idle", 1800000120, None, None),
        ("new", None, None, None),
        ("running", 1800000060, [1800000060], [1800000060]),
    ]
    # Run again (a second node's upgrade, a DBA's script): nothing moves.
    assert await upgrade(store.db) == (24, 24)
    assert (await store.cursors(["idle"]))["idle"] == 1800000120
