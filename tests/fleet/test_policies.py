"""Overlap and catch-up policies with several agents on a real redis-server."""

from __future__ import annotations

import itertools
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import pytest

from cronrace import Agent, RunContext, RunRecord
from tests.helpers import running, settings, wait_for
from tests.redis_server import RedisServer

pytestmark = [pytest.mark.redis, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Span:
    tick_s: int
    fence: int
    node: str
    start: float
    end: float | None = None
    cancelled: bool = False


@dataclass
class Spans:
    spans: list[Span] = field(default_factory=list)

    def handler(self, duration_s: float):  # type: ignore[no-untyped-def]
        async def work(ctx: RunContext) -> None:
            span = Span(ctx.tick_s, ctx.fence, ctx.node_id, time.monotonic())
            self.spans.append(span)
            try:
                await anyio.sleep(duration_s)
            except anyio.get_cancelled_exc_class():
                span.cancelled = True
                raise
            finally:
                span.end = time.monotonic()

        return work

    def done(self) -> list[Span]:
        return sorted((s for s in self.spans if s.end is not None), key=lambda s: s.start)


def make_fleet(url: str, ns: str, size: int, handler, **job: object) -> list[Agent]:  # type: ignore[no-untyped-def]
    agents = []
    for index in range(size):
        agent = Agent(settings=settings(url, ns, f"node{index}"))
        agent.add_job(handler, "* * * * * *", name="job", **job)
        agents.append(agent)
    return agents


def overlaps(spans: list[Span]) -> list[tuple[int, int]]:
    ordered = sorted(spans, key=lambda s: s.start)
    return [
        (a.fence, b.fence)
        for a, b in itertools.pairwise(ordered)
        if a.end is not None and b.start < a.end - 0.01
    ]


def outcomes(records: list[RunRecord]) -> Counter[str]:
    return Counter(r.outcome.value for r in records)


@pytest.mark.timeout(60)
async def test_skip_runs_one_tick_in_three_and_records_the_others(
    redis_server: RedisServer, namespace: str
) -> None:
    spans = Spans()
    agents = make_fleet(redis_server.url, namespace, 3, spans.handler(2.5), lease_ttl=1.0)
    async with running(*agents):
        await wait_for(lambda: len(spans.done()) >= 3, timeout_s=30, what="3 finished runs")
        done = spans.done()
        first, last = done[0].tick_s, done[-1].tick_s

        async def decided() -> dict[int, str]:
            records = await agents[0].history("job", 200)
            return {r.tick_s: r.outcome.value for r in records if first <= r.tick_s <= last}

        async def every_tick_decided() -> bool:
            return sorted(await decided()) == list(range(first, last + 1))

        # Each node writes its own decisions' records; on a loaded machine the last one may
        # land a moment after the third run finished. A tick never decided fails here.
        await wait_for(every_tick_decided, timeout_s=10, what="a decision for every tick")
        by_tick = await decided()
    assert overlaps(spans.spans) == []
    ran = [t for t, o in by_tick.items() if o == "ok"]
    assert [t - first for t in sorted(ran)] == [0, 3, 6][: len(ran)]
    assert all(o == "skipped:overlap" for t, o in by_tick.items() if t not in ran)
    print(f"skip: runs={len(ran)} skipped={len(by_tick) - len(ran)} overlaps=0")


@pytest.mark.timeout(60)
async def test_queue_one_runs_back_to_back_with_at_most_one_waiting(
    redis_server: RedisServer, namespace: str
) -> None:
    spans = Spans()
    agents = make_fleet(
        redis_server.url, namespace, 3, spans.handler(2.5), overlap="queue_one", lease_ttl=1.0
    )
    async with running(*agents):
        await wait_for(lambda: len(spans.done()) >= 4, timeout_s=30, what="4 finished runs")
        records = await agents[0].history("job", 200)
    done = spans.done()[:4]
    assert overlaps(spans.spans) == []
    # Each queued run starts as soon as the previous one releases: a hand-on, no gap.
    gaps = [b.start - a.end for a, b in itertools.pairwise(done) if a.end]
    assert all(0 <= gap < 0.3 for gap in gaps), gaps
    # The arithmetic: a run every 2.5 s, and it is always the newest waiting tick.
    span_s = done[-1].start - done[0].start
    assert 7.0 < span_s < 8.5
    ticks = [s.tick_s for s in done]
    assert all(
        later - earlier == 2 or later - earlier == 3 for earlier, later in itertools.pairwise(ticks)
    )
    counts = outcomes(records)
    assert counts["queued"] >= 4
    assert counts["skipped:overlap"] >= 2  # older waiting ticks superseded by newer ones
    print(f"queue_one: runs={len(done)} gaps_ms={[round(g * 1000) for g in gaps]} {counts}")


@pytest.mark.timeout(60)
async def test_replace_cancels_the_old_run_and_refuses_its_late_writes(
    redis_server: RedisServer, namespace: str
) -> None:
    lease_ttl_s = 0.9
    starts: dict[int, float] = {}
    cancels: dict[int, float] = {}
    late_write: dict[int, bool] = {}

    async def forever(ctx: RunContext) -> None:
        starts[ctx.fence] = time.monotonic()
        assert await ctx.fenced_set(f"{namespace}:out", str(ctx.fence))
        try:
            await anyio.sleep(60)
        except anyio.get_cancelled_exc_class():
            cancels[ctx.fence] = time.monotonic()
            with anyio.CancelScope(shield=True):
                late_write[ctx.fence] = await ctx.fenced_set(f"{namespace}:out", "late")
            raise

    agents = make_fleet(
        redis_server.url, namespace, 3, forever, overlap="replace", lease_ttl=lease_ttl_s
    )
    async with running(*agents):
        await wait_for(lambda: len(cancels) >= 3, timeout_s=30, what="3 replaced runs")
    fences = sorted(starts)
    for old, new in itertools.pairwise(fences):
        if old in cancels:
            # Cancelled at its next renewal: within lease_ttl/3 of the new run, plus slack.
            assert cancels[old] - starts[new] < lease_ttl_s / 3 + 0.3
            assert late_write[old] is False
    print(
        f"replace: runs={len(starts)} cancelled={len(cancels)} late writes refused="
        f"{sum(not ok for ok in late_write.values())}"
    )


@pytest.mark.timeout(60)
async def test_allow_overlapping_runs_carry_distinct_increasing_fences(
    redis_server: RedisServer, namespace: str
) -> None:
    spans = Spans()
    agents = make_fleet(redis_server.url, namespace, 3, spans.handler(2.5), overlap="allow")
    async with running(*agents):
        await wait_for(lambda: len(spans.done()) >= 3, timeout_s=30, what="3 finished runs")
    ordered = sorted(spans.spans, key=lambda s: s.tick_s)
    assert [s.tick_s for s in ordered] == list(range(ordered[0].tick_s, ordered[-1].tick_s + 1))
    fences = [s.fence for s in ordered]
    assert fences == sorted(set(fences))
    assert overlaps(spans.spans), "runs of an allow job overlap in time"


async def restart_after_gap(
    url: str, namespace: str, catchup: str, gap_s: int, **job: object
) -> tuple[list[int], list[RunRecord], int, int]:
    """Run agents, stop them all for ``gap_s``, start new ones mid-second; return runs."""
    ran: list[int] = []

    def fleet() -> list[Agent]:
        agents = []
        for index in range(2):
            agent = Agent(settings=settings(url, namespace, f"n{index}", live_grace_s=0.2))
            agent.add_job(
                lambda ctx: ran.append(ctx.tick_s),
                "* * * * * *",
                name="job",
                catchup=catchup,
                **job,
            )
            agents.append(agent)
        return agents

    async with running(*fleet()):
        await wait_for(lambda: len(ran) >= 2, timeout_s=15, what="2 runs")
    last_before = max(ran)
    await anyio.sleep(gap_s - 1)
    await anyio.sleep((1.45 - time.time() % 1.0) % 1.0)  # start 0.45 s after a tick
    restart_s = int(time.time())
    async with running(*(second := fleet())):
        await wait_for(lambda: max(ran) > restart_s, timeout_s=15, what="a live tick")
        records = await second[0].history("job", 200)
    return ran, records, last_before, restart_s


@pytest.mark.timeout(60)
@pytest.mark.parametrize("catchup", ["skip", "latest", "all"])
async def test_catch_up_after_the_whole_fleet_was_down(
    redis_server: RedisServer, namespace: str, catchup: str
) -> None:
    ran, records, last_before, restart_s = await restart_after_gap(
        redis_server.url, namespace, catchup, gap_s=4
    )
    missed_ticks = list(range(last_before + 1, restart_s + 1))
    fired = [t for t in ran if t in missed_ticks]
    missed = sum(r.count for r in records if r.outcome == "missed")
    assert [t for t, n in Counter(ran).items() if n > 1] == []
    if catchup == "skip":
        assert fired == []
        assert missed == len(missed_ticks)
    elif catchup == "latest":
        assert fired == [missed_ticks[-1]]
        assert missed == len(missed_ticks) - 1
    else:
        assert fired == missed_ticks, "all fires every missed tick, in order"
        assert missed == 0
    print(
        f"catchup={catchup}: down for {len(missed_ticks)} ticks, fired {len(fired)}, "
        f"missed {missed}"
    )


@pytest.mark.timeout(60)
async def test_catch_up_all_is_bounded_by_max_catchup(
    redis_server: RedisServer, namespace: str
) -> None:
    ran, records, last_before, restart_s = await restart_after_gap(
        redis_server.url, namespace, "all", gap_s=5, max_catchup=2
    )
    missed_ticks = list(range(last_before + 1, restart_s + 1))
    assert [t for t in ran if t in missed_ticks] == missed_ticks[-2:]
    assert sum(r.count for r in records if r.outcome == "missed") == len(missed_ticks) - 2


@pytest.mark.timeout(90)
async def test_redis_outage_keeps_agents_up_then_catches_up_without_duplicates(
    fresh_redis: RedisServer, namespace: str
) -> None:
    ran: list[int] = []
    started: list[float] = []
    agents = []
    for index in range(3):
        agent = Agent(
            settings=settings(fresh_redis.url, namespace, f"n{index}", redis_timeout_s=0.5)
        )
        agent.add_job(
            lambda ctx: (ran.append(ctx.tick_s), started.append(time.time())),
            "* * * * * *",
            name="job",
        )
        agents.append(agent)
    async with running(*agents):
        await wait_for(lambda: len(ran) >= 2, timeout_s=15, what="2 runs")
        await anyio.to_thread.run_sync(fresh_redis.stop)
        down_s = time.time()
        await wait_for(
            lambda: not any(a.ready for a in agents), timeout_s=5, what="agents not ready"
        )
        await anyio.sleep(4)
        before_restart = len(ran)
        up_s = time.time()
        await anyio.to_thread.run_sync(fresh_redis.start)
        await wait_for(lambda: all(a.ready for a in agents), timeout_s=10, what="ready again")
        await wait_for(lambda: len(ran) >= before_restart + 3, timeout_s=15, what="runs again")
        records = await agents[0].history("job", 200)
    assert [t for t, n in Counter(ran).items() if n > 1] == [], "a tick fired twice"
    assert not [t for t in started if down_s + 0.1 < t < up_s], "fired without Redis"
    assert sum(r.count for r in records if r.outcome == "missed") >= 2
    print(
        f"outage: runs={len(ran)} missed={sum(r.count for r in records if r.outcome == 'missed')}"
    )


def operator(url: str, namespace: str, call: str) -> str:
    """Run an operator call in a second process, as an operator's script would."""
    code = (
        "import anyio, sys\n"
        "from cronrace import Agent\n"
        f"agent = Agent(redis_url={url!r}, namespace={namespace!r}, node_id='operator')\n"
        f"print(anyio.run(lambda: agent.{call}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return done.stdout.strip()


@pytest.mark.timeout(90)
async def test_pause_resume_and_trigger_from_another_process_reach_every_agent(
    redis_server: RedisServer, namespace: str
) -> None:
    ran: list[tuple[int, str | None]] = []
    agents = []
    for index in range(3):
        agent = Agent(settings=settings(redis_server.url, namespace, f"n{index}"))
        agent.add_job(
            lambda ctx: ran.append((ctx.tick_s, ctx.trigger_id)), "* * * * * *", name="job"
        )
        agent.add_job(lambda ctx: ran.append((0, ctx.trigger_id)), "@yearly", name="yearly")
        agents.append(agent)
    async with running(*agents):
        await wait_for(lambda: len(ran) >= 1, timeout_s=15, what="a run")
        await anyio.to_thread.run_sync(operator, redis_server.url, namespace, "pause('job')")
        paused_at = time.time()
        await anyio.sleep(3)
        during = [t for t, _ in ran if t > paused_at + 0.1]
        await anyio.to_thread.run_sync(operator, redis_server.url, namespace, "resume('job')")
        resumed_at = time.time()
        await wait_for(
            lambda: any(t > resumed_at for t, _ in ran), timeout_s=5, what="a run after resume"
        )
        trigger_id = await anyio.to_thread.run_sync(
            operator, redis_server.url, namespace, "trigger('yearly')"
        )
        await wait_for(
            lambda: any(tid == trigger_id for _, tid in ran), timeout_s=10, what="the triggered run"
        )
        records = await agents[0].history("job", 100)
        yearly = await agents[0].history("yearly", 10)
        status = {s.job: s for s in await agents[0].jobs_status()}
    assert during == []
    assert sum(1 for r in records if r.outcome == "skipped:paused") >= 2
    assert [tid for _, tid in ran].count(trigger_id) == 1, "one trigger, one run"
    assert [r.trigger_id for r in yearly if r.outcome == "ok"] == [trigger_id]
    assert status["job"].paused is False
    assert status["job"].skipped >= 2
    assert status["yearly"].schedule == "@yearly"
