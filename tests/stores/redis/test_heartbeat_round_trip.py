"""A node's heartbeat and its fleet exchange: one pipeline, each read sent once."""

from __future__ import annotations

from typing import Any

import pytest

from cronrace.stores.redis import Store
from cronrace.stores.values import FleetRequest


def count_pipelines(store: Store, monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Record each pipeline the store's client executes, as its commands' names."""
    sent: list[list[str]] = []
    make = store.client.pipeline

    def pipeline(*args: Any, **kwargs: Any) -> Any:
        pipe = make(*args, **kwargs)
        queue, execute = pipe.execute_command, pipe.execute
        names: list[str] = []

        def queued(*command: Any, **options: Any) -> Any:
            names.append(str(command[0]).upper())
            return queue(*command, **options)

        async def counted(*a: Any, **k: Any) -> Any:
            sent.append(list(names))
            return await execute(*a, **k)

        pipe.execute_command, pipe.execute = queued, counted
        return pipe

    monkeypatch.setattr(store.client, "pipeline", pipeline)
    return sent


async def test_a_beat_with_the_exchange_is_one_pipeline_reading_the_change_log_once(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    beat = await store.heartbeat("n1", now_ms=0, ttl_ms=6000, epoch_candidate="e")
    now_ms = int(beat.server_time_s * 1000)
    first = await store.heartbeat(
        "n1", now_ms=now_ms, ttl_ms=6000, epoch_candidate="e", fleet=FleetRequest("j d", b"{}")
    )
    sent = count_pipelines(store, monkeypatch)
    last = first
    for _ in range(2):  # the second: the beat's cursor and the exchange's agree again
        assert last.fleet is not None
        last = await store.heartbeat(
            "n1",
            now_ms=now_ms,
            ttl_ms=6000,
            epoch_candidate="e",
            prune=False,
            since=last.cursor,
            joined=False,
            live_after_ms=now_ms,
            fleet=FleetRequest("j d", None, since=last.fleet.cursor, changed=False),
        )
    assert last.fleet is not None
    assert last.fleet.fingerprints == {}
    assert len(sent) == 2  # one round trip a beat for both
    commands = sent[-1]
    # The change log's new entries and its oldest one, read once for the beat and the
    # exchange; the exchange adds only what is its own.
    assert commands.count("XRANGE") == 2
    beat = ["TIME", "SET", "GET", "ZADD", "XRANGE", "XRANGE", "ZRANGEBYSCORE", "ZCOUNT", "HSET"]
    assert sorted(commands) == sorted([*beat, "HEXISTS", "HGET"])
