"""Garbage in Redis, a wiped Redis, cancelled calls, and handlers that hog the process."""

from __future__ import annotations

import logging
import time

import anyio
import pytest
from redis.asyncio import BlockingConnectionPool, Redis

from cronrace import Agent, RunContext
from cronrace.testing import FakeClock, memory_agent
from tests.helpers import running, settings, wait_for
from tests.redis_server import RedisServer

#: A tick; the fake clock starts half a second before it.
T0 = 1_800_000_000


async def test_garbage_under_one_jobs_keys_is_reported_and_other_jobs_keep_firing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # On the embedded store and a fake clock; every script meeting every kind of garbage on
    # a real server: tests/stores/redis/test_garbage.py, and in real processes: tests/faults.
    clock = FakeClock(start_s=T0 - 0.5)
    ran: list[tuple[str, int]] = []

    def note(ctx: RunContext) -> None:
        ran.append((ctx.job, ctx.tick_s - T0))

    agent = memory_agent(clock)
    # A garbled lease holds new runs for one lease_ttl (a run may have held it).
    agent.add_job(note, "* * * * * *", name="dirty", lease_ttl=2.0)
    agent.add_job(note, "* * * * * *", name="clean")
    keys = agent.store.keys
    async with running(agent):
        await clock.advance(2.0)  # ticks 0 and 1
        client = agent.store.client
        await client.set(keys.fence("dirty"), "NaN")
        await client.set(keys.cursor("dirty"), "yesterday")
        await client.delete(keys.lease("dirty"))
        await client.hset(keys.lease("dirty"), mapping={"owner": "?", "fence": "x"})
        await client.xadd(keys.runs("dirty"), {"r": b"\x80 not json"})
        await clock.advance(8.0)  # ticks 2..9
        history = await agent.history("dirty", 50)
    assert [tick for job, tick in ran if job == "clean"] == list(range(10))
    dirty = [tick for job, tick in ran if job == "dirty"]
    assert dirty[:2] == [0, 1]
    assert len(dirty) >= 4, f"the dirty job fires again after its hold: {dirty}"
    assert {r.tick_s - T0 for r in history if r.outcome == "ok"} >= set(dirty[2:-1])
    garbage = [r for r in caplog.records if "garbage" in r.getMessage()]
    assert {getattr(r, "kind", None) for r in garbage} >= {"fence", "cursor", "lease"}
    # The log names the full key and where it was moved.
    assert {getattr(r, "key", None) for r in garbage} >= {keys.fence("dirty"), keys.cursor("dirty")}
    assert all(getattr(r, "moved_to", "").startswith(keys.quarantine("dirty")) for r in garbage)


async def test_a_held_run_counts_its_handler_not_its_hold_as_its_duration(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock(start_s=T0 - 0.5)
    agent = memory_agent(clock)
    agent.add_job(lambda ctx: None, "*/5 * * * * *", name="job", lease_ttl=3.0)
    keys = agent.store.keys
    async with running(agent):
        await clock.advance(1.0)  # tick 0 runs
        await agent.store.client.delete(keys.lease("job"), keys.fence("job"))  # a wipe
        await clock.advance(9.0)  # tick 5: granted, held 3 s, run
        history = await agent.history("job", 10)
    held = [r for r in history if r.tick_s == T0 + 5]
    assert [r.outcome for r in held] == ["ok"], history
    assert held[0].started_ms >= (T0 + 5 + 3) * 1000 - 10, "it started when the hold ended"
    assert held[0].finished_ms - held[0].started_ms < 100, "the hold is no part of its duration"
    assert not [r for r in caplog.records if "overrunning" in r.getMessage()]


@pytest.mark.redis
@pytest.mark.timeout(60)
async def test_wiped_redis_reseeds_fences_upward_and_holds_new_runs_until_leases_re_asserted(
    fresh_redis: RedisServer, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    runs: list[tuple[int, float]] = []
    lease_ttl_s = 1.5

    async def note(ctx: RunContext) -> None:
        runs.append((ctx.fence, time.monotonic()))

    agent = Agent(settings=settings(fresh_redis.url, namespace, "n0"))
    agent.add_job(note, "* * * * * *", name="job", lease_ttl=lease_ttl_s)
    async with running(agent):
        await wait_for(lambda: len(runs) >= 2, timeout_s=10, what="2 runs")
        client = Redis.from_url(fresh_redis.url)
        await client.flushall()
        await client.aclose()
        wiped = time.monotonic()
        before = len(runs)
        await wait_for(lambda: len(runs) >= before + 2, timeout_s=15, what="runs after wipe")
    critical = [r for r in caplog.records if r.levelno == logging.CRITICAL]
    assert critical, "the wipe is logged loudly"
    fences = [fence for fence, _ in runs]
    assert fences == sorted(set(fences)), "fences never go back, even after the wipe"
    detected = critical[0].created - time.time() + time.monotonic()
    # The only node re-asserted the leases of its runs (none) and said so: the hold ends at
    # its next heartbeat, not one lease_ttl after the wipe was seen.
    ended = [r for r in caplog.records if "every node re-asserted" in r.getMessage()]
    assert ended, "the hold ends once every node re-asserted its leases"
    released = ended[0].created - time.time() + time.monotonic()
    after = [at for _, at in runs[before:]]
    assert all(at >= released - 0.1 for at in after if at > detected)
    assert released < detected + lease_ttl_s
    assert wiped < after[0]


@pytest.mark.redis
async def test_cancelled_redis_call_never_leaves_its_reply_for_the_next_caller(
    redis_server: RedisServer, namespace: str
) -> None:
    # One connection, so a reply left behind would be read by the next command.
    pool = BlockingConnectionPool.from_url(
        redis_server.url, max_connections=1, decode_responses=True
    )
    client = Redis.from_pool(pool)
    await client.set(f"{namespace}:a", "A")
    await client.set(f"{namespace}:b", "B")
    slow = (
        "local t = redis.call('TIME'); local s = tonumber(t[1]) * 1e6 + tonumber(t[2]) "
        "repeat local n = redis.call('TIME') until tonumber(n[1]) * 1e6 + tonumber(n[2]) "
        "- s > 200000 return redis.call('GET', KEYS[1])"
    )
    for _ in range(3):
        with anyio.move_on_after(0.05):
            await client.eval(slow, 1, f"{namespace}:a")
        assert await client.get(f"{namespace}:b") == "B"
    await client.aclose()


@pytest.mark.redis
@pytest.mark.timeout(60)
async def test_renewals_are_not_starved_by_busy_sync_handlers(
    redis_server: RedisServer, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Four CPU-bound sync handlers (two threads at a time, the default): two runs hold the
    threads for longer than a lease while the other two wait for one for as long, and all
    of them renew from the event loop.

    The lease (4 s, renewed every ~1.3 s) leaves room for the GIL hand-offs of a loaded
    2-core machine running the suite in several workers; a 2 s lease lost renewals there
    (each wake of the loop waits behind two busy threads), which says nothing about the
    agent."""
    caplog.set_level(logging.DEBUG, logger="cronrace")
    lease_ttl_s = 4.0
    handlers = 4
    started: list[float] = []
    finished: list[str] = []

    def burn(ctx: RunContext) -> None:
        started.append(time.monotonic())
        # The first two hold both threads past a lease; the other two have waited as long
        # for one by the time they get it, and need not burn long themselves.
        busy_s = lease_ttl_s + 1.0 if len(started) <= 2 else 0.5
        deadline = time.monotonic() + busy_s
        while time.monotonic() < deadline:
            sum(range(10_000))
        finished.append(ctx.job)

    agent = Agent(settings=settings(redis_server.url, namespace, "n0"))
    names = [f"burn{index}" for index in range(handlers)]
    for name in names:
        agent.add_job(burn, "@yearly", name=name, lease_ttl=lease_ttl_s)
    async with running(agent):
        # Triggered at once (a shared tick would first be waited for): same lease, same path.
        triggers = {name: await agent.trigger(name) for name in names}
        await wait_for(
            lambda: len(finished) >= handlers, timeout_s=45, what=f"{handlers} busy runs"
        )

        async def recorded() -> bool:
            return all([await agent.history(name, 5) for name in names])

        await wait_for(recorded, timeout_s=10, what="every run's record")
        records = {name: await agent.history(name, 5) for name in names}
    assert {
        name: [(r.trigger_id, r.outcome.value) for r in got] for name, got in records.items()
    } == {name: [(triggers[name], "ok")] for name in names}
    assert min(started[2:]) - max(started[:2]) > lease_ttl_s, "two runs waited past a lease"
    slowest = [
        getattr(r, "slowest_ms", 0) for r in caplog.records if r.getMessage() == "lease renewals"
    ]
    print(f"slowest renewal under 2 busy threads: {max(slowest, default=0)} ms")
