"""An error PostgreSQL raises inside a function reaches logs and readiness as one line."""

from __future__ import annotations

import psycopg
import pytest

from cronrace.errors import StoreUnavailableError
from cronrace.stores.postgres.errors import translate
from tests.postgres_server import PostgresServer

pytestmark = pytest.mark.postgres


async def test_a_statement_timeout_inside_a_function_is_one_line_with_its_sqlstate(
    postgres_server: PostgresServer,
) -> None:
    # What a locked table did to the heartbeat: the timeout met inside a PL/pgSQL function,
    # whose CONTEXT lines (the statement it ran) psycopg appends to the message.
    async with await psycopg.AsyncConnection.connect(postgres_server.url, autocommit=True) as conn:
        await conn.execute(
            "CREATE OR REPLACE FUNCTION pg_temp.slow() RETURNS void LANGUAGE plpgsql AS $$"
            " BEGIN PERFORM pg_sleep(1) FROM generate_series(1, 2); END $$"
        )
        await conn.execute("SET statement_timeout = 50")
        with pytest.raises(psycopg.errors.QueryCanceled) as raised:
            await conn.execute("SELECT pg_temp.slow()")
    assert "CONTEXT" in str(raised.value)  # what the error carries
    error = translate(raised.value)
    assert isinstance(error, StoreUnavailableError)
    assert str(error) == "canceling statement due to statement timeout (SQLSTATE 57014)"
