"""The Redis store's own tests (keys, scripts, garbage, deployments) on every Redis deployment.

The same deployments as the behaviour suite's Redis params (``backend.py``); here the
fixtures are typed as the Redis store, whose client and key spelling the tests use.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from cronrace.stores.redis import Store
from tests.stores.redis.backend import REDIS_DEPLOYMENTS, RedisBackend, RedisDeployment


@pytest_asyncio.fixture(scope="session", loop_scope="session", params=REDIS_DEPLOYMENTS)
async def deployment(request: pytest.FixtureRequest) -> AsyncIterator[RedisDeployment]:
    async with request.param(request) as opened:
        yield opened


@pytest_asyncio.fixture(loop_scope="session")
async def backend(deployment: RedisDeployment, namespace: str) -> AsyncIterator[RedisBackend]:
    async with deployment.backend(namespace) as opened:
        yield opened


@pytest_asyncio.fixture(loop_scope="session")
async def store(backend: RedisBackend) -> Store:
    return await backend.node()
