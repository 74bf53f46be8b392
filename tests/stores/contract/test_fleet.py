"""The fleet: heartbeats and membership, the epoch, and what each node publishes it runs."""

from __future__ import annotations

from cronrace.stores.contract import Store
from cronrace.stores.values import ScheduleChange


async def server_ms(store: Store) -> int:
    beat = await store.heartbeat("clock", now_ms=0, ttl_ms=1, epoch_candidate="e")
    return int(beat.server_time_s * 1000)


async def test_the_first_epoch_written_is_the_one_every_node_reads(store: Store) -> None:
    first = await store.heartbeat("n1", now_ms=0, ttl_ms=1000, epoch_candidate="e1")
    second = await store.heartbeat("n2", now_ms=0, ttl_ms=1000, epoch_candidate="e2")
    assert (first.epoch, second.epoch) == ("e1", "e1")


async def test_a_heartbeat_reads_the_shared_clock(store: Store) -> None:
    one = await store.heartbeat("n1", now_ms=0, ttl_ms=1000, epoch_candidate="e")
    two = await store.heartbeat("n1", now_ms=0, ttl_ms=1000, epoch_candidate="e")
    assert 1.7e9 < one.server_time_s <= two.server_time_s < one.server_time_s + 60


async def test_a_heartbeat_returns_every_live_member_and_prunes_the_dead(store: Store) -> None:
    now_ms = await server_ms(store)
    await store.heartbeat("n1", now_ms=now_ms, ttl_ms=5000, epoch_candidate="e")
    await store.heartbeat("dead", now_ms=now_ms - 10_000, ttl_ms=5000, epoch_candidate="e")
    beat = await store.heartbeat("n2", now_ms=now_ms, ttl_ms=8000, epoch_candidate="e")
    assert {"n1": now_ms + 5000, "n2": now_ms + 8000}.items() <= beat.members.items()
    assert "dead" not in beat.members
    # Pruned: not even a reader that asks from long ago finds it.
    unpruned = await store.heartbeat(
        "n3", now_ms=now_ms - 60_000, ttl_ms=1000, epoch_candidate="e", prune=False
    )
    assert "dead" not in unpruned.members
    assert "n1" in unpruned.members


async def test_a_node_that_leaves_is_no_member(store: Store) -> None:
    now_ms = await server_ms(store)
    await store.heartbeat("n1", now_ms=now_ms, ttl_ms=5000, epoch_candidate="e")
    await store.leave("n1")
    beat = await store.heartbeat("n2", now_ms=now_ms, ttl_ms=5000, epoch_candidate="e")
    assert "n1" not in beat.members


async def test_fingerprints_are_exchanged_among_live_nodes(store: Store) -> None:
    now_ms = await server_ms(store)
    for node in ("n1", "n2"):
        await store.heartbeat(node, now_ms=now_ms, ttl_ms=5000, epoch_candidate="e")
    first = await store.fleet.exchange("n1", "j1 d1", details=b'{"jobs":1}', now_ms=now_ms)
    assert first.fingerprints == {"n1": "j1 d1"}
    assert not first.details_missing
    second = await store.fleet.exchange("n2", "j2 d2", details=None, now_ms=now_ms)
    assert second.fingerprints == {"n1": "j1 d1", "n2": "j2 d2"}
    assert second.details_missing  # n2 never published its details
    assert second.dead == ()
    assert await store.fleet.read_details(["n1", "n2"]) == {"n1": b'{"jobs":1}', "n2": None}
    assert await store.fleet.read_details([]) == {}


async def test_a_node_that_left_is_reported_dead_until_forgotten(store: Store) -> None:
    now_ms = await server_ms(store)
    await store.heartbeat("n1", now_ms=now_ms, ttl_ms=5000, epoch_candidate="e")
    await store.fleet.exchange("gone", "g g", details=b"{}", now_ms=now_ms)
    reply = await store.fleet.exchange("n1", "a b", details=b"{}", now_ms=now_ms)
    assert reply.fingerprints == {"n1": "a b"}
    assert reply.dead == ("gone",)
    await store.fleet.forget(list(reply.dead))
    assert await store.fleet.read_details(["gone"]) == {"gone": None}
    after = await store.fleet.exchange("n1", "a b", details=None, now_ms=now_ms)
    assert after.dead == ()
    assert not after.details_missing  # published by the first exchange


async def test_the_exchange_reads_the_stored_schedules_version(store: Store) -> None:
    reply = await store.fleet.exchange("n1", "a b", details=None, now_ms=0)
    assert reply.schedules_version == 0
    written = await store.schedules.write([ScheduleChange("add", "s", b"{}")])
    reply = await store.fleet.exchange("n1", "a b", details=None, now_ms=0)
    assert reply.schedules_version == written.last_version
