"""The differential tests' deployments: the Redis store's (memory://, redis-server, Cluster).

Each deployment is opened once per session (``tests/stores/redis/backend.py``); every
example of a test writes one job of its own into the test's namespace.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from tests.stores.redis.backend import REDIS_DEPLOYMENTS, RedisDeployment


@pytest_asyncio.fixture(scope="session", loop_scope="session", params=REDIS_DEPLOYMENTS)
async def deployment(request: pytest.FixtureRequest) -> AsyncIterator[RedisDeployment]:
    async with request.param(request) as opened:
        yield opened
