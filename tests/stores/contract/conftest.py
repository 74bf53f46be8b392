"""The store fixture of the behaviour suite: every test runs once on every deployment.

A backend joins the suite with one more param in :data:`DEPLOYMENTS` whose value opens its
:class:`~tests.stores.harness.Deployment` (``async with param(request) as deployment``),
marked like its server's other tests.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from cronrace.stores.contract import Store
from tests.stores.harness import Backend, Deployment
from tests.stores.postgres.backend import POSTGRES_DEPLOYMENTS
from tests.stores.redis.backend import REDIS_DEPLOYMENTS

#: Every deployment the contract runs on: the embedded store (memory://), one real
#: redis-server, a real Redis Cluster, a real PostgreSQL server.
DEPLOYMENTS = [*REDIS_DEPLOYMENTS, *POSTGRES_DEPLOYMENTS]


@pytest_asyncio.fixture(scope="session", loop_scope="session", params=DEPLOYMENTS)
async def deployment(request: pytest.FixtureRequest) -> AsyncIterator[Deployment]:
    async with request.param(request) as opened:
        yield opened


@pytest_asyncio.fixture(loop_scope="session")
async def backend(deployment: Deployment, namespace: str) -> AsyncIterator[Backend]:
    """This test's namespace on the deployment."""
    async with deployment.backend(namespace) as opened:
        yield opened


@pytest_asyncio.fixture(loop_scope="session")
async def store(backend: Backend) -> Store:
    """The store of this test's first node."""
    return await backend.node()
