"""The heartbeat: the membership each beat reads, the epoch, leaving the live set."""

from __future__ import annotations

import secrets

from cronrace.fleet.heartbeat import Heartbeat, heartbeat_ttl_ms
from cronrace.fleet.membership import Membership
from cronrace.fleet.racers import Racers
from cronrace.runtime.observer import Observer
from cronrace.runtime.readiness import Readiness
from cronrace.runtime.watchdog import LoopWatchdog
from cronrace.stores.redis import Store
from cronrace.testing import FakeClock


def beater(node_id: str, clock: FakeClock) -> Heartbeat:
    readiness = Readiness(node_id, Observer(), LoopWatchdog(threshold_s=5), lambda: None)
    return Heartbeat(
        node_id=node_id,
        heartbeat_s=2.0,
        clock=clock,
        observer=Observer(),
        readiness=readiness,
        jobs={},
        membership=Membership(node_id, Racers.parse("all"), 2.0),
    )


async def test_each_beat_reads_every_live_member_with_its_expiry() -> None:
    clock = FakeClock(start_s=1_800_000_000.0)
    store = Store.from_url(f"memory://hb-{secrets.token_hex(4)}", "hb")
    first, second = beater("n1", clock), beater("n2", clock)
    ttl_ms = heartbeat_ttl_ms(2.0)
    assert ttl_ms == 6_000
    try:
        await first.beat(store)
        assert first.membership.last_beat_ms == {"n1": 1_800_000_000_000}
        await clock.advance(1)
        await second.beat(store)
        assert second.membership.last_beat_ms == {"n1": 1_800_000_000_000, "n2": 1_800_000_001_000}
        assert second.membership.live == {"n1", "n2"}
        assert second.readiness.ready
        await clock.advance(5.5)  # n1's heartbeat has expired, n2's not yet
        await second.beat(store)
        assert set(second.membership.last_beat_ms) == {"n2"}
        assert second.membership.live == {"n2"}
        await second.leave(store)
        await first.beat(store)
        assert set(first.membership.last_beat_ms) == {"n1"}  # n2 left at once
    finally:
        await store.aclose()


async def test_a_new_epoch_holds_new_runs_for_the_longest_lease() -> None:
    from cronrace.model.job import Job

    clock = FakeClock(start_s=1_800_000_000.0)
    store = Store.from_url(f"memory://hb-{secrets.token_hex(4)}", "hb")
    job = Job.define(lambda ctx: None, "* * * * *", name="j", lease_ttl=45)
    node = Heartbeat(
        node_id="n1",
        heartbeat_s=2.0,
        clock=clock,
        observer=Observer(),
        readiness=Readiness("n1", Observer(), LoopWatchdog(threshold_s=5), lambda: None),
        jobs={"j": job},
        membership=Membership("n1", Racers.parse("all"), 2.0),
    )
    try:
        await node.beat(store)
        assert node.hold_s() == 0
        await store.client.flushall()  # Redis lost its data: a new epoch is written
        await node.beat(store)
        assert node.hold_s() == 45
        assert await store.known_jobs() == ["j"]  # published again
        await clock.advance(45)
        assert node.hold_s() == 0
    finally:
        await store.aclose()


class Recording:
    """A store whose heartbeats are recorded: whether each read every member or the changes."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.reads: list[str] = []

    async def heartbeat(self, node_id: str, **kwargs: object):  # type: ignore[no-untyped-def]
        self.reads.append("full" if kwargs.get("since") is None else "changes")
        return await self.store.heartbeat(node_id, **kwargs)  # type: ignore[arg-type]

    async def leave(self, node_id: str) -> None:
        await self.store.leave(node_id)


async def test_beats_read_the_changes_and_see_joins_leaves_and_silence() -> None:
    clock = FakeClock(start_s=1_800_000_000.0)
    store = Store.from_url(f"memory://hb-{secrets.token_hex(4)}", "hb")
    nodes = {name: beater(name, clock) for name in ("n1", "n2", "n3", "n4")}
    for node in nodes.values():
        node._beats = 1  # away from the periodic full read
    watched = Recording(store)
    n1 = nodes["n1"]
    try:
        for name in ("n1", "n2", "n3"):
            await nodes[name].beat(store)
        await clock.advance(2)
        await n1.beat(watched)  # type: ignore[arg-type]
        assert n1.membership.live == {"n1", "n2", "n3"}
        await nodes["n2"].beat(store)
        await nodes["n3"].beat(store)
        await nodes["n4"].beat(store)  # joins
        await clock.advance(2)
        await n1.beat(watched)  # type: ignore[arg-type]
        assert n1.membership.live == {"n1", "n2", "n3", "n4"}
        await nodes["n2"].leave(store)
        await nodes["n4"].beat(store)
        await clock.advance(1.5)  # n3 last beat 3.5 s ago: silent (3 s), not expired (6 s)
        await n1.beat(watched)  # type: ignore[arg-type]
        assert n1.membership.live == {"n1", "n4"}
        assert watched.reads == ["changes", "changes", "changes"]
        assert n1.full_reads_forced == 0
        # n3 comes back: late, it logs itself as joined, and is live again at once.
        await nodes["n3"].beat(store)
        await nodes["n4"].beat(store)
        await clock.advance(1.5)
        await n1.beat(watched)  # type: ignore[arg-type]
        assert n1.membership.live == {"n1", "n3", "n4"}
        assert watched.reads[-1] == "changes"
        assert n1.full_reads_forced == 0
    finally:
        await store.aclose()


async def test_a_view_of_changes_that_does_not_add_up_is_read_again_in_full() -> None:
    clock = FakeClock(start_s=1_800_000_000.0)
    store = Store.from_url(f"memory://hb-{secrets.token_hex(4)}", "hb")
    n1, n2 = beater("n1", clock), beater("n2", clock)
    n1._beats = 1
    watched = Recording(store)
    try:
        await n2.beat(store)
        await n1.beat(store)
        assert n1.membership.live == {"n1", "n2"}
        # n2 vanishes without a trace in the log (as if pruned between two reads).
        await store.client.zrem(store.keys.nodes, "n2")
        await clock.advance(2)
        await n1.beat(watched)  # type: ignore[arg-type]
        assert watched.reads == ["changes", "full"]
        assert n1.full_reads_forced == 1
        assert n1.membership.live == {"n1"}
    finally:
        await store.aclose()
