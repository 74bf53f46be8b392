"""A fenced write on a Redis key (what only a Redis store offers handlers and targets)."""

from __future__ import annotations

from cronrace.stores.contract import RedisFeatures
from cronrace.stores.redis import Store


async def test_fenced_set_refuses_a_lower_fence(store: Store) -> None:
    assert isinstance(store, RedisFeatures)
    target = f"{store.keys.ns}:target"
    assert await store.fenced_set(target, "from-5", 5)
    assert await store.fenced_set(target, "from-7", 7)
    assert not await store.fenced_set(target, "from-6", 6)
    assert await store.client.get(target) == b"from-7"
    assert await store.fenced_set(target, "again-7", 7)
