"""The winner's path floor: bare redis-py doing exactly what a tick's winner must.

For N nodes x J one-second jobs, each tick: every node sends its J claims in one pipeline
(``SET NX PX``, as cronrace does); the winners decide their won ticks in one pipeline of
cronrace's own ``acquire.lua``; each run starts as a task (an empty handler); the runs
that finish together are released in one pipeline of cronrace's ``release.lua``, each
with a run record. Nothing else: no heap, no plans, no records outbox, no renewals, no
observer, no retries. Its CPU per run and fire lag are what cronrace's winner path is
compared with (``winner_cpu_over_floor``), measured side by side on the same server.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson
import redis.asyncio as aioredis

from benchmarks.cells import percentile
from cronrace.stores.redis import Keys
from cronrace.stores.redis.scripts import script_sources

LEASE_TTL_MS = 30_000
CLAIM_TTL_MS = 306_000
HISTORY = 1000


async def _node(
    client: Any,
    keys: Keys,
    shas: dict[str, str],
    node: int,
    jobs: list[str],
    tick: int,
    runs: list[tuple[int, float]],
) -> None:
    owner = f"n{node:03d}:floor"
    pipe = client.pipeline(transaction=False)
    for job in jobs:
        pipe.set(keys.claim(job, tick), owner, nx=True, px=CLAIM_TTL_MS)
    won = [job for job, ok in zip(jobs, await pipe.execute(), strict=True) if ok]
    if not won:
        return
    pipe = client.pipeline(transaction=False)
    for job in won:
        pipe.evalsha(
            shas["acquire"],
            7,
            keys.lease(job),
            keys.fence(job),
            keys.last(job),
            keys.pending(job),
            keys.state(job),
            keys.claim(job, tick),
            keys.hold(job),
            tick,
            tick,
            tick,
            owner,
            LEASE_TTL_MS,
            "skip",
            "run",
            f"run:{tick}",
            0,
            keys.quarantine(job),
            "",
        )
    granted = [
        (job, int(reply[1]))
        for job, reply in zip(won, await pipe.execute(), strict=True)
        if reply[0] == b"run"
    ]

    async def handler() -> None:
        runs.append((tick, time.time()))

    started = time.time()
    await asyncio.gather(*(asyncio.create_task(handler()) for _job in granted))
    pipe = client.pipeline(transaction=False)
    for job, fence in granted:
        record = orjson.dumps(
            {
                "job": job,
                "tick": tick,
                "node": owner,
                "outcome": "ok",
                "fence": fence,
                "started_ms": int(started * 1000),
                "finished_ms": int(time.time() * 1000),
            }
        )
        pipe.evalsha(
            shas["release"],
            6,
            keys.lease(job),
            keys.fence(job),
            keys.pending(job),
            keys.state(job),
            keys.runs(job),
            keys.hold(job),
            fence,
            owner,
            LEASE_TTL_MS,
            0,
            record,
            HISTORY,
            keys.quarantine(job),
        )
    await pipe.execute()


async def _floor(url: str, namespace: str, nodes: int, jobs: int, ticks: int) -> dict[str, Any]:
    client = aioredis.Redis.from_url(url, max_connections=max(4, nodes))
    keys = Keys(namespace)
    sources = script_sources()
    shas = {name: await client.script_load(sources[name]) for name in ("acquire", "release")}
    names = [f"f{index:04d}" for index in range(jobs)]
    runs: list[tuple[int, float]] = []
    first = int(time.time()) + 2  # one warm-up tick
    cpu_start = 0.0
    for tick in range(first, first + ticks + 1):
        await asyncio.sleep(max(0.0, tick - time.time()))
        if tick == first + 1:
            cpu_start, runs = time.process_time(), []
        await asyncio.gather(
            *(_node(client, keys, shas, node, names, tick, runs) for node in range(nodes))
        )
    cpu_s = time.process_time() - cpu_start
    await client.aclose()
    lags_ms = [(at - tick) * 1000 for tick, at in runs]
    return {
        "nodes": nodes,
        "jobs": jobs,
        "ticks": ticks,
        "runs": len(runs),
        "cpu_us_per_run": round(cpu_s / max(1, len(runs)) * 1e6, 1),
        "fire_lag_p50_ms": percentile(lags_ms, 50),
        "fire_lag_p99_ms": percentile(lags_ms, 99),
    }


def floor_cell(
    url: str, namespace: str, nodes: int, jobs: int, ticks: int, loop: str
) -> dict[str, Any]:
    """Run the floor for N x J over ``ticks`` measured ticks (after one warm-up tick)."""
    coroutine = _floor(url, namespace, nodes, jobs, ticks)
    if loop == "uvloop":
        import uvloop

        return uvloop.run(coroutine)
    return asyncio.run(coroutine)
