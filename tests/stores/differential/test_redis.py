"""The Redis store against the reference, on memory:// (fakeredis), a redis-server and a
Cluster: the same state and request give the same reply and state (``runner.py``)."""

from __future__ import annotations

from cronrace.stores.redis import Keys, Store
from tests.stores.differential.redis_codec import RedisCodec
from tests.stores.differential.runner import (
    Bench,
    decide_matches_the_reference,
    end_run_matches_the_reference,
    renew_lease_matches_the_reference,
)
from tests.stores.redis.backend import RedisDeployment

#: How many examples each test runs on each deployment (fakeredis runs Lua slowest).
EXAMPLES = {"memory": 200, "redis": 100, "cluster": 60}


def bench(deployment: RedisDeployment, namespace: str) -> Bench:
    client = deployment.client

    async def now_us() -> int:
        seconds, micros = await client.time()
        return int(seconds) * 1_000_000 + int(micros)

    store = Store(client, namespace)
    codec = RedisCodec(client, Keys(namespace))
    return Bench(store, codec, now_us, EXAMPLES[deployment.name])


async def test_decide_matches_the_reference(deployment: RedisDeployment, namespace: str) -> None:
    await decide_matches_the_reference(bench(deployment, namespace))


async def test_renew_lease_matches_the_reference(
    deployment: RedisDeployment, namespace: str
) -> None:
    await renew_lease_matches_the_reference(bench(deployment, namespace))


async def test_end_run_matches_the_reference(deployment: RedisDeployment, namespace: str) -> None:
    await end_run_matches_the_reference(bench(deployment, namespace))
