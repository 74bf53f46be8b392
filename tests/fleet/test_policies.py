"""Overlap and catch-up policies with several agents of one fleet, on a fake clock.

Three agents share one embedded store and one :class:`FakeClock`: every tick is raced by
all three, and time moves only when the test says so, so each test states the exact runs
and records a policy gives (the same policies on a real redis-server, in real processes:
tests/faults; the store on a real server and a Cluster: tests/stores), except one outage
of a real server.
"""

from __future__ import annotations

import itertools
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import anyio
import pytest

from cronrace import Agent, RunContext, RunRecord
from cronrace.testing import FakeClock
from tests.helpers import history, memory_fleet, memory_server, running, settings, wait_for
from tests.redis_server import RedisServer

#: A tick; every test's clock starts half a second before it.
T0 = 1_800_000_000


@dataclass
class Span:
    tick_s: int
    fence: int
    node: str
    start_s: float
    end_s: float | None = None
    cancelled_s: float | None = None


@dataclass
class Spans:
    """Each run's span on the fake clock, in seconds after ``T0``."""

    clock: FakeClock
    spans: list[Span] = field(default_factory=list)

    def handler(self, duration_s: float):  # type: ignore[no-untyped-def]
        async def work(ctx: RunContext) -> None:
            span = Span(ctx.tick_s - T0, ctx.fence, ctx.node_id, self.clock.time() - T0)
            self.spans.append(span)
            try:
                await self.clock.sleep(duration_s)
            except anyio.get_cancelled_exc_class():
                span.cancelled_s = self.clock.time() - T0
                raise
            span.end_s = self.clock.time() - T0

        return work

    def ticks(self) -> list[int]:
        return [s.tick_s for s in self.spans]


def fleet(clock: FakeClock, handler: Any, size: int = 3, **job: Any) -> list[Agent]:
    agents = memory_fleet(clock, size)
    for agent in agents:
        agent.add_job(handler, "* * * * * *", name="job", **job)
    return agents


def decisions(records: list[RunRecord]) -> list[tuple[int, str]]:
    return [(r.tick_s - T0, r.outcome.value) for r in records]


async def test_skip_runs_one_tick_in_three_and_records_the_others() -> None:
    clock = FakeClock(start_s=T0 - 0.5)
    spans = Spans(clock)
    agents = fleet(clock, spans.handler(2.5), lease_ttl=1.0)
    async with running(*agents):
        await clock.advance(9.2)  # ticks 0..8; the run of tick 6 ends at 8.5
        records = await history(agents[0], "job", first_s=T0, last_s=T0 + 8)
    # A run takes 2.5 s: the next free tick is 3 s after the last run's.
    assert [(s.tick_s, s.start_s, s.end_s) for s in spans.spans] == [
        (0, 0.0, 2.5),
        (3, 3.0, 5.5),
        (6, 6.0, 8.5),
    ]
    assert decisions(records) == [(t, "ok" if t % 3 == 0 else "skipped:overlap") for t in range(9)]


async def test_queue_one_runs_back_to_back_with_at_most_one_waiting() -> None:
    clock = FakeClock(start_s=T0 - 0.5)
    spans = Spans(clock)
    agents = fleet(clock, spans.handler(2.4), overlap="queue_one", lease_ttl=1.0)
    async with running(*agents):
        await clock.advance(10.4)  # ticks 0..9; the fifth run starts at 9.6
        records = await history(agents[0], "job", first_s=T0, last_s=T0 + 9)
    # The newest waiting tick runs as the previous run releases: a hand-on, no gap.
    assert spans.ticks() == [0, 2, 4, 7, 9]
    for earlier, later in itertools.pairwise(spans.spans):
        assert earlier.end_s is not None
        assert later.start_s == pytest.approx(earlier.end_s, abs=1e-6)
        assert later.start_s == pytest.approx(earlier.start_s + 2.4, abs=1e-6)
    # Every tick that came while a run was alive waited (queued); a newer one superseded
    # it (skipped), or it ran. One record a tick: a run's result replaces its decision's.
    superseded = [1, 3, 5, 6, 8]
    expected = sorted(
        [(s.tick_s, "ok") for s in spans.spans[:-1]]  # the fifth is still running
        + [(9, "queued")]
        + [(t, "skipped:overlap") for t in superseded]
    )
    assert decisions(records) == expected
    # At most one waits: each run takes the newest, never an older one after it.
    assert len({s.node for s in spans.spans}) == 1, "a queued tick is handed to the releaser"


async def test_replace_cancels_the_old_run_and_refuses_its_late_writes() -> None:
    lease_ttl_s = 0.9
    clock = FakeClock(start_s=T0 - 0.5)
    starts: dict[int, float] = {}
    cancels: dict[int, float] = {}
    late_write: dict[int, bool] = {}

    async def forever(ctx: RunContext) -> None:
        starts[ctx.fence] = clock.time() - T0
        assert await ctx.fenced_set("out", str(ctx.fence))
        try:
            await clock.sleep(60)
        except anyio.get_cancelled_exc_class():
            cancels[ctx.fence] = clock.time() - T0
            with anyio.CancelScope(shield=True):
                late_write[ctx.fence] = await ctx.fenced_set("out", "late")
            raise

    agents = fleet(clock, forever, overlap="replace", lease_ttl=lease_ttl_s)
    async with running(*agents):
        await clock.advance(4.0)  # ticks 0..3
        records = await history(agents[0], "job", first_s=T0, last_s=T0 + 3)
        replaced = dict(cancels)  # the stop cancels the last one too
    fences = sorted(starts)
    assert [starts[f] for f in fences] == [0.0, 1.0, 2.0, 3.0]
    # Each run is cancelled at its first renewal after the next one took the lease (the
    # renewal is answered "taken by a newer fence"), and its late write is refused.
    assert sorted(replaced) == fences[:-1]
    for old, new in itertools.pairwise(fences):
        assert starts[new] < replaced[old] <= starts[new] + lease_ttl_s / 3 + 1e-6
        assert late_write[old] is False
    lost = [r for r in records if r.outcome == "lease_lost"]
    assert sorted(r.fence for r in lost) == fences[:-1]


async def test_allow_overlapping_runs_carry_distinct_increasing_fences() -> None:
    clock = FakeClock(start_s=T0 - 0.5)
    spans = Spans(clock)
    agents = fleet(clock, spans.handler(2.5), overlap="allow")
    async with running(*agents):
        await clock.advance(5.0)  # ticks 0..4
    assert spans.ticks() == [0, 1, 2, 3, 4]
    assert [s.start_s for s in spans.spans] == [0.0, 1.0, 2.0, 3.0, 4.0]
    fences = [s.fence for s in spans.spans]
    assert fences == sorted(set(fences))
    first, second = spans.spans[:2]
    assert first.end_s == 2.5
    assert second.start_s < first.end_s, "runs of an allow job overlap in time"


async def restart_after_gap(
    catchup: str, down_s: float, **job: Any
) -> tuple[list[int], list[RunRecord]]:
    """Run a fleet through ticks 0 and 1, stop it, start a new one ``down_s`` later.

    The new fleet starts 0.45 s after a tick, later than ``live_grace_s`` (0.2 s): that tick
    is missed too. Returns every tick run (relative to ``T0``) and the records.
    """
    clock = FakeClock(start_s=T0 - 0.5)
    ran: list[int] = []

    def note(ctx: RunContext) -> None:
        ran.append(ctx.tick_s - T0)

    first = memory_fleet(clock, 2, live_grace_s=0.2)
    url = first[0].settings.store_url
    for agent in first:
        agent.add_job(note, "* * * * * *", name="job", catchup=catchup, **job)
    async with running(*first):
        await clock.advance(2.0)  # ticks 0 and 1
    assert ran == [0, 1]
    await clock.advance(down_s)  # nobody runs: the ticks pass unattempted
    assert clock.time() - T0 == pytest.approx(1.5 + down_s)
    second = memory_fleet(clock, 2, prefix="new", store_url=url, live_grace_s=0.2)
    for agent in second:
        agent.add_job(note, "* * * * * *", name="job", catchup=catchup, **job)
    async with running(*second):
        await clock.advance(1.0)  # one live tick
        records = await history(second[0], "job", first_s=T0, last_s=T0 + 100)
    return ran, records


@pytest.mark.parametrize("catchup", ["skip", "latest", "all"])
async def test_catch_up_after_the_whole_fleet_was_down(catchup: str) -> None:
    # Down from 1.5 to 9.45: ticks 2..9 were missed; 10 is live.
    ran, records = await restart_after_gap(catchup, down_s=7.95)
    missed_ticks = list(range(2, 10))
    # One record counts the ticks not run: a range from the oldest.
    missed = [(r.tick_s - T0, r.count) for r in records if r.outcome == "missed"]
    if catchup == "skip":
        assert ran == [0, 1, 10]
        assert missed == [(2, 8)]  # one record: the range 2..9, and its count
    elif catchup == "latest":
        assert ran == [0, 1, 9, 10]
        assert missed == [(2, 7)]
    else:
        assert ran == [0, 1, *missed_ticks, 10], "all fires every missed tick, in order"
        assert missed == []
    assert Counter(ran) == Counter(set(ran)), "no tick fired twice"


async def test_catch_up_all_is_bounded_by_max_catchup() -> None:
    ran, records = await restart_after_gap("all", down_s=7.95, max_catchup=2)
    assert ran == [0, 1, 8, 9, 10]
    missed = [
        (r.tick_s - T0, r.last_tick_s - T0, r.count) for r in records if r.outcome == "missed"
    ]
    assert missed == [(2, 7, 6)]


async def test_redis_outage_keeps_agents_up_then_catches_up_without_duplicates() -> None:
    clock = FakeClock(start_s=T0 - 0.5)
    ran: list[tuple[int, float]] = []

    def note(ctx: RunContext) -> None:
        ran.append((ctx.tick_s - T0, clock.time() - T0))

    agents = fleet(clock, note)
    server = memory_server(agents[0])
    async with running(*agents):
        await clock.advance(2.0)  # ticks 0 and 1
        server.connected = False  # every command now fails to connect
        await clock.advance(4.0)  # ticks 2..5 come while Redis is down
        assert not any(a.ready for a in agents)
        server.connected = True
        await clock.advance(4.0)  # back: catch up (latest), then ticks up to 9
        assert all(a.ready for a in agents)
        records = await history(agents[0], "job", first_s=T0, last_s=T0 + 9)
    ticks = [tick for tick, _ in ran]
    assert Counter(ticks) == Counter(set(ticks)), "a tick fired twice"
    assert [tick for tick, at in ran if 1.5 < at < 5.5] == [], "fired without Redis"
    assert ticks[:2] == [0, 1]
    assert ticks[-4:] == [6, 7, 8, 9], "live ticks fire again"
    # Every tick is accounted for once: run, or counted in a missed record (catch-up
    # latest runs only the newest of the ticks missed while Redis was down).
    missed = sum(r.count for r in records if r.outcome == "missed")
    assert missed >= 2
    assert missed + len(ticks) == 10
    assert sorted(r.tick_s - T0 for r in records if r.outcome == "ok") == ticks


async def test_pause_resume_and_trigger_from_an_operator_reach_every_agent() -> None:
    # Near the real time: the embedded store's TIME (the live-node check) is the real clock.
    t0 = int(time.time()) + 1
    clock = FakeClock(start_s=t0 - 0.5)
    ran: list[tuple[int, str | None]] = []
    agents = memory_fleet(clock, 3)
    for agent in agents:
        agent.add_job(
            lambda ctx: ran.append((ctx.tick_s - t0, ctx.trigger_id)), "* * * * * *", name="job"
        )
        agent.add_job(lambda ctx: ran.append((-1, ctx.trigger_id)), "@yearly", name="yearly")
    # An operator: an agent that never runs, on the same store (the CLI's way; the CLI
    # itself, in other processes on a real server: tests/sidecar/test_cli.py).
    operator = Agent(store_url=agents[0].settings.store_url, node_id="operator")
    async with running(*agents):
        await clock.advance(2.0)  # ticks 0 and 1
        await operator.pause("job")
        await clock.advance(3.0)  # ticks 2..4, paused
        await operator.resume("job")
        await clock.advance(2.0)  # ticks 5 and 6
        trigger_id = await operator.trigger("yearly")
        await clock.advance(0.1)
        records = await history(operator, "job", first_s=t0, last_s=t0 + 6)
        yearly = await operator.history("yearly", 10)
        status = {s.job: s for s in await operator.jobs_status()}
    await operator.aclose()
    assert ran == [(0, None), (1, None), (5, None), (6, None), (-1, trigger_id)]
    assert [(r.tick_s - t0, r.outcome.value) for r in records] == [
        (0, "ok"),
        (1, "ok"),
        (2, "skipped:paused"),
        (3, "skipped:paused"),
        (4, "skipped:paused"),
        (5, "ok"),
        (6, "ok"),
    ]
    assert [(r.trigger_id, r.outcome.value) for r in yearly] == [(trigger_id, "ok")]
    assert status["job"].paused is False
    assert status["job"].skipped == 3
    assert status["yearly"].schedule == "@yearly"


@pytest.mark.redis
@pytest.mark.timeout(60)
async def test_agents_ride_out_a_real_server_stopping_and_starting_again(
    fresh_redis: RedisServer, namespace: str
) -> None:
    # The real thing beside the fake outage above: real sockets refused and reset, the
    # store's errors translated on the way up, a reconnect. Real time, so only the rules
    # that hold whatever the timing are checked.
    ran: list[tuple[int, float]] = []
    agents = []
    for index in range(2):
        agent = Agent(
            settings=settings(fresh_redis.url, namespace, f"n{index}", redis_timeout_s=0.5)
        )
        agent.add_job(lambda ctx: ran.append((ctx.tick_s, time.time())), "* * * * * *", name="job")
        agents.append(agent)
    async with running(*agents):
        await wait_for(lambda: len(ran) >= 1, timeout_s=15, what="a run")
        await anyio.to_thread.run_sync(fresh_redis.stop)
        down_s = time.time()
        await wait_for(
            lambda: not any(a.ready for a in agents), timeout_s=10, what="agents not ready"
        )
        up_s = time.time()
        await anyio.to_thread.run_sync(fresh_redis.start)
        await wait_for(lambda: all(a.ready for a in agents), timeout_s=10, what="ready again")
        await wait_for(lambda: ran[-1][1] > up_s, timeout_s=10, what="a run after the restart")
    ticks = [tick for tick, _ in ran]
    assert Counter(ticks) == Counter(set(ticks)), "a tick fired twice"
    assert not [at for _, at in ran if down_s + 0.1 < at < up_s], "fired without Redis"
