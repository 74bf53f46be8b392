"""Each node's work against N, on a fake clock: CPU seconds per simulated node-second.

``python -m benchmarks.work --nodes 10,20,50,100,200 --jobs 1000 --racers 2`` runs N real
:class:`~cronrace.Agent` (their tick loops, heartbeats, membership views, heaps and claims)
in one process, on one :class:`~cronrace.testing.FakeClock`, against one embedded store,
and steps the clock through ``--seconds`` of one-second ticks. No wall-clock deadline
binds it: a busy machine makes the run slower, not the figures different, so it measures
what the code costs rather than what a shared machine could give it (the real-Redis
benchmarks, benchmarks/scale.py, measure that). The process's CPU over the stepped
seconds, less what the embedded store spent executing commands (a Redis server's share,
measured apart), is the whole fleet's work; each node's is that over N.

It imports ``cronrace`` from wherever ``PYTHONPATH`` points, so the same file measures an
older checkout for a before/after pair. Prints one JSON line per N.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from typing import Any

import anyio

from cronrace import RunContext
from cronrace.testing import FakeClock, memory_agent

START_S = 1_700_000_000
#: CPU seconds the embedded store spent executing commands (scripts included): what a
#: Redis server would spend, not the nodes. Counted apart so that the nodes' own work is
#: the process's CPU less this.
STORE_CPU_S = [0.0]


def _count_store_cpu() -> None:
    from fakeredis._socket import _base

    run = _base.BaseFakeSocket._process_command

    def timed(self: Any, fields: list[bytes]) -> None:
        started = time.process_time()
        try:
            run(self, fields)
        finally:
            STORE_CPU_S[0] += time.process_time() - started

    _base.BaseFakeSocket._process_command = timed  # type: ignore[method-assign]


async def one_cell(
    nodes: int, jobs: int, racers: str, seconds: int, warmup_s: int
) -> dict[str, Any]:
    clock = FakeClock(start_s=START_S)
    runs: Counter[tuple[str, int]] = Counter()
    url = f"memory://work-{nodes}x{jobs}-{racers}-{time.monotonic_ns()}"
    agents = []
    for index in range(nodes):
        agent = memory_agent(
            clock, redis_url=url, node_id=f"n{index:04d}", racers=racers, heartbeat_s=2.0
        )

        async def handler(ctx: RunContext) -> None:
            runs[(ctx.job, ctx.tick_s)] += 1

        for job in range(jobs):
            agent.add_job(handler, "@every 1s", name=f"j{job:05d}")
        agents.append(agent)
    async with anyio.create_task_group() as tg:
        for agent in agents:
            await tg.start(agent.run)
        await clock.advance(warmup_s)  # every node has read the others and their jobs
        first = int(clock.time()) + 1
        heaps = [len(agent.scheduler.next_tick) for agent in agents if agent.scheduler]
        cpu0, wall0, store0 = time.process_time(), time.perf_counter(), STORE_CPU_S[0]
        await clock.advance(seconds)
        cpu_s, wall_s = time.process_time() - cpu0, time.perf_counter() - wall0
        store_s = STORE_CPU_S[0] - store0
        cpu_s -= store_s
        for agent in agents:
            agent.stop()
        await clock.advance(5)
    window = range(first, first + seconds - 1)
    dup = sum(n - 1 for (_j, t), n in runs.items() if n > 1 and t in window)
    missed = sum(1 for j in range(jobs) for t in window if not runs[(f"j{j:05d}", t)])
    return {
        "nodes": nodes,
        "jobs": jobs,
        "racers": racers,
        "simulated_s": seconds,
        "fleet_cpu_s_per_s": round(cpu_s / seconds, 4),
        "store_cpu_s_per_s": round(store_s / seconds, 4),
        "node_cpu_ms_per_s": round(cpu_s / seconds / nodes * 1000, 3),
        "heap_jobs_per_node_mean": round(sum(heaps) / max(1, len(heaps)), 1),
        "wall_s": round(wall_s, 2),
        "duplicates": dup,
        "missed": missed,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.work", description=__doc__)
    parser.add_argument("--nodes", default="10,20,50,100,200")
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--racers", default="2")
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--warmup-s", type=int, default=6)
    parser.add_argument("--tag", default="")
    args = parser.parse_args(argv)
    import cronrace

    _count_store_cpu()
    for nodes in (int(n) for n in args.nodes.split(",")):
        row = anyio.run(one_cell, nodes, args.jobs, args.racers, args.seconds, args.warmup_s)
        row["tag"] = args.tag
        row["cronrace"] = cronrace.__file__
        sys.stdout.write(json.dumps(row) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
