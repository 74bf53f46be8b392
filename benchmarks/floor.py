"""The winner's path floor: bare redis-py doing exactly what a tick's winner must.

For N nodes x J one-second jobs, each tick, as cronrace's nodes do it: every node claims
first the jobs it is the preferred node for (``SET NX PX`` in one pipeline) and the others
``PREFERRED_HEAD_START_S`` later in a second pipeline, so runs spread across the nodes
(docs/design.md section 12: job ``j``'s preferred node for tick ``t`` is ``(j + t) mod N`` here,
a rotation without cronrace's ring hash), each claim living ``UNDECIDED_CLAIM_MS`` as an
agent's does; each node decides what it won in one pipeline of cronrace's own
``decide.lua`` (the dense cursor: the cursor it expects is the previous tick, which every
job's winner decided; the decision writes its ``granted`` record); each run starts as a
task (an empty handler); the runs that finish together end in one pipeline of cronrace's
``end_run.lua``, each with its run record. Nothing else: no heap, no plans, no records
outbox, no renewals, no observer, no retries, no heartbeat. Its CPU per run and fire lag
are what cronrace's winner path is compared with (``winner_cpu_over_floor``), measured
side by side on the same server.

It runs in a process of its own (``python -m benchmarks.floor CONFIG_JSON``), as
cronrace's fleet process does: measured in the harness's process, its CPU took in the
progress display's refresh thread.
"""

from __future__ import annotations

import asyncio
import gc
import json
import subprocess
import sys
import time
from collections import Counter
from typing import Any

import orjson
import redis.asyncio as aioredis

from benchmarks.cells import percentile
from cronrace.stores.redis import Keys
from cronrace.stores.redis.scripts import script_sources
from cronrace.tick.loop import PREFERRED_HEAD_START_S

LEASE_TTL_MS = 30_000
#: How long a won claim lives undecided (the agents' ``undecided_claim_s``).
UNDECIDED_CLAIM_MS = 3_000
#: How long a decided claim keeps its answer (the agents' claim TTL for the default
#: catch-up window: 300 s, plus the 5 s skew tolerance and 1 s).
CLAIM_TTL_MS = 306_000
HISTORY = 1000


async def _race(
    client: Any,
    keys: Keys,
    shas: dict[str, str],
    owner: str,
    jobs: list[str],
    tick: int,
    runs: list[tuple[int, float]],
    cursor: int | None,
    answers: Counter[str],
) -> None:
    """One wake-up of one node: claim ``jobs``, decide the won ones, run, end the runs.

    ``cursor``: the cursor every job's decision expects (None: the first tick, no
    decision yet)."""
    pipe = client.pipeline(transaction=False)
    for job in jobs:
        pipe.set(keys.claim(job, tick), owner, nx=True, px=UNDECIDED_CLAIM_MS)
    won = [job for job, ok in zip(jobs, await pipe.execute(), strict=True) if ok]
    if not won:
        return
    pipe = client.pipeline(transaction=False)
    for job in won:
        of = keys.of(job)
        pipe.evalsha(
            shas["decide"],
            9,
            of.lease,
            of.fence,
            of.cursor,
            of.pending,
            of.state,
            keys.claim(job, tick),
            of.hold,
            of.runs,
            of.triggers,
            tick,
            "" if cursor is None else cursor,
            tick - 1 if cursor is None else cursor,  # the plan's lower bound
            tick,  # the one tick it fires
            "",  # nothing missed
            owner,
            "skip",
            LEASE_TTL_MS,
            CLAIM_TTL_MS,
            0,
            0,
            "",
            HISTORY,
            of.quarantine,
            job,
        )
    replies = await pipe.execute()
    granted = [
        (job, int(reply[3]))
        for job, reply in zip(won, replies, strict=True)
        if reply[0] == b"decided" and reply[2] == b"run"
    ]
    if len(granted) < len(won):  # the floor does not plan again: say so in its figures
        answers.update(f"{r[0].decode()}:{r[2].decode()}" for r in replies if r[2] != b"run")

    async def handler() -> None:
        runs.append((tick, time.time()))

    started = time.time()
    await asyncio.gather(*(asyncio.create_task(handler()) for _job in granted))
    pipe = client.pipeline(transaction=False)
    for job, fence in granted:
        record = orjson.dumps(
            {
                "job": job,
                "tick_s": tick,
                "node": owner.partition(":")[0],
                "outcome": "ok",
                "fence": fence,
                "started_ms": int(started * 1000),
                "finished_ms": int(time.time() * 1000),
                "error": None,
                "count": 1,
                "trigger_id": None,
                "detail": None,
                "last_tick_s": 0,
            }
        )
        of = keys.of(job)
        pipe.evalsha(
            shas["end_run"],
            6,
            of.lease,
            of.fence,
            of.pending,
            of.state,
            of.runs,
            of.hold,
            fence,
            owner,
            LEASE_TTL_MS,
            record,
            HISTORY,
            of.quarantine,
            "1",  # hand on: the grant has no tick left, so the lease is released
            job,
        )
    await pipe.execute()


async def _node(
    client: Any,
    keys: Keys,
    shas: dict[str, str],
    node: int,
    nodes: int,
    jobs: list[str],
    tick: int,
    runs: list[tuple[int, float]],
    cursor: int | None,
    answers: Counter[str],
) -> None:
    """One node's tick: its preferred jobs at once, the others after the head start."""
    owner = f"n{node:03d}:floor"
    first = [job for index, job in enumerate(jobs) if (index + tick) % nodes == node]
    rest = [job for index, job in enumerate(jobs) if (index + tick) % nodes != node]
    preferred = asyncio.create_task(
        _race(client, keys, shas, owner, first, tick, runs, cursor, answers)
    )
    if rest:
        await asyncio.sleep(max(0.0, tick + PREFERRED_HEAD_START_S - time.time()))
        await _race(client, keys, shas, owner, rest, tick, runs, cursor, answers)
    await preferred


async def _floor(url: str, namespace: str, nodes: int, jobs: int, ticks: int) -> dict[str, Any]:
    client = aioredis.Redis.from_url(url, max_connections=max(4, 2 * nodes))
    keys = Keys(namespace)
    sources = script_sources()
    shas = {name: await client.script_load(sources[name]) for name in ("decide", "end_run")}
    names = [f"f{index:04d}" for index in range(jobs)]
    runs: list[tuple[int, float]] = []
    answers: Counter[str] = Counter()
    first = int(time.time()) + 2  # one warm-up tick
    # What start-up left is frozen, as cronrace's fleet processes freeze theirs once ready
    # (Agent.run_sync does it in a node's own process): like for like.
    gc.freeze()
    cpu_start = 0.0
    pending: set[asyncio.Task[Any]] = set()
    for tick in range(first, first + ticks + 1):
        await asyncio.sleep(max(0.0, tick - time.time()))
        if tick == first + 1:
            cpu_start, runs = time.process_time(), []
        # Every job's winner decided the tick before (the warm-up tick knows no cursor).
        cursor = None if tick == first else tick - 1
        # A tick's wake-ups overlap the next tick's when they run late, as a node's do.
        task = asyncio.ensure_future(
            asyncio.gather(
                *(
                    _node(client, keys, shas, node, nodes, names, tick, runs, cursor, answers)
                    for node in range(nodes)
                )
            )
        )
        pending.add(task)
        task.add_done_callback(pending.discard)
    await asyncio.gather(*pending)
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
        "not_run_answers": dict(answers),
    }


def floor_cell(
    url: str, namespace: str, nodes: int, jobs: int, ticks: int, loop: str
) -> dict[str, Any]:
    """Run the floor for N x J over ``ticks`` measured ticks (after one warm-up tick), in a
    process of its own."""
    config = {
        "url": url,
        "namespace": namespace,
        "nodes": nodes,
        "jobs": jobs,
        "ticks": ticks,
        "loop": loop,
    }
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.floor", json.dumps(config)],
        capture_output=True,
        text=True,
        check=False,
        timeout=ticks + 60,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the floor failed: {done.stderr.strip()[-400:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    config = json.loads(sys.argv[1])
    coroutine = _floor(
        config["url"], config["namespace"], config["nodes"], config["jobs"], config["ticks"]
    )
    if config["loop"] == "uvloop":
        import uvloop

        result = uvloop.run(coroutine)
    else:
        result = asyncio.run(coroutine)
    sys.stdout.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
