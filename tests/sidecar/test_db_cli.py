"""``cronrace db``: the PostgreSQL schema made by a command, and an agent refusing without it."""

from __future__ import annotations

import pytest

from cronrace.cli.options import EXIT_REFUSED
from cronrace.stores.postgres.queries import latest_version
from tests.postgres_server import PostgresServer
from tests.sidecar.conftest import cronrace

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(120)]


def test_an_agent_meeting_no_schema_exits_with_one_line_naming_the_command_until_upgraded(
    postgres_server: PostgresServer, namespace: str
) -> None:
    url = f"{postgres_server.url}?schema=cli_{namespace}"
    env = {"CRONRACE_STORE_URL": url, "CRONRACE_STARTUP_TIMEOUT_S": "5"}
    try:
        refused = cronrace("run", "examples.hello:agent", env=env)
        assert refused.returncode == EXIT_REFUSED
        [line] = refused.stderr.strip().splitlines()[-1:]
        assert "cronrace db upgrade" in line
        assert "cronrace-test-pw" not in refused.stderr
        first = cronrace("db", "upgrade", env=env)
        assert first.returncode == 0, first.stderr
        latest = latest_version()
        assert f"schema 'cli_{namespace}' upgraded from version 0 to {latest}" in first.stdout
        again = cronrace("db", "upgrade", "--store-url", url)
        assert again.returncode == 0, again.stderr
        assert f"is at version {latest}" in again.stdout
        printed = cronrace("db", "sql", env=env)
        assert printed.returncode == 0
        assert f'CREATE TABLE IF NOT EXISTS "cli_{namespace}".claims' in printed.stdout
    finally:
        postgres_server.execute(f'DROP SCHEMA IF EXISTS "cli_{namespace}" CASCADE')


def test_db_sql_needs_no_server_and_refuses_a_redis_url() -> None:
    printed = cronrace("db", "sql", "--schema", "crons")
    assert printed.returncode == 0
    assert 'CREATE SCHEMA IF NOT EXISTS "crons"' in printed.stdout
    refused = cronrace("db", "sql", "--store-url", "redis://127.0.0.1:1/0")
    assert refused.returncode == 1
    assert "not a PostgreSQL URL" in refused.stderr
