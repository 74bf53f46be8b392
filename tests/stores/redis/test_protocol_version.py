"""A Redis namespace runs one protocol version: its first node records it, and an agent of
another version is refused with one line saying what to do (docs/design.md section 2)."""

from __future__ import annotations

import pytest

from cronrace.errors import StoreSchemaError
from cronrace.model.versions import PROTOCOL_VERSION
from cronrace.stores.redis import Store


async def test_the_first_node_records_the_namespaces_protocol(store: Store) -> None:
    await store.prepare()
    assert await store.client.get(store.keys.protocol) == str(PROTOCOL_VERSION).encode()
    await store.prepare()  # a second node (or a restart) of the same version goes on


async def test_a_namespace_of_another_protocol_is_refused_naming_both(store: Store) -> None:
    await store.client.set(store.keys.protocol, "1")
    with pytest.raises(StoreSchemaError) as refused:
        await store.prepare()
    assert "protocol '1'" in str(refused.value)
    assert f"speaks protocol {PROTOCOL_VERSION}" in str(refused.value)
    assert await store.client.get(store.keys.protocol) == b"1", "nothing overwritten"


async def test_live_agents_of_the_watermark_protocol_are_refused_until_stopped(
    store: Store,
) -> None:
    # An older fleet wrote its epoch and beats, never a protocol key.
    seconds, _micros = await store.client.time()
    await store.client.set(store.keys.epoch, "e1")
    await store.client.zadd(store.keys.nodes, {"old-1": (int(seconds) + 60) * 1000})
    with pytest.raises(StoreSchemaError, match="stop every older agent first"):
        await store.prepare()
    assert await store.client.get(store.keys.protocol) is None
    # Stopped (their beats expired, or they left): the namespace is taken on as it is.
    await store.client.zadd(store.keys.nodes, {"old-1": (int(seconds) - 60) * 1000})
    await store.prepare()
    assert await store.client.get(store.keys.protocol) == str(PROTOCOL_VERSION).encode()
