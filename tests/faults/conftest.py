"""Fixtures of the fault tests: a witness redis-server that no fault touches."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from tests.faults.witness import Witness
from tests.redis_server import RedisServer, redis_available

_keys = itertools.count()


@pytest.fixture(scope="session")
def witness_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """The witness: a redis-server of its own, never stopped, wiped or filled with garbage."""
    if not redis_available():
        pytest.skip("redis-server not installed")
    server = RedisServer(tmp_path_factory.mktemp("witness"), appendonly=False)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def witness(witness_server: RedisServer, namespace: str) -> Witness:
    """A fresh event list on the witness for this test's handlers."""
    return Witness(witness_server.url, f"witness:{namespace}:{next(_keys)}")
