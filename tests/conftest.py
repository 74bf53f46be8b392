"""Shared fixtures: a real redis-server per session, and stores on fakeredis and real Redis."""

from __future__ import annotations

import itertools
import logging
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import fakeredis
import pytest
from hypothesis import settings

from cronrace.stores.redis import Store, make_client
from tests.postgres_server import PostgresServer, postgres_available, require_postgres_in_ci
from tests.redis_server import RedisServer, redis_available, require_redis_in_ci
from tests.topology import REDIS_CLI, ClusterSet

_namespaces = itertools.count()

# `pytest -m model --hypothesis-profile=deep`: the protocol and scheduler models (and every
# other property test) run many more and longer examples (README, Development).
settings.register_profile("deep", max_examples=1000, stateful_step_count=100, deadline=None)


@pytest.fixture(autouse=True)
def _cronrace_logging_as_found() -> Iterator[None]:
    """Undo what a CLI test's ``configure_logging`` did to the ``cronrace`` logger.

    ``cronrace run`` points the logger at the stderr of its CliRunner, which is closed when
    the invocation ends: a later test in the same worker then logged into a closed file
    ("--- Logging error ---" on its stderr), depending on which tests xdist put together.
    """
    logger = logging.getLogger("cronrace")
    handlers, level, propagate = list(logger.handlers), logger.level, logger.propagate
    yield
    logger.handlers[:] = handlers
    logger.setLevel(level)
    logger.propagate = propagate


def pytest_configure(config: pytest.Config) -> None:
    require_redis_in_ci()
    require_postgres_in_ci()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if settings.get_current_profile_name() == "deep":
        # The deep profile runs for many minutes per model: the suite's per-test timeout
        # (120 s) would cut it short.
        for item in items:
            if "model" in item.keywords:
                item.add_marker(pytest.mark.timeout(0))
    if not postgres_available():
        skip_pg = pytest.mark.skip(reason="PostgreSQL not installed (CI installs it)")
        for item in items:
            if "postgres" in item.keywords:
                item.add_marker(skip_pg)
    if redis_available():
        return
    skip = pytest.mark.skip(reason="redis-server not installed (CI installs it)")
    for item in items:
        if "redis" in item.keywords:
            item.add_marker(skip)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The container image's figures (tests/container: size, start-up, the fleets' ticks),
    from whichever worker ran them: they travel with the test reports."""
    figures = [
        str(value)
        for report in terminalreporter.stats.get("passed", [])
        for name, value in getattr(report, "user_properties", ())
        if name == "container-figures"
    ]
    if figures:
        terminalreporter.section("container image")
        for line in figures:
            terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """One real redis-server for the whole session; tests isolate by namespace."""
    if not redis_available():
        pytest.skip("redis-server not installed")
    server = RedisServer(tmp_path_factory.mktemp("redis-session"), appendonly=False)
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One real PostgreSQL server per test process, its schema created; tests isolate by
    namespace (a column), as they do on one Redis."""
    if not postgres_available():
        pytest.skip("PostgreSQL not installed")
    server = PostgresServer()
    try:
        server.start()
        upgrade_schema(server.url)
        yield server
    finally:
        server.cleanup()


def upgrade_schema(url: str) -> None:
    """Create cronrace's schema at ``url``: the script `cronrace db sql` prints (it builds the
    schema at any version), synchronously, so that an async fixture may ask for it too."""
    import psycopg

    from cronrace.stores.postgres.ddl import upgrade_sql

    with psycopg.connect(url, autocommit=True) as conn, conn.transaction():
        conn.execute(upgrade_sql("cronrace").encode())


@pytest.fixture
def namespace() -> str:
    """A namespace no other test uses."""
    return f"t{os.getpid()}x{next(_namespaces)}"


@pytest.fixture
def fresh_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A real redis-server of this test's own (AOF on), for tests that stop or wipe it."""
    if not redis_available():
        pytest.skip("redis-server not installed")
    server = RedisServer(tmp_path / "redis", appendonly=True)
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterSet]:
    """One real Redis Cluster for the session: three shards, one replica each."""
    if not redis_available() or REDIS_CLI is None:
        pytest.skip("redis-server or redis-cli not installed")
    cluster = ClusterSet(tmp_path_factory.mktemp("redis-cluster"))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(params=["fake", pytest.param("real", marks=pytest.mark.redis)])
def redis_url(request: pytest.FixtureRequest, namespace: str) -> str:
    """The same test on fakeredis (with Lua) and on a real redis-server.

    tests/stores runs the store on a real Redis Cluster as well (its own fixtures).
    """
    if request.param == "fake":
        return f"memory://{namespace}"
    server: RedisServer = request.getfixturevalue("redis_server")
    return server.url


@pytest.fixture
async def store(redis_url: str, namespace: str) -> AsyncIterator[Store]:
    """A Store in this test's namespace, on fakeredis and on real Redis."""
    client = make_client(redis_url)
    the_store = Store(client, namespace)
    await the_store.load_scripts()
    yield the_store
    await the_store.aclose()


@pytest.fixture
def fake_server() -> fakeredis.FakeServer:
    return fakeredis.FakeServer()
