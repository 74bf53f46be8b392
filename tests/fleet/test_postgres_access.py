"""Refusals from PostgreSQL are not outages: a wrong password, a missing grant and a
certificate that does not verify fail an agent at once (exit 4 from the CLI), naming the
cause, as on Redis (tests/fleet/test_access.py); with the right CA the fleet runs over TLS."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from typer.testing import CliRunner

from cronrace import Agent
from cronrace.cli.main import app
from cronrace.cli.options import EXIT_REFUSED
from cronrace.errors import RedisAccessError, RedisAuthError, RedisPermissionError, RedisTLSError
from tests.conftest import upgrade_schema
from tests.fleet.test_postgres_fleet import readme_grants
from tests.helpers import Recorder, running, settings, wait_for
from tests.postgres_server import PostgresServer, postgres_available
from tests.tls import make_certificates

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(60)]

WRONG = "wrong-pw"  # a password the test server does not take


def refused_at_start_up(url: str, namespace: str) -> tuple[RedisAccessError, float]:
    """Run an agent on ``url``; the refusal it raises and how long it took."""
    agent = Agent(settings=settings(url, namespace, "n1", startup_timeout_s=5))
    agent.add_job(lambda ctx: None, "@hourly", name="job")
    started = time.monotonic()

    async def run() -> BaseException:
        try:
            await agent.run()
        except Exception as exc:
            return exc
        raise AssertionError("the agent ran")

    error = anyio.run(run)
    assert isinstance(error, RedisAccessError), repr(error)
    return error, time.monotonic() - started


@pytest.fixture
def role_url(postgres_server: PostgresServer, namespace: str) -> Iterator[tuple[str, str]]:
    """A login role holding the README's grants: (its name, its URL)."""
    role = f"acc_{namespace.lower()}"
    password = f"pw-{namespace}"
    for statement in readme_grants(role, password):
        postgres_server.execute(statement)
    yield role, postgres_server.url_for(user=role, password=password)
    postgres_server.execute(f"DROP OWNED BY {role}")
    postgres_server.execute(f"DROP ROLE {role}")


def test_a_wrong_password_is_refused_at_once(
    postgres_server: PostgresServer, namespace: str
) -> None:
    url = postgres_server.url_for(password=WRONG)
    error, took_s = refused_at_start_up(url, namespace)
    assert isinstance(error, RedisAuthError)
    assert str(error).startswith("authentication failed: ")
    assert took_s < 3.0, f"retried {took_s:.1f}s as if the server were down"


@pytest.mark.parametrize(
    ("revoke", "named"),
    [
        ("REVOKE USAGE ON SCHEMA cronrace FROM {role}", "schema cronrace"),
        ("REVOKE SELECT ON cronrace.schema_version FROM {role}", "table schema_version"),
        ("REVOKE INSERT ON cronrace.nodes FROM {role}", "table nodes"),
    ],
)
def test_a_missing_grant_is_refused_at_start_up_naming_what(
    postgres_server: PostgresServer,
    role_url: tuple[str, str],
    namespace: str,
    revoke: str,
    named: str,
) -> None:
    role, url = role_url
    postgres_server.execute(revoke.format(role=role))
    error, took_s = refused_at_start_up(url, namespace)
    assert isinstance(error, RedisPermissionError), repr(error)
    assert named in str(error)
    assert took_s < 3.0, f"retried {took_s:.1f}s as if the server were down"


@pytest.fixture(scope="module")
def tls_postgres(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[PostgresServer, Path, Path]]:
    """A server that takes TLS; (it, the CA that signed it, a CA that did not)."""
    if not postgres_available():
        pytest.skip("PostgreSQL not installed")
    files, other_ca = make_certificates(tmp_path_factory.mktemp("pg-tls"))
    server = PostgresServer()
    # The server reads its key as its own user, and only a key no one else may read.
    for source in (files.cert_file, files.key_file):
        target = server.directory / source.name
        target.write_bytes(source.read_bytes())
        os.chmod(target, 0o600)
        if server.user is not None:
            os.chown(target, server.user.pw_uid, server.user.pw_gid)
    server.conf.update(
        ssl="on",
        ssl_cert_file=str(server.directory / files.cert_file.name),
        ssl_key_file=str(server.directory / files.key_file.name),
    )
    try:
        server.start()
        upgrade_schema(server.url)
        yield server, files.ca_file, other_ca
    finally:
        server.cleanup()


def tls_url(server: PostgresServer, ca: Path) -> str:
    return f"{server.url}?sslmode=verify-full&sslrootcert={ca}"


def test_a_certificate_that_does_not_verify_is_refused_at_once(
    tls_postgres: tuple[PostgresServer, Path, Path], namespace: str
) -> None:
    server, _, other_ca = tls_postgres
    error, took_s = refused_at_start_up(tls_url(server, other_ca), namespace)
    assert isinstance(error, RedisTLSError), repr(error)
    assert str(error).startswith("TLS failed: ")
    assert "sslrootcert=" in str(error)
    assert took_s < 3.0, f"retried {took_s:.1f}s as if the server were down"


async def test_an_agent_fires_over_tls_with_the_ca_named_in_the_url(
    tls_postgres: tuple[PostgresServer, Path, Path], namespace: str
) -> None:
    server, ca, _ = tls_postgres
    recorder = Recorder()
    agent = Agent(settings=settings(tls_url(server, ca), namespace, "tls-node"))
    agent.add_job(recorder.note, "@every 1s", name="secure")
    async with running(agent):
        await wait_for(lambda: bool(recorder.ticks()), timeout_s=15, what="a tick over TLS")
        (encrypted,) = server.execute(
            "SELECT count(*) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) "
            "WHERE s.ssl AND a.pid <> pg_backend_pid() AND a.backend_type = 'client backend'"
        )
    assert encrypted[0] >= 1, "the agent's connections are not encrypted"


@pytest.mark.parametrize("case", ["password", "grant", "tls"])
def test_the_cli_prints_one_line_and_exits_4(
    postgres_server: PostgresServer,
    tls_postgres: tuple[PostgresServer, Path, Path],
    role_url: tuple[str, str],
    namespace: str,
    tmp_path: Path,
    case: str,
) -> None:
    role, grant_url = role_url
    if case == "password":
        url, secret = postgres_server.url_for(password=WRONG), WRONG
    elif case == "grant":
        postgres_server.execute(f"REVOKE USAGE ON SCHEMA cronrace FROM {role}")
        url, secret = grant_url, f"pw-{namespace}"
    else:
        url, secret = tls_url(tls_postgres[0], tls_postgres[2]), "cronrace-test-pw"
    config = tmp_path / "c.toml"
    config.write_text(
        f'[agent]\nstore_url = "{url}"\nnamespace = "{namespace}"\nmetrics_address = "off"\n'
        "startup_timeout_s = 5\n[[jobs]]\nname='x'\nschedule='@hourly'\n"
        "[jobs.command]\nargv=['true']\n"
    )
    for args in (["status", "--store-url", url], ["run", "--config", str(config)]):
        started = time.monotonic()
        result = CliRunner().invoke(app, args)
        took_s = time.monotonic() - started
        assert result.exit_code == EXIT_REFUSED, (args[0], result.output)
        lines = result.stderr.strip().splitlines()
        assert lines[-1].startswith("cronrace: PostgreSQL at postgresql://"), lines
        assert " refused: " in lines[-1]
        assert "Traceback" not in result.stderr
        assert secret not in result.stderr  # the password is never printed
        assert took_s < 4.0, (args[0], took_s)
