"""Real agent processes on a real redis-server: killed, paused, and Redis taken away."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import anyio
import pytest

from cronrace import Agent, RunContext, RunRecord
from cronrace.stores.redis import Store
from tests.faults.witness import Witness, judge, sleep_until_fraction, start_node, stop_all
from tests.helpers import running, settings, wait_for
from tests.redis_server import RedisServer

pytestmark = [pytest.mark.redis, pytest.mark.slow]


async def history(url: str, namespace: str, job: str) -> list[RunRecord]:
    store = Store.from_url(url, namespace)
    try:
        return await store.history(job, 200)
    finally:
        await store.aclose()


@pytest.mark.timeout(90)
def test_killed_and_paused_nodes_never_double_fire(
    redis_server: RedisServer, namespace: str, witness: Witness, tmp_path: Path
) -> None:
    procs = [
        start_node(redis_server.url, namespace, f"p{i}", witness, stderr_dir=tmp_path)
        for i in range(3)
    ]
    try:
        deadline = time.monotonic() + 20
        while len({e["node"] for e in witness.events() if e["job"] == "slow"}) < 1:
            assert time.monotonic() < deadline, "no slow run started"
            time.sleep(0.05)
        # Pause the node running a slow handler for longer than its lease (0.9 s).
        slow_runner = next(e["node"] for e in witness.events() if e["job"] == "slow")
        paused = procs[int(slow_runner[1:])]
        killed = next(p for p in procs if p is not paused)
        sleep_until_fraction(0.5)
        paused.send_signal(signal.SIGSTOP)
        t_pause = time.time()
        time.sleep(1.0)
        killed.send_signal(signal.SIGKILL)
        time.sleep(2.0)
        paused.send_signal(signal.SIGCONT)
        t_resume = time.time()
        time.sleep(5.0)
        t_end = time.time()
    finally:
        stop_all(procs)
    evs = witness.events()
    first_fast = min(e["tick"] for e in evs if e["job"] == "fast")
    fast = judge(evs, "fast", first_tick_s=first_fast, last_tick_s=int(t_end) - 2)
    assert int(t_pause) + 3 <= int(t_end) - 2
    assert (fast.duplicates, fast.missed, fast.overlaps, fast.fence_disorder) == (
        [],
        [],
        [],
        [],
    ), fast.summary()
    # The paused node's slow run was cancelled on resume, not left running.
    paused_runs = [
        e for e in evs if e["job"] == "slow" and e["node"] == slow_runner and e["wall"] < t_pause
    ]
    fences = {e["fence"] for e in paused_runs if e["event"] == "start"}
    last_fence = max(fences)
    ends = [
        e
        for e in evs
        if e["job"] == "slow" and e["fence"] == last_fence and e["event"] in ("end", "cancelled")
    ]
    assert [e["event"] for e in ends] == ["cancelled"]
    assert ends[0]["wall"] < t_resume + 0.5
    records = anyio.run(history, redis_server.url, namespace, "slow")
    outcomes = sorted(r.outcome.value for r in records if r.fence == last_fence)
    # Its decision (granted) and one result: the next decision, during the pause, found its
    # lease run out and recorded it abandoned; the run's own release on resume was refused
    # then (a decision had recorded it), so no second result (lease_lost) follows.
    assert outcomes == ["abandoned", "granted"]
    # Runs of the slow job never overlap: each completed run ended before a newer started.
    starts = {e["fence"]: e["wall"] for e in evs if e["job"] == "slow" and e["event"] == "start"}
    finished = {e["fence"]: e["wall"] for e in evs if e["job"] == "slow" and e["event"] == "end"}
    for fence, end in finished.items():
        newer = [s for f, s in starts.items() if f > fence]
        assert all(end <= s + 0.05 for s in newer), f"run {fence} overlapped a newer one"


@pytest.mark.timeout(60)
async def test_redis_stopped_under_a_running_handler_cancels_it_by_the_deadline(
    fresh_redis: RedisServer, namespace: str
) -> None:
    started: list[float] = []
    cancelled: list[float] = []
    lease_ttl_s = 0.9

    async def long_run(ctx: RunContext) -> None:
        started.append(time.monotonic())
        try:
            await anyio.sleep(30)
        except anyio.get_cancelled_exc_class():
            cancelled.append(time.monotonic())
            raise

    agent = Agent(settings=settings(fresh_redis.url, namespace, "solo", redis_timeout_s=0.5))
    agent.add_job(long_run, "* * * * * *", name="long", lease_ttl=lease_ttl_s)
    async with running(agent):
        await wait_for(lambda: bool(started), timeout_s=10, what="the handler to start")
        await anyio.sleep(0.5)  # let at least one renewal succeed
        stopped_at = time.monotonic()
        await anyio.to_thread.run_sync(fresh_redis.stop)
        await wait_for(lambda: bool(cancelled), timeout_s=5, what="the handler to be cancelled")
        # The deadline runs from the last renewal sent before the outage: at most one
        # lease_ttl after Redis went away (plus scheduling slack), never "when Redis says".
        assert cancelled[0] - stopped_at < lease_ttl_s + 0.3
        await wait_for(lambda: not agent.ready, timeout_s=5, what="not ready while Redis is down")
        await anyio.to_thread.run_sync(fresh_redis.start)
