"""A Redis that may evict keys is named at start-up; one full under noeviction refuses.

An evicting policy (``allkeys-*``, ``volatile-*``) with ``maxmemory`` set drops claims,
leases and fences when Redis fills up: the node says so loudly when it prepares. Under
``noeviction`` a full Redis refuses writes with ``OOM``: that is a refusal (readiness, a
metric by cause, one line naming it), not an outage retried as if Redis were down, and it
is forgotten once a write goes through again.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from cronrace.errors import RedisOutOfMemoryError
from cronrace.stores.redis import Store, make_client
from cronrace.stores.values import Claim, Owner
from tests.redis_server import RedisServer, redis_available

pytestmark = pytest.mark.redis


@pytest.fixture
async def own_redis(tmp_path: Path, namespace: str) -> AsyncIterator[tuple[RedisServer, Store]]:
    if not redis_available():
        pytest.skip("redis-server not installed")
    server = RedisServer(tmp_path / "redis", appendonly=False)
    server.start()
    store = Store(make_client(server.url), namespace)
    try:
        yield server, store
    finally:
        await store.aclose()
        server.stop()


async def test_an_evicting_redis_is_named_loudly_at_start_up(
    own_redis: tuple[RedisServer, Store], caplog: pytest.LogCaptureFixture
) -> None:
    _server, store = own_redis
    await store.client.config_set("maxmemory", 64 * 1024 * 1024)
    await store.client.config_set("maxmemory-policy", "allkeys-lru")
    await store.prepare()
    loud = [r for r in caplog.records if "EVICT" in r.getMessage()]
    assert loud
    assert loud[0].levelno == logging.ERROR
    assert getattr(loud[0], "maxmemory_policy", None) == "allkeys-lru"


async def test_the_embedded_store_is_not_asked_and_says_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = Store.from_url(f"memory://eviction-{secrets.token_hex(4)}")
    try:
        await store.prepare()
        assert await store.check_eviction() == "noeviction"
    finally:
        await store.aclose()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


async def test_no_limit_or_noeviction_is_quiet(
    own_redis: tuple[RedisServer, Store], caplog: pytest.LogCaptureFixture
) -> None:
    _server, store = own_redis
    await store.client.config_set("maxmemory-policy", "allkeys-lru")  # no maxmemory: fine
    assert await store.check_eviction() == "allkeys-lru"
    await store.client.config_set("maxmemory", 64 * 1024 * 1024)
    await store.client.config_set("maxmemory-policy", "noeviction")
    assert await store.check_eviction() == "noeviction"
    assert not [r for r in caplog.records if "EVICT" in r.getMessage()]


async def test_a_full_redis_under_noeviction_refuses_claims_until_memory_is_freed(
    own_redis: tuple[RedisServer, Store],
) -> None:
    _server, store = own_redis
    await store.prepare()
    owner = Owner("n1", "x")
    await store.client.set("ballast", b"x" * 4 * 1024 * 1024)
    used = int((await store.client.info("memory"))["used_memory"])
    await store.client.config_set("maxmemory-policy", "noeviction")
    await store.client.config_set("maxmemory", used - 1024 * 1024)
    with pytest.raises(RedisOutOfMemoryError, match="out of memory"):
        await store.claim([Claim("j", 100, 60_000)], owner)
    problem = store.access.problem()
    assert problem is not None
    assert "out of memory" in problem, problem
    await store.client.delete("ballast")
    assert await store.claim([Claim("j", 101, 60_000)], owner) == [True]
    assert store.access.problem() is None
