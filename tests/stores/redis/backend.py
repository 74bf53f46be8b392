"""The Redis store under test: the embedded store, one real redis-server, a real Cluster.

One client per deployment and test session (a Cluster client reads the whole command
table when it connects: 50-90 ms, which per test was most of the old store suite's time),
shared by every test on it; each test has a namespace of its own, and each of its nodes a
:class:`~cronrace.stores.redis.Store` of its own on that client. The faults of
:mod:`tests.stores.harness` are spelled here in Redis keys.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from functools import partial
from typing import Any

import pytest

from cronrace.stores.redis import Keys, Store, make_client
from cronrace.stores.values import Claim, Owner
from tests.redis_server import RedisServer
from tests.stores.harness import JOB_PARTS, RoundTrips
from tests.topology import ClusterSet

_memory_names = itertools.count()


class RedisFaults:
    """The harness's faults, spelled in the keys of one namespace."""

    def __init__(self, client: Any, keys: Keys) -> None:
        self.client = client
        self.keys = keys

    async def expire_lease(self, job: str) -> None:
        await self.client.delete(self.keys.lease(job))

    async def age_lease(self, job: str, left_ms: int) -> None:
        await self.client.pexpire(self.keys.lease(job), left_ms)

    async def end_hold(self, job: str) -> None:
        await self.client.delete(self.keys.hold(job))

    async def wipe(self, job: str, *parts: str) -> None:
        keys = self.keys
        spelled = {
            "lease": (keys.lease(job),),
            "fence": (keys.fence(job),),
            "cursor": (keys.cursor(job),),  # its origin is in the state hash
            "state": (keys.state(job), keys.triggers(job)),
            "pending": (keys.pending(job),),
        }
        await self.client.delete(*(key for part in parts or JOB_PARTS for key in spelled[part]))

    async def set_fence_counter(self, job: str, value: int) -> None:
        await self.client.set(self.keys.fence(job), value)

    async def forget_answer(self, claim: Claim, owner: Owner) -> None:
        if claim.trigger_id is not None:
            key = self.keys.trigger_claim(claim.job, claim.trigger_id)
        else:
            key = self.keys.claim(claim.job, claim.tick_s)
        # The claim value is "<owner>", then "<owner>\n<request>\n<answer>" once decided.
        await self.client.set(key, str(owner), keepttl=True)

    async def expire_claim(self, claim: Claim) -> None:
        if claim.trigger_id is not None:
            await self.client.delete(self.keys.trigger_claim(claim.job, claim.trigger_id))
        else:
            await self.client.delete(self.keys.claim(claim.job, claim.tick_s))

    async def age_claim(self, claim: Claim, left_ms: int) -> None:
        await self.client.pexpire(self.keys.claim(claim.job, claim.tick_s), left_ms)

    async def wipe_schedules(self) -> None:
        await self.client.delete(self.keys.schedules)


class RedisBackend:
    """One test's namespace on a Redis deployment."""

    def __init__(self, deployment: RedisDeployment, namespace: str) -> None:
        self.name = deployment.name
        self.shards = deployment.shards
        self.client = deployment.client
        self.keys = Keys(namespace)
        self.faults = RedisFaults(self.client, self.keys)

    async def node(self) -> Store:
        return Store(self.client, self.keys.ns)

    @asynccontextmanager
    async def round_trips(self) -> AsyncIterator[RoundTrips]:
        """Count every command and pipeline the shared client sends inside the block."""
        # A server restarted by another test has lost its script cache, and the first call
        # of each script would cost one more trip to send it again: load them first.
        await Store(self.client, self.keys.ns).prepare()
        trips = RoundTrips()
        client = self.client
        pipeline, execute_command = client.pipeline, client.execute_command

        def counted_pipeline(*args: Any, **kwargs: Any) -> Any:
            pipe = pipeline(*args, **kwargs)
            execute = pipe.execute

            async def counted_execute(*a: Any, **k: Any) -> Any:
                trips.count += 1
                return await execute(*a, **k)

            pipe.execute = counted_execute
            return pipe

        async def counted_command(*args: Any, **kwargs: Any) -> Any:
            trips.count += 1
            return await execute_command(*args, **kwargs)

        client.pipeline, client.execute_command = counted_pipeline, counted_command
        try:
            yield trips
        finally:
            del client.pipeline, client.execute_command  # the class's methods again


class RedisDeployment:
    """A Redis deployment and the one client every test on it shares."""

    def __init__(self, name: str, client: Any, shards: int) -> None:
        self.name = name
        self.client = client
        self.shards = shards

    def backend(self, namespace: str) -> AbstractAsyncContextManager[RedisBackend]:
        @asynccontextmanager
        async def opened() -> AsyncIterator[RedisBackend]:
            yield RedisBackend(self, namespace)  # nothing of its own to close

        return opened()


def _url_and_shards(name: str, request: pytest.FixtureRequest) -> tuple[str, int]:
    if name == "memory":
        return f"memory://stores-{os.getpid()}-{next(_memory_names)}", 1
    if name == "cluster":
        cluster: ClusterSet = request.getfixturevalue("redis_cluster")
        return cluster.url, len(cluster.primaries())
    server: RedisServer = request.getfixturevalue("redis_server")
    return server.url, 1


@asynccontextmanager
async def open_redis_deployment(
    name: str, request: pytest.FixtureRequest
) -> AsyncIterator[RedisDeployment]:
    """Open the Redis deployment ``name`` (memory, redis, cluster) for the session."""
    url, shards = _url_and_shards(name, request)
    client = make_client(url)
    try:
        await Store(client, "cronrace").prepare()  # the scripts, once per server
        yield RedisDeployment(name, client, shards)
    finally:
        await client.aclose()


#: The Redis deployments, as params of a session-scoped ``deployment`` fixture: each
#: param opens its deployment (``async with param(request) as deployment``).
REDIS_DEPLOYMENTS = [
    pytest.param(partial(open_redis_deployment, "memory"), id="memory"),
    pytest.param(partial(open_redis_deployment, "redis"), id="redis", marks=pytest.mark.redis),
    pytest.param(
        partial(open_redis_deployment, "cluster"),
        id="cluster",
        marks=[pytest.mark.redis, pytest.mark.cluster],
    ),
]
