"""The heartbeat: the membership each beat reads, the epoch, leaving the live set."""

from __future__ import annotations

import secrets

import anyio
import pytest

from cronrace.fleet import definitions
from cronrace.fleet.definitions import NodeDetails
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
        for step_s in (2, 2, 1.5):  # n2 beats on; n1's heartbeat expires (6 s), n2's not
            await clock.advance(step_s)
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
        # n3 comes back late: n1 read it silent, asks for it again, and counts it live at
        # once; nothing was logged for it (a late beat logs no join: issue 19).
        await nodes["n3"].beat(store)
        await nodes["n4"].beat(store)
        await clock.advance(1.5)
        await n1.beat(watched)  # type: ignore[arg-type]
        assert n1.membership.live == {"n1", "n3", "n4"}
        assert watched.reads[-1] == "changes"
        assert n1.full_reads_forced == 0
        assert nodes["n3"].late_beats == 2
        assert nodes["n3"].rejoins == 1  # its first beat only
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


async def test_a_late_beat_reads_the_changes_and_is_seen_back_by_the_others() -> None:
    """Issue 19: a beat that came late (its process loaded) read every member, O(N), which
    made the next one later still; at N = 1,000 every beat of a loaded fleet came late and
    read in full. It reads the changes like any other beat, and the others, which read
    its node silent, ask for it again and see it back. Failed before: the late beat read
    in full."""
    clock = FakeClock(start_s=1_800_000_000.0)
    store = Store.from_url(f"memory://hb-{secrets.token_hex(4)}", "hb")
    n1, n2 = beater("n1", clock), beater("n2", clock)
    watched = Recording(store)
    try:
        for node in (n1, n2):
            await node.beat(store)
            node._beats = 1  # away from the periodic full read
        await clock.advance(2)
        await n2.beat(store)
        await clock.advance(1.6)  # n1 last beat 3.6 s ago: late, and silent to n2 (3 s)
        await n2.beat(store)
        assert n2.membership.live == {"n2"}
        await n1.beat(watched)  # type: ignore[arg-type]
        assert watched.reads == ["changes"]
        assert (n1.late_beats, n1.full_reads_forced) == (2, 0)  # its first beat, and this
        assert n1.membership.live == {"n1", "n2"}
        await clock.advance(0.4)
        await n2.beat(watched)  # type: ignore[arg-type]
        assert watched.reads == ["changes", "changes"]
        assert n2.membership.live == {"n1", "n2"}  # asked for again: back
        assert n2.full_reads_forced == 0
        assert n1.rejoins == 1  # its first beat only: the late one logged nothing
    finally:
        await store.aclose()


async def test_a_late_beat_logs_no_join_and_one_later_than_its_entry_lives_does() -> None:
    """Issue 19: every late beat logged a join, which every node read: in a loaded
    1,000-node fleet an entry per late beat, O(N) each. A beat up to 2.5 periods late logs
    nothing (the others ask for its node again); a later one, whose entry may be gone
    and which the others stop asking for, logs a join and is seen back through the log.
    Failed before: the 1.6-period beat logged a join."""
    clock = FakeClock(start_s=1_800_000_000.0)
    store = Store.from_url(f"memory://hb-{secrets.token_hex(4)}", "hb")
    n1, n2 = beater("n1", clock), beater("n2", clock)
    try:
        for node in (n1, n2):
            await node.beat(store)
            node._beats = 1  # away from the periodic full read and the prune
        logged = await store.client.xlen(store.keys.fleet_log)
        await clock.advance(2)
        await n2.beat(store)
        await clock.advance(1.2)  # n1's beat is 1.6 periods late: silent to n2 (1.5)
        await n2.beat(store)
        assert n2.membership.live == {"n2"}
        assert n2.membership.recheck(int(clock.time() * 1000)) == ("n1",)
        await n1.beat(store)
        assert await store.client.xlen(store.keys.fleet_log) == logged
        await clock.advance(0.1)
        await n2.beat(store)
        assert n2.membership.live == {"n1", "n2"}
        assert n2.membership.recheck(int(clock.time() * 1000)) == ()
        # 8.5 s (4.25 periods) without a beat: n2 stops asking for n1 a period after its
        # entry expired, and n1's beat logs a join, which n2 reads.
        for _ in range(4):
            await clock.advance(2)
            await n2.beat(store)
        assert n2.membership.live == {"n2"}
        assert n2.membership.recheck(int(clock.time() * 1000)) == ()
        await clock.advance(0.5)
        await n1.beat(store)
        assert n1.rejoins == 2
        assert await store.client.xlen(store.keys.fleet_log) == logged + 1
        await clock.advance(0.1)
        await n2.beat(store)
        assert n2.membership.live == {"n1", "n2"}
        assert n2.full_reads_forced == 0
    finally:
        await store.aclose()


async def test_a_node_back_after_others_read_it_dead_is_seen_running_its_jobs_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A node's published definitions outlive its silence (FORGET_AFTER_S), so it does not
    publish them again when it comes back; but a full read made while it was dead dropped
    its fingerprint, and a reader without it leaves the node out of its ring until its
    next full read (150 beats). Its join logs the fingerprint again. Failed before: n2 read
    the join and not the fingerprint."""
    clock = FakeClock(start_s=1_800_000_000.0)
    store = Store.from_url(f"memory://hb-{secrets.token_hex(4)}", "hb")
    (n1, d1), (n2, d2) = (
        (beater(name, clock), definitions.FleetDefinitions(store, name, Observer()))
        for name in ("n1", "n2")
    )

    async def beat(node: Heartbeat, defs: definitions.FleetDefinitions) -> None:
        reply = await node.beat(store, defs.request(NodeDetails(node.node_id)))
        assert reply is not None
        await defs.absorb(reply, int(clock.time() * 1000), node.membership.live)

    try:
        for pair in ((n1, d1), (n2, d2)):
            await beat(*pair)
        await beat(n2, d2)
        assert set(d2.fingerprints) == {"n1", "n2"}
        for _ in range(4):  # n1 silent 8 s: dead (its entry lived 3 periods)
            await clock.advance(2)
            monkeypatch.setattr(definitions, "FULL_READ_EVERY_EXCHANGES", 1)
            await beat(n2, d2)  # a full read: n1's fingerprint dropped, its details kept
        monkeypatch.setattr(definitions, "FULL_READ_EVERY_EXCHANGES", 1_000)
        assert set(d2.fingerprints) == {"n2"}
        await beat(n2, d2)
        assert d2._cursor is not None  # reads of changes from here
        await clock.advance(0.5)
        await beat(n1, d1)
        assert n1.rejoins == 2
        await clock.advance(0.1)
        await beat(n2, d2)
        assert n2.membership.live == {"n1", "n2"}
        assert set(d2.fingerprints) == {"n1", "n2"}
    finally:
        await store.aclose()


async def test_a_late_node_keeps_the_members_it_reads_silent_without_reading_all() -> None:
    """Issue 19: a node whose own beats came late (its process loaded) does not take the
    others' silence meanwhile for departure, as after a write pause, but it learnt that
    from a full read of every member after each such beat (O(N)); at N = 1,000 a loaded
    fleet's beats all did. A read of the changes keeps them; a member still silent once
    this node's beats go through again departs as before. Failed before: the read of
    changes gave up and read in full."""
    clock = FakeClock(start_s=1_800_000_000.0)
    store = Store.from_url(f"memory://hb-{secrets.token_hex(4)}", "hb")
    n1, n2, n3 = (beater(name, clock) for name in ("n1", "n2", "n3"))
    departed: list[frozenset[str]] = []
    n1.membership.on_departed = departed.append
    watched = Recording(store)
    try:
        for node in (n1, n2, n3):
            await node.beat(store)
            node._beats = 1  # away from the periodic full read and the prune
        await clock.advance(2)
        for node in (n1, n2, n3):
            await node.beat(store)
        await clock.advance(3)
        await n3.beat(store)
        await clock.advance(0.5)  # n1's loop was held 3.5 s; n2's beat is 3.5 s old
        await n1.beat(watched)  # type: ignore[arg-type]
        assert n1.membership.live == {"n1", "n2", "n3"}
        assert departed == []
        # n2 is dead; n1 and n3 beat every 2 s: n2 departs 1.5 heartbeats after n1's
        # own beats went through again.
        for _ in range(2):
            await clock.advance(2)
            await n3.beat(store)
            await n1.beat(watched)  # type: ignore[arg-type]
        assert departed == [frozenset({"n2"})]
        assert n1.membership.live == {"n1", "n3"}
        assert watched.reads == ["changes"] * 3
        assert n1.full_reads_forced == 0
    finally:
        await store.aclose()


class Paused:
    """A store that holds every heartbeat while ``held`` (``CLIENT PAUSE WRITE``): each is
    sent (stamped with its send time) and served once the pause ends, in the order sent."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.held = False
        self._released: list[anyio.Event] = []

    async def heartbeat(self, node_id: str, **kwargs: object):  # type: ignore[no-untyped-def]
        if self.held:
            released = anyio.Event()
            self._released.append(released)
            await released.wait()
        return await self.store.heartbeat(node_id, **kwargs)  # type: ignore[arg-type]

    def unpause(self) -> None:
        self.held = False
        for released in self._released:
            released.set()
        self._released = []


async def test_a_write_pause_that_silences_every_node_is_no_departure() -> None:
    """Issue 21: every node's beat was held by a write pause, each stamped when it was
    sent. A read just after the pause found the others' beats stamped before it, took them
    for departed, and its node took over their won claims, live winners' (and a tick of
    the backlog they were deciding was lost). A node whose own beats were held up does not
    judge the others' silence over that time; a node that really died (n3) still departs,
    1.5 heartbeats after this node's beats went through again. Failed before: n2 and n3
    departed at n1's first beat after the pause."""
    clock = FakeClock(start_s=1_800_000_000.0)
    store = Store.from_url(f"memory://hb-{secrets.token_hex(4)}", "hb")
    paused = Paused(store)
    n1, n2, n3 = (beater(name, clock) for name in ("n1", "n2", "n3"))
    departed: list[frozenset[str]] = []
    n1.membership.on_departed = departed.append
    try:
        for node in (n1, n2, n3):
            await node.beat(store)
        await clock.advance(2)
        for node in (n1, n2, n3):
            await node.beat(store)
        assert n1.membership.live == {"n1", "n2", "n3"}
        # n3 dies; the store pauses writes; n1 and n2 beat into the pause.
        paused.held = True
        await clock.advance(1)
        async with anyio.create_task_group() as tg:
            tg.start_soon(n1.beat, paused)
            await clock.advance(0.5)
            tg.start_soon(n2.beat, paused)
            await clock.advance(4)  # a 4.5 s pause: 2.25 heartbeats
            paused.unpause()
        # The held beats were served in the order sent, n2's stamped 4 s ago; n1 beats
        # again at once (beats go every period, however long the round trip took), before
        # n2's next beat: n2 looks silent for longer than 1.5 heartbeats.
        await n1.beat(store)
        assert departed == []
        assert n1.membership.live == {"n1", "n2", "n3"}
        # Beats every 2 s again: n3 (silent since before the pause) departs once n1's own
        # beats have gone through for 1.5 heartbeats; n2 never does.
        for _ in range(2):
            await clock.advance(2)
            await n2.beat(store)
            await n1.beat(store)
        assert departed == [frozenset({"n3"})]
        assert n1.membership.live == {"n1", "n2"}
    finally:
        await store.aclose()


def test_a_node_is_counted_live_while_its_own_last_beat_is_recent() -> None:
    """Claims wait while others may count this node departed (race.py): its own last beat
    that went through older than 1.25 heartbeats; no beat reported yet, no judgement."""
    membership = Membership("a", Racers.parse("all"), heartbeat_s=2.0)
    assert membership.counted_live(10_000)
    membership.own_beat_ms = 10_000
    assert membership.counted_live(12_500)
    assert not membership.counted_live(12_501)


async def test_a_beat_that_reads_a_join_and_its_fingerprint_changes_the_ring_once() -> None:
    """Issue 19: the beat's read of the changes and the exchange that follows it (the
    joiner's fingerprint) are one change of the ring, so one splice and one re-homing of
    this node's jobs per beat. Before, n1's ring changed twice when a beat read a leave
    and a join: without n3 at the read, with n2 at the exchange."""
    clock = FakeClock(start_s=1_800_000_000.0)
    store = Store.from_url(f"memory://hb-{secrets.token_hex(4)}", "hb")
    nodes = {name: beater(name, clock) for name in ("n1", "n2", "n3")}
    for node in nodes.values():
        node.membership.racers = Racers(2)
    defs = {name: definitions.FleetDefinitions(store, name, Observer()) for name in nodes}
    n1 = nodes["n1"]
    rings: list[frozenset[str]] = []
    n1.membership.on_change = lambda _old, new, _ms: rings.append(new.members)

    async def beat(name: str) -> None:
        reply = await nodes[name].beat(store, defs[name].request(NodeDetails(name)))
        assert reply is not None
        await defs[name].absorb(reply, int(clock.time() * 1000), nodes[name].membership.live)
        nodes[name].membership.alike(defs[name].fingerprints, int(clock.time() * 1000))

    async def after_beat(_reconnected: bool, reply: definitions.FleetReply | None) -> None:
        assert reply is not None
        now_ms = int(clock.time() * 1000)
        await defs["n1"].absorb(reply, now_ms, n1.membership.live)
        n1.membership.alike(defs["n1"].fingerprints, now_ms)

    try:
        await beat("n3")
        await beat("n1")
        await beat("n1")  # reads of changes from here
        assert n1.membership.ring.members == {"n1", "n3"}
        rings.clear()
        async with anyio.create_task_group() as tg:
            tg.start_soon(n1.run, store, after_beat, lambda: defs["n1"].request(NodeDetails("n1")))
            await clock.advance(0.5)
            await beat("n2")  # joins, and publishes what it runs
            await nodes["n3"].leave(store)
            await clock.advance(2)  # n1's next beat reads both, then n2's fingerprint
            tg.cancel_scope.cancel()
        assert rings == [{"n1", "n2"}]
    finally:
        await store.aclose()
