"""racers = k: only k of N nodes claim each tick, every tick still fires once, runs spread."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import replace

import anyio
import pytest

from cronrace import Agent, RunContext
from cronrace.cli.output import print_nodes, racers_line
from cronrace.fleet.membership import late_fire_bound_s
from cronrace.fleet.racers import PLACEMENT_WINDOW_S, Ring, placement_start_s
from cronrace.runtime.observer import Observer
from cronrace.stores.redis import Store, changes
from cronrace.testing import FakeClock, memory_agent

START_S = 1_700_000_000
GHOSTS = ("ghost-a", "ghost-b")


class Claims(Observer):
    """Counts what one node sent and skipped."""

    def __init__(self) -> None:
        self.sent = 0
        self.skipped = 0

    def claims(self, won: int, lost: int) -> None:
        self.sent += won + lost

    def claims_skipped(self, count: int) -> None:
        self.skipped += count


async def publish_like(store: Store, node: str, ghosts: tuple[str, ...]) -> None:
    """Make ghosts publish what ``node`` runs, as a node that died would have (logged)."""
    fingerprint = await store.client.hget(store.keys.fleet_defs, node)
    await store.client.hset(store.keys.fleet_defs, mapping=dict.fromkeys(ghosts, fingerprint))
    for ghost in ghosts:
        await store.client.xadd(
            store.keys.fleet_log, changes.entry(ghost, changes.PRINT, fingerprint.decode())
        )


async def list_ghosts(store: Store, expiries: dict[str, int]) -> None:
    """List ghosts in the live set until ``expiries``, as nodes that joined and died would
    be: each logged its joining (changes.py), and beats no more."""
    await store.client.zadd(store.keys.nodes, expiries)
    for ghost, expiry in expiries.items():
        await store.client.xadd(store.keys.fleet_log, changes.entry(ghost, changes.JOIN, expiry))


def held_by_ghosts(size: int, k: int, ghosts: tuple[str, ...], span_s: int) -> str:
    """A job name whose racers' window, from START_S for ``span_s``, includes a ghost.

    Racers are placed per job and window (racers.py): a test of ticks that ghosts hold
    picks a job they hold, rather than relying on one name's hash.
    """
    ring = Ring.build([*(f"node-{i}" for i in range(size)), *ghosts])
    for i in range(1000):
        name = f"every-second-{i}"
        start = placement_start_s(name, START_S)
        if start + PLACEMENT_WINDOW_S > START_S + span_s and ghosts[0] in ring.racers(
            name, START_S, k
        ):
            return name
    raise AssertionError("no such job name")


def fleet(
    clock: FakeClock,
    size: int,
    racers: str,
    runs: list[tuple[int, str]],
    name: str = "every-second",
    **job: object,
) -> tuple[list[Agent], list[Claims]]:
    url = f"memory://racers-{racers}-{size}"
    agents, observers = [], []
    for index in range(size):
        observer = Claims()
        agent = memory_agent(
            clock, store_url=url, node_id=f"node-{index}", racers=racers, heartbeat_s=1.0
        )
        agent.observer = observer

        async def tick(ctx: RunContext) -> None:
            runs.append((ctx.tick_s, ctx.node_id))

        agent.add_job(tick, "@every 1s", name=name, **job)
        agents.append(agent)
        observers.append(observer)
    return agents, observers


def witnessed_fleet(
    clock: FakeClock,
    url: str,
    racers: str,
    runs: list[tuple[str, int, str, float]],
    jobs: list[tuple[str, str, dict[str, object]]],
) -> list[Agent]:
    """Four nodes with heartbeat 1 s running ``jobs`` (schedule, name, options), each run
    noted in ``runs`` as (job, tick, node, when)."""
    agents = []
    for index in range(4):
        agent = memory_agent(
            clock, store_url=url, node_id=f"node-{index}", racers=racers, heartbeat_s=1.0
        )

        async def tick(ctx: RunContext) -> None:
            runs.append((ctx.job, ctx.tick_s, ctx.node_id, clock.time()))

        for schedule, name, options in jobs:
            agent.add_job(tick, schedule, name=name, **options)
        agents.append(agent)
    return agents


@pytest.mark.timeout(60)
@pytest.mark.parametrize("racers", ["2", "all"])
async def test_only_k_nodes_claim_each_tick_and_every_tick_fires_once(racers: str) -> None:
    clock = FakeClock(start_s=START_S)
    runs: list[tuple[int, str]] = []
    agents, observers = fleet(clock, 6, racers, runs)
    async with anyio.create_task_group() as tg:
        for agent in agents:
            await tg.start(agent.run)
        await clock.advance(3)  # every node has read the full membership
        sent_before = sum(o.sent for o in observers)
        first = max(t for t, _n in runs) + 1 if runs else START_S
        await clock.advance(60)
        sent = sum(o.sent for o in observers) - sent_before
        holding = {a.node_id for a in agents if "every-second" in a.scheduler.next_tick}
        at_s = int(clock.time())
        for agent in agents:
            agent.stop()
        await clock.advance(5)
    ticks = Counter(t for t, _n in runs)
    assert [t for t, n in ticks.items() if n > 1] == []
    window = range(first, first + 59)
    assert [t for t in window if t not in ticks] == []
    per_tick = sent / 60
    ring = Ring.build(f"node-{i}" for i in range(6))
    if racers == "2":
        assert per_tick == pytest.approx(2, abs=0.1)
        # Work follows the ticks raced: the four others keep no tick of the job in their
        # heap, so they hardly plan one to leave it (only around a window's turn).
        assert holding == set(ring.racers("every-second", at_s + 1, 2))
        assert sum(o.skipped for o in observers) <= 8
        first_choice = ring.first_racer
    else:
        assert per_tick == pytest.approx(6, abs=0.2)
        assert len(holding) == 6
        first_choice = lambda job, t, _k: ring.preferred(job, t)  # noqa: E731
    # The first choice claims at once and wins: runs follow it.
    by_node = Counter(n for t, n in runs if t in window)
    preferred = Counter(first_choice("every-second", t, 2) for t in window)
    assert by_node == preferred


@pytest.mark.timeout(60)
async def test_ticks_whose_racers_are_dead_but_listed_fire_late_within_the_bound() -> None:
    # Two ghosts are listed with a last heartbeat at START + 2.4 and never claim: with
    # racers = 1 they are the only racer of a third of the ticks until they fall silent
    # (1.5 heartbeats) and each node's next heartbeat read drops them. One-second jobs
    # fire those ticks with their next live tick; a once-a-minute job's are raced again
    # once the ghosts are dropped: both within the documented bound, each once.
    clock = FakeClock(start_s=START_S)
    runs: list[tuple[str, int, str, float]] = []
    second = (START_S + 3) % 60  # once a minute, at START + 3: while the ghosts are listed
    jobs = [("@every 1s", f"fast-{fast}", {"catchup": "all"}) for fast in range(5)]
    jobs += [(f"{second} * * * * *", f"slow-{slow}", {"catchup": "all"}) for slow in range(20)]
    agents = witnessed_fleet(clock, "memory://racers-ghosts", "1", runs, jobs)
    ghosts = ("ghost-a", "ghost-b")
    last_beat_s = START_S + 2.4
    async with anyio.create_task_group() as tg:
        for agent in agents:
            await tg.start(agent.run)
        await clock.advance(1.2)
        store = agents[0].store
        beat_ms = int(last_beat_s * 1000)
        await list_ghosts(store, {g: beat_ms + 3000 for g in ghosts})
        await publish_like(store, "node-0", ghosts)
        await clock.advance(1.0)  # every live node has read the ghosts with its heartbeat
        assert all(len(a.membership.ring.members) == 6 for a in agents)
        await clock.advance(70)
        for agent in agents:
            agent.stop()
        await clock.advance(5)
    ring = Ring.build([*(f"node-{i}" for i in range(4)), *ghosts])
    fired: dict[tuple[str, int], list[float]] = {}
    for job, tick_s, _node, at in runs:
        fired.setdefault((job, tick_s), []).append(at)
    assert [key for key, times in fired.items() if len(times) > 1] == []
    for fast in range(5):
        ticks = sorted(t for job, t in fired if job == f"fast-{fast}")
        assert ticks == list(range(ticks[0], ticks[-1] + 1)), "a tick was lost"
    for slow in range(20):
        assert (f"slow-{slow}", START_S + 3) in fired
    orphaned = [
        (job, t)
        for job, t in fired
        if START_S + 2 < t < last_beat_s + 1.5 and ring.racers(job, t, 1)[0] in ghosts
    ]
    assert any(job.startswith("fast") for job, _t in orphaned)
    assert any(job.startswith("slow") for job, _t in orphaned)
    lags = {key: fired[key][0] - key[1] for key in orphaned}
    # The bound counts from the racers' last heartbeat: 2.5 heartbeats, 1 s each here.
    assert all(fired[key][0] <= last_beat_s + late_fire_bound_s(1.0) + 0.2 for key in lags), lags
    assert min(lags.values()) >= 0.9, lags  # late: the test saw the fault
    on_time = [at - t for (job, t), (at,) in fired.items() if (job, t) not in lags]
    assert max(on_time) <= 0.2


@pytest.mark.timeout(60)
async def test_operators_see_each_nodes_racers_and_how_many_race(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The node list is read against the server's TIME: the fake clock starts at now.
    clock = FakeClock(start_s=int(time.time()))
    runs: list[tuple[int, str]] = []
    agents, _observers = fleet(clock, 3, "2", runs)
    async with anyio.create_task_group() as tg:
        for agent in agents:
            await tg.start(agent.run)
        await clock.advance(2)
        rows = await agents[0].nodes()
        for agent in agents:
            agent.stop()
        await clock.advance(3)
    assert sorted((row.node_id, row.racers) for row in rows) == [
        ("node-0", "2"),
        ("node-1", "2"),
        ("node-2", "2"),
    ]
    print_nodes(rows, "cronrace", 120)
    shown = capsys.readouterr().out
    assert (
        "racers: 2 of 3 live node(s) race for each tick, chosen per job and hour-long window"
    ) in shown
    mixed = [replace(rows[0], racers="all"), *rows[1:]]
    assert racers_line(mixed).startswith("racers: the nodes disagree (")
    assert racers_line([replace(row, racers="all") for row in rows]) == (
        "racers: all 3 live node(s) race for each tick"
    )
    assert racers_line([replace(row, racers="2 in 8 groups") for row in rows]) == (
        "racers: 2 of 3 live node(s) race for each tick, chosen per group of jobs (8 groups) "
        "and hour-long window"
    )


@pytest.mark.timeout(60)
async def test_a_latest_job_records_missed_only_the_ticks_nobody_ran() -> None:
    # Each racer's claim decides, as a backlog, the ticks it left to others: those others
    # ran are not "missed". Only the ticks the ghosts held and the catch-up policy
    # (latest) then dropped are, once each.
    clock = FakeClock(start_s=START_S)
    runs: list[tuple[int, str]] = []
    name = held_by_ghosts(4, 1, GHOSTS, 40)
    agents, _observers = fleet(clock, 4, "1", runs, name)
    async with anyio.create_task_group() as tg:
        for agent in agents:
            await tg.start(agent.run)
        await clock.advance(1.2)
        store = agents[0].store
        # Listed for four ticks: more than the latest policy runs late, so some are lost.
        last_beat_ms = (START_S + 4) * 1000 + 400
        await list_ghosts(store, {g: last_beat_ms + 3000 for g in GHOSTS})
        await publish_like(store, "node-0", GHOSTS)
        await clock.advance(30)
        history = await agents[0].history(name, 200)
        for agent in agents:
            agent.stop()
        await clock.advance(3)
    ran = Counter(t for t, _n in runs)
    assert [t for t, n in ran.items() if n > 1] == []
    first, last = START_S + 1, START_S + 30
    not_run = [t for t in range(first, last) if t not in ran]
    missed = sum(r.count for r in history if r.outcome.value == "missed")
    assert not_run, "the ghosts held no tick: the test saw no fault"
    assert missed == len(not_run), (missed, not_run)
    assert {r.outcome.value for r in history} <= {"ok", "missed", "stale"}


@pytest.mark.timeout(60)
async def test_a_job_only_some_nodes_run_is_raced_by_them_at_every_tick() -> None:
    # A racer that lacks the job would never claim it: while the live nodes do not all
    # publish the same jobs, every node races for every tick of what it runs.
    clock = FakeClock(start_s=START_S)
    runs: list[tuple[int, str]] = []
    agents, _observers = fleet(clock, 3, "1", runs)
    only_here: list[int] = []

    async def rare(ctx: RunContext) -> None:
        only_here.append(ctx.tick_s)

    agents[0].add_job(rare, "@every 1s", name="only-on-node-0")
    async with anyio.create_task_group() as tg:
        for agent in agents:
            await tg.start(agent.run)
        await clock.advance(20)
        racing_among = [len(agent.membership.ring.members) for agent in agents]
        for agent in agents:
            agent.stop()
        await clock.advance(3)
    # node-0 runs a job the others lack: they race among themselves, it races alone.
    assert racing_among == [1, 2, 2]
    ticks = sorted(only_here)
    assert ticks == list(range(ticks[0], ticks[0] + len(ticks)))
    assert len(ticks) >= 19
    ran = Counter(t for t, _n in runs)
    assert [t for t, n in ran.items() if n > 1] == []


@pytest.mark.timeout(60)
async def test_one_racer_of_two_leaving_costs_no_extra_claim() -> None:
    # A ghost is one of the two racers of a third of the ticks while it is listed: the
    # other racer fires them (100 ms late when the ghost was the first choice), and its
    # departure sends no claim for them again, since a racer of theirs is still a member.
    clock = FakeClock(start_s=START_S)
    runs: list[tuple[int, str]] = []
    name = held_by_ghosts(4, 2, ("ghost",), 30)
    agents, observers = fleet(clock, 4, "2", runs, name)
    async with anyio.create_task_group() as tg:
        for agent in agents:
            await tg.start(agent.run)
        await clock.advance(1.2)
        store = agents[0].store
        await list_ghosts(store, {"ghost": (START_S + 2) * 1000 + 400 + 3000})
        await publish_like(store, "node-0", ("ghost",))
        # At START + 2 the nodes take the ghost in one by one: views differ for that tick.
        await clock.advance(1.3)
        sent_before = sum(o.sent for o in observers)
        await clock.advance(20)
        sent = sum(o.sent for o in observers) - sent_before
        for agent in agents:
            agent.stop()
        await clock.advance(3)
    ran = Counter(t for t, _n in runs)
    assert [t for t, n in ran.items() if n > 1] == []
    assert [t for t in range(START_S + 2, START_S + 21) if t not in ran] == []
    # Two claims a tick, one for the ticks the ghost was a racer of, and none again.
    ghost_ticks = [
        t
        for t in range(START_S + 3, START_S + 4)  # listed until START + 3.9
        if "ghost" in Ring.build([*(f"node-{i}" for i in range(4)), "ghost"]).racers(name, t, 2)
    ]
    assert sent == 2 * 20 - len(ghost_ticks)


@pytest.mark.timeout(60)
async def test_a_node_joining_a_running_fleet_claims_only_its_share_from_its_first_tick() -> None:
    # It reads what the others run before its first tick, not a heartbeat later: a node
    # joining a fleet of many jobs (a restart, a rolling deploy) does not claim every
    # job's every tick until its first heartbeat, only those its full view places on it.
    clock = FakeClock(start_s=START_S)
    names = [f"job-{i}" for i in range(30)]
    agents, observers = [], []
    for index in range(7):
        observer = Claims()
        agent = memory_agent(
            clock,
            store_url="memory://racers-join",
            node_id=f"node-{index}",
            racers="2",
            heartbeat_s=2.0,
        )
        agent.observer = observer

        async def tick(ctx: RunContext) -> None:
            pass

        for name in names:
            agent.add_job(tick, "@every 1s", name=name)
        agents.append(agent)
        observers.append(observer)
    async with anyio.create_task_group() as tg:
        for agent in agents[:6]:
            await tg.start(agent.run)
        await clock.advance(5)  # the six have read each other
        await tg.start(agents[6].run)
        joined_s = int(clock.time())
        await clock.advance(1.5)  # its first tick, before its first heartbeat after start
        sent = observers[6].sent
        for agent in agents:
            agent.stop()
        await clock.advance(5)
    ring = Ring.build(f"node-{i}" for i in range(7))
    raced = sum("node-6" in ring.racers(name, joined_s + 1, 2) for name in names)
    assert raced < len(names) / 2
    assert sent == raced


@pytest.mark.timeout(60)
async def test_ticks_orphaned_by_a_second_departure_also_fire() -> None:
    # Two waves of dead-but-listed members, half a minute apart, each the only racer
    # (racers = 1) of some once-a-minute jobs' tick while listed. Each wave's ticks are
    # raced again, late, once its members are dropped: the second wave's as well as the
    # first's (the loop once dropped the share's list of such ticks after its first race).
    clock = FakeClock(start_s=START_S)
    runs: list[tuple[str, int, str, float]] = []
    waves = ((("ghost-a", "ghost-b"), 3), (("ghost-c", "ghost-d"), 33))
    jobs: list[tuple[str, str, dict[str, object]]] = [
        (f"{(START_S + offset) % 60} * * * * *", f"at-{offset}-{slow}", {})
        for _ghosts, offset in waves
        for slow in range(20)
    ]
    agents = witnessed_fleet(clock, "memory://racers-two-waves", "1", runs, jobs)
    async with anyio.create_task_group() as tg:
        for agent in agents:
            await tg.start(agent.run)
        store = agents[0].store
        for ghosts, offset in waves:
            await clock.advance(START_S + offset - 1.8 - clock.time())
            last_beat_ms = (START_S + offset - 1) * 1000 + 400  # silent from then on
            await list_ghosts(store, {g: last_beat_ms + 3000 for g in ghosts})
            await publish_like(store, "node-0", ghosts)
            await clock.advance(1.0)  # every live node has read the ghosts
            assert all(len(a.membership.ring.members) == 6 for a in agents)
            await clock.advance(10)  # they are dropped, their ticks raced again
            assert all(len(a.membership.ring.members) == 4 for a in agents)
        for agent in agents:
            agent.stop()
        await clock.advance(5)
    fired = Counter((job, t) for job, t, _node, _at in runs)
    assert [key for key, n in fired.items() if n > 1] == []
    for ghosts, offset in waves:
        ring = Ring.build([*(f"node-{i}" for i in range(4)), *ghosts])
        tick_s = START_S + offset
        names = [f"at-{offset}-{slow}" for slow in range(20)]
        held = [n for n in names if ring.racers(n, tick_s, 1)[0] in ghosts]
        assert held, "the ghosts held no tick: the test saw no fault"
        assert [n for n in names if (n, tick_s) not in fired] == [], offset


@pytest.mark.timeout(60)
async def test_a_node_joining_a_fleet_reads_and_plans_only_the_jobs_it_races() -> None:
    """Issue 19: a node that starts with a view of the fleet places every job but reads
    the cursors of, and plans, only those it races (its own arcs): about k·J/N. It
    planned all J before (0.5 s of CPU for a node joining 1,000 nodes with 10,000 jobs).
    The jobs it leaves still fire, each once, from the nodes that race them."""
    clock = FakeClock(start_s=START_S + 0.5)
    url = "memory://racers-seed"
    runs: list[tuple[str, int, str]] = []
    names = [f"j{i:03d}" for i in range(200)]

    def node(index: int) -> Agent:
        agent = memory_agent(
            clock, store_url=url, node_id=f"node-{index}", racers="2", heartbeat_s=1.0
        )

        async def tick(ctx: RunContext) -> None:
            runs.append((ctx.job, ctx.tick_s, ctx.node_id))

        for name in names:
            agent.add_job(tick, "*/5 * * * * *", name=name)
        return agent

    agents = [node(i) for i in range(5)]
    async with anyio.create_task_group() as tg:
        for agent in agents:
            await tg.start(agent.run)
        await clock.advance(3)  # each has read the others and what they run
        late = node(5)
        asked: list[list[str]] = []
        read = late.store.cursors

        async def cursors(jobs: list[str]) -> dict[str, int | None]:
            asked.append(list(jobs))
            return await read(jobs)

        late.store.cursors = cursors  # type: ignore[method-assign]
        await tg.start(late.run)
        scheduler = late.scheduler
        assert scheduler is not None
        while not scheduler.seeded:
            await clock.advance(0.1)
        assert len(late.membership.ring.members) == 6  # its view held the fleet at seed
        now_s = int(clock.time())
        racing = [n for n in names if late.membership.races(n, now_s)]
        assert asked == [racing]
        assert 0 < len(racing) < len(names) / 2  # about k/N = 1/3 of them
        assert set(scheduler.next_tick) <= set(racing)
        first = int(clock.time()) + 5
        await clock.advance(20)
        last = int(clock.time()) - 1
        for agent in [*agents, late]:
            agent.stop()
    expected = {(n, t) for n in names for t in range(first, last) if t % 5 == 0}
    ticks = Counter((job, tick) for job, tick, _node in runs if first <= tick < last)
    assert set(ticks) == expected
    assert set(ticks.values()) == {1}


@pytest.mark.timeout(60)
async def test_grouped_jobs_are_raced_by_k_nodes_per_group_and_each_tick_fires_once() -> None:
    """Issue 19: with ``racer_groups = G`` a group's jobs share their racers in a window,
    so at most k·G nodes race (and run) anything; the others keep an empty heap and only
    beat. Every tick still fires once, at k claims per job-tick."""
    clock = FakeClock(start_s=START_S + 0.5)
    runs: list[tuple[str, int, str]] = []
    names = [f"g{i:02d}" for i in range(30)]
    agents, observers = [], []
    for index in range(10):
        agent = memory_agent(
            clock,
            store_url="memory://racers-grouped",
            node_id=f"node-{index}",
            racers="2",
            racer_groups="2",
            heartbeat_s=1.0,
        )
        observer = Claims()
        agent.observer = observer

        async def tick(ctx: RunContext) -> None:
            runs.append((ctx.job, ctx.tick_s, ctx.node_id))

        for name in names:
            agent.add_job(tick, "@every 1s", name=name)
        agents.append(agent)
        observers.append(observer)
    async with anyio.create_task_group() as tg:
        for agent in agents:
            await tg.start(agent.run)
        await clock.advance(4)  # every node has read the others and what they run
        sent_before = sum(o.sent for o in observers)
        first = int(clock.time()) + 1
        await clock.advance(30)
        last = int(clock.time())
        sent = sum(o.sent for o in observers) - sent_before
        racing = {a.node_id for a in agents if a.scheduler and a.scheduler.next_tick}
        settings = {str(a.settings.racer_setting) for a in agents}
        for agent in agents:
            agent.stop()
        await clock.advance(3)
    assert settings == {"2 in 2 groups"}
    ticks = Counter((job, tick) for job, tick, _node in runs if first <= tick < last)
    assert set(ticks) == {(n, t) for n in names for t in range(first, last)}
    assert set(ticks.values()) == {1}
    assert sent / (len(names) * 30) == pytest.approx(2, abs=0.1)
    ran = {node for _job, tick, node in runs if first <= tick < last}
    assert len(ran) <= 4
    assert 2 <= len(racing) <= 4
    ring = Ring.build(f"node-{i}" for i in range(10))
    grouped = agents[0].settings.racer_setting
    expected = {n for name in names for n in ring.racers(grouped.placed_as(name), last, 2)}
    assert racing == expected


@pytest.mark.timeout(60)
async def test_a_stored_schedule_added_to_a_grouped_fleet_is_raced_by_its_groups_racers() -> None:
    """A schedule stored at runtime is placed by its group as the code's jobs are
    (RacerShare.track): with one group, the same two nodes race every job, and it fires
    once a tick from them."""
    clock = FakeClock(start_s=START_S + 0.5)
    url = "memory://racers-grouped-stored"
    runs: list[tuple[str, int, str]] = []
    agents = []
    for index in range(6):
        agent = memory_agent(
            clock,
            store_url=url,
            node_id=f"node-{index}",
            racers="2",
            racer_groups="1",
            heartbeat_s=1.0,
        )

        @agent.handler("note")
        async def note(ctx: RunContext) -> None:
            runs.append((ctx.job, ctx.tick_s, ctx.node_id))

        agent.add_job(note, "@every 1s", name="in-code")
        agents.append(agent)
    ops = Agent(store_url=url, node_id="operator")
    async with anyio.create_task_group() as tg:
        for agent in agents:
            await tg.start(agent.run)
        await clock.advance(4)
        await ops.schedules.add("stored", "* * * * * *", handler="note")
        await clock.advance(3)  # every node has read it (heartbeat 1 s)
        first = int(clock.time()) + 1
        await clock.advance(20)
        last = int(clock.time())
        for agent in agents:
            agent.stop()
        await clock.advance(3)
    await ops.aclose()
    window = range(first, last)
    for job in ("in-code", "stored"):
        ticks = Counter(t for j, t, _n in runs if j == job and t in window)
        assert set(ticks) == set(window), job
        assert set(ticks.values()) == {1}, job
    ran = {n for j, t, n in runs if t in window}
    grouped = agents[0].settings.racer_setting
    ring = Ring.build(f"node-{i}" for i in range(6))
    racers = set(ring.racers(grouped.placed_as("stored"), last, 2))
    assert grouped.placed_as("stored") == grouped.placed_as("in-code")
    assert ran == racers
