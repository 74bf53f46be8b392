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
