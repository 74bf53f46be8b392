"""Refusals are not outages: wrong passwords, missing ACL permissions and untrusted TLS
certificates fail at once (start-up) or fail readiness (later), naming the cause; a fleet
runs as the README's least-privilege user; TLS works with the CA given in the URL."""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from typer.testing import CliRunner

from cronrace import Agent, RunContext
from cronrace.cli.main import app
from cronrace.cli.options import EXIT_REFUSED
from cronrace.errors import (
    RedisAccessError,
    RedisAuthError,
    RedisPermissionError,
    RedisTLSError,
    RedisUnavailableError,
)
from cronrace.stores.redis.acl import acl_setuser
from cronrace.testing import RedisServer
from cronrace.web.metrics import PrometheusObserver
from tests.helpers import Recorder, running, settings, wait_for
from tests.redis_server import free_port, redis_available
from tests.tls import start_tls_server

pytestmark = pytest.mark.redis

ADMIN_PASSWORD = "admin-secret"  # noqa: S105 - a throwaway test server's
PASSWORD = "agent-secret"  # noqa: S105 - a throwaway test server's


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A redis-server whose default user has a password (the admin creates ACL users)."""
    if not redis_available():
        pytest.skip("redis-server not installed")
    server = RedisServer(
        tmp_path_factory.mktemp("redis-secured"), appendonly=False, password=ADMIN_PASSWORD
    )
    server.start()
    yield server
    server.stop()


@pytest.fixture
def admin(secured: RedisServer) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(secured.url)
    yield client
    client.close()


def create_user(admin: redis.Redis, user: str, namespace: str, *, without: str = "") -> str:
    """Create ``user`` with the README's ACL line, minus ``without``; return its URL."""
    words = acl_setuser(user, namespace, PASSWORD).split()
    admin.execute_command(*[w for w in words if w != f"+{without}"])
    port = admin.connection_pool.connection_kwargs["port"]
    return f"redis://{user}:{PASSWORD}@127.0.0.1:{port}/0"


def plain_url(server: RedisServer, secret: str) -> str:
    return f"redis://{secret}127.0.0.1:{server.port}/0"


# -- start-up: refusals fail at once, outages are retried --------------------------------


@pytest.mark.parametrize(
    ("case", "error", "message"),
    [
        ("wrong password", RedisAuthError, "authentication failed: invalid username-password"),
        ("no password", RedisAuthError, "authentication required: Redis wants a user name"),
        ("no xread", RedisPermissionError, "permission denied: the ACL user may not run 'xread'"),
        (
            "no script load",
            RedisPermissionError,
            "permission denied: the ACL user may not run 'scr",
        ),
        ("other namespace", RedisPermissionError, "permission denied: the ACL user may not touch"),
    ],
)
async def test_refusal_at_start_up_fails_at_once_naming_the_cause(
    secured: RedisServer,
    admin: redis.Redis,
    namespace: str,
    case: str,
    error: type[RedisAccessError],
    message: str,
) -> None:
    urls = {
        "wrong password": lambda: plain_url(secured, ":wrong@"),
        "no password": lambda: plain_url(secured, ""),
        "no xread": lambda: create_user(admin, f"{namespace}-a", namespace, without="xread"),
        "no script load": lambda: create_user(
            admin, f"{namespace}-b", namespace, without="script|load"
        ),
        "other namespace": lambda: create_user(admin, f"{namespace}-c", f"{namespace}other"),
    }
    agent = Agent(settings=settings(urls[case](), namespace, "n1", startup_timeout_s=3))
    agent.add_job(lambda ctx: None, "@hourly", name="job")
    started = time.monotonic()
    with pytest.raises(error) as caught:
        await agent.run()
    assert str(caught.value).startswith(message)
    # At once: not after retrying for the whole start-up timeout as if Redis were down.
    assert time.monotonic() - started < 2.0


async def test_unreachable_redis_is_retried_until_the_timeout_naming_the_last_error(
    namespace: str,
) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    agent = Agent(settings=settings(url, namespace, "n1", startup_timeout_s=0.5))
    with pytest.raises(RedisUnavailableError) as caught:
        await agent.run()
    text = str(caught.value)
    assert "unreachable for 0.5s at start-up; last error: " in text
    assert "onnect" in text.split("last error: ")[1]  # "Connection refused" / "connecting to"


# -- after start-up: a refusal fails readiness, names the command, and is counted ---------


@pytest.mark.timeout(30)
async def test_permission_revoked_at_runtime_fails_readiness_naming_the_command(
    admin: redis.Redis, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    user = f"{namespace}-rt"
    url = create_user(admin, user, namespace)
    observer = PrometheusObserver()
    agent = Agent(settings=settings(url, namespace, "n1", redis_timeout_s=1.5), observer=observer)
    agent.add_job(lambda ctx: None, "@hourly", name="quiet")
    caplog.set_level(logging.INFO, logger="cronrace")
    async with running(agent):
        admin.execute_command("ACL", "SETUSER", user, "-xread")
        await wait_for(lambda: not agent.ready, timeout_s=10, what="readiness to fail")
        problem = agent.readiness_problem()
        assert problem is not None
        assert problem.startswith("Redis refuses xread: permission denied")
        admin.execute_command("ACL", "SETUSER", user, "+xread")
        await wait_for(lambda: agent.ready, timeout_s=10, what="readiness to come back")
    refused = observer.registry.get_sample_value(
        "cronrace_redis_refusals_total", {"command": "xread", "cause": "permission"}
    )
    assert refused is not None
    assert refused >= 1
    errors = [
        r
        for r in caplog.records
        if r.levelno == logging.ERROR and getattr(r, "refused", None) == "xread"
    ]
    assert errors, "the refusal is logged at ERROR naming the command"


@pytest.mark.timeout(30)
async def test_command_refused_inside_a_script_fails_readiness_naming_the_script(
    admin: redis.Redis, namespace: str
) -> None:
    # INCR is sent only by decide.lua (the fence): start-up passes, the first tick does not.
    url = create_user(admin, f"{namespace}-lua", namespace, without="incr")
    observer = PrometheusObserver()
    agent = Agent(settings=settings(url, namespace, "n1"), observer=observer)
    agent.add_job(lambda ctx: None, "@every 1s", name="fenced")
    async with running(agent):
        await wait_for(lambda: not agent.ready, timeout_s=10, what="readiness to fail")
        problem = agent.readiness_problem()
    assert problem is not None
    assert problem.startswith("Redis refuses evalsha decide.lua: permission denied: ")
    refused = observer.registry.get_sample_value(
        "cronrace_redis_refusals_total", {"command": "evalsha", "cause": "permission"}
    )
    assert refused is not None
    assert refused >= 1


# -- least privilege: the README's ACL line runs a fleet ----------------------------------


@pytest.mark.timeout(60)
async def test_fleet_fires_ticks_once_and_runs_a_trigger_as_the_least_privilege_user(
    admin: redis.Redis, namespace: str
) -> None:
    user = f"{namespace}-fleet"
    url = create_user(admin, user, namespace)
    admin.execute_command("ACL", "LOG", "RESET")
    recorder = Recorder()
    agents = []
    for index in range(3):
        agent = Agent(settings=settings(url, namespace, f"node{index}", redis_timeout_s=1.5))

        async def note(ctx: RunContext) -> None:
            recorder.note(ctx)

        agent.add_job(note, "@every 1s", name="beat")
        agent.add_job(note, "@yearly", name="on-demand")
        agents.append(agent)
    operator = Agent(settings=settings(url, namespace, "operator"))
    async with running(*agents):
        await wait_for(lambda: len(set(recorder.ticks("beat"))) >= 3, timeout_s=15, what="ticks")
        trigger_id = await operator.trigger("on-demand")
        await wait_for(lambda: bool(recorder.ticks("on-demand")), timeout_s=10, what="the trigger")
        await operator.pause("beat")
        await operator.resume("beat")
        statuses = await operator.jobs_status()
        nodes = await operator.nodes()

        async def recorded() -> bool:
            return any(r.trigger_id == trigger_id for r in await operator.history("on-demand", 5))

        await wait_for(recorded, timeout_s=10, what="the trigger's record")
    await operator.aclose()
    assert Counter(recorder.ticks("beat")).most_common(1)[0][1] == 1, "a tick fired twice"
    assert len(recorder.ticks("on-demand")) == 1
    assert {s.job for s in statuses} == {"beat", "on-demand"}
    assert len(nodes) == 3
    denied = [entry for entry in admin.acl_log() if entry.get("username") == user]
    assert denied == [], "Redis refused the least-privilege user something"


# -- TLS ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RedisServer, Path]]:
    if not redis_available():
        pytest.skip("redis-server not installed")
    server, other_ca = start_tls_server(tmp_path_factory.mktemp("redis-tls"))
    yield server, other_ca
    server.stop()


@pytest.mark.timeout(30)
async def test_agent_fires_over_tls_with_the_ca_named_in_the_url(
    tls_server: tuple[RedisServer, Path], namespace: str
) -> None:
    server, _ = tls_server
    assert server.url.startswith("rediss://")
    assert "?ssl_ca_certs=" in server.url
    recorder = Recorder()
    agent = Agent(settings=settings(server.url, namespace, "tls-node"))
    agent.add_job(recorder.note, "@every 1s", name="secure")
    async with running(agent):
        await wait_for(lambda: bool(recorder.ticks()), timeout_s=10, what="a tick over TLS")


async def test_certificate_from_another_ca_fails_at_once_naming_tls(
    tls_server: tuple[RedisServer, Path], namespace: str
) -> None:
    server, other_ca = tls_server
    url = f"rediss://127.0.0.1:{server.port}/0?ssl_ca_certs={other_ca}"
    agent = Agent(settings=settings(url, namespace, "n1", startup_timeout_s=3))
    started = time.monotonic()
    with pytest.raises(RedisTLSError) as caught:
        await agent.run()
    assert str(caught.value).startswith("TLS certificate not trusted: ")
    assert "ssl_ca_certs=" in str(caught.value)
    assert time.monotonic() - started < 2.0


# -- the CLI: one line, exit 4 --------------------------------------------------------------


def test_cli_refused_by_redis_prints_one_line_and_exits_4(
    secured: RedisServer, tmp_path: Path
) -> None:
    url = plain_url(secured, ":wrong@")
    config = tmp_path / "c.toml"
    config.write_text(
        f'[agent]\nredis_url = "{url}"\nmetrics_address = "off"\nstartup_timeout_s = 3\n'
        "[[jobs]]\nname='x'\nschedule='@hourly'\n[jobs.stream]\nkey='q'\n"
    )
    where = f"Redis at redis://***@127.0.0.1:{secured.port}/0 refused: authentication failed"
    # status first: run configures logging onto the runner's stream, closed afterwards.
    for args in (["status", "--redis-url", url], ["run", "--config", str(config)]):
        result = CliRunner().invoke(app, args)
        assert result.exit_code == EXIT_REFUSED, result.output
        lines = result.stderr.strip().splitlines()
        assert lines[-1].startswith(f"cronrace: {where}: invalid username-password pair")
        if args[0] == "status":
            assert len(lines) == 1
        assert "Traceback" not in result.stderr
        assert "wrong" not in result.stderr  # the password is never printed
