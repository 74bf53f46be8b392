"""A node of many jobs starting: CPU to ready and memory, per agent, in one process.

``python -m benchmarks.node_startup --agents 10 --jobs 10000`` starts a private
redis-server and, in this process, ``--agents`` agents (``racers = 2``) of ``--jobs``
minutely jobs spread by ``H`` (``H * * * * *``), as a fleet process of
``benchmarks.scale cells`` builds them. It reports, per agent:

- the CPU to build it (``add_job`` for every job) and to start it (connect, heartbeat,
  publish the jobs and the fleet details, read the cursors, place the jobs) until its
  scheduler is seeded: the first agent alone (the namespace empty: it writes what it
  publishes), then the others together (what the first one stored is there already);
- memory (``tracemalloc``, Python allocations): the first agent alone, which holds
  everything a real node holds (its Job objects with their parsed schedules, their
  digests, the process-wide caches it fills), and the others' mean, which leaves out what
  agents of one process share: the job definitions (frozen ``Job`` objects, built once per
  process as ``benchmarks.worker`` does; ``--own-jobs``: each agent builds its own), their
  digests and the caches of parsed schedules and next ticks (pure values of their inputs,
  bounded per process). Resident memory (RSS) grown, the same two ways, is reported
  beside it: it holds what the allocator kept of each start's peak too.

A second round (``--rounds 2``) starts new agents in the same namespace, as nodes
restarting with unchanged definitions do. It imports ``cronrace`` from wherever
``PYTHONPATH`` points, so the same file measures an older checkout.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

import anyio

from benchmarks.server import BenchServer
from benchmarks.worker import build_agent, job_name, log_run, rss_mb
from cronrace import Agent
from cronrace.fleet.heartbeat import heartbeat_ttl_ms
from cronrace.stores.values import FleetRequest

SCHEDULE = "H * * * * *"
HEARTBEAT_S = 2.0
#: With ``--members``: every node's heartbeat, long enough that the members made once
#: stay live while the agents start (each node judges silence by it).
MEMBERS_HEARTBEAT_S = 60.0
#: ``--profile``: cProfile of the agents joining the members (the second ones).
PROFILE: cProfile.Profile | None = None
#: Each agent builds its own job definitions (as before the fleet processes shared them).
OWN_JOBS = False


def _build(url: str, namespace: str, node: int, jobs: int) -> Agent:
    """An agent as a fleet process builds it (benchmarks.worker): the job definitions
    built by the first agent and shared by the others (``--own-jobs``: each its own)."""
    config = {"redis_url": url, "namespace": namespace, "racers": "2", "heartbeat_s": HEARTBEAT_S}
    config.update(jobs=jobs, schedule=SCHEDULE, bare=True)
    if not OWN_JOBS:
        return build_agent(config, node)
    agent = build_agent({**config, "jobs": 0}, node)
    for index in range(jobs):
        agent.add_job(log_run, SCHEDULE, name=job_name(index))
    return agent


def _seeded(agent: Agent) -> bool:
    scheduler = agent.scheduler
    return bool(agent.ready and scheduler is not None and getattr(scheduler, "seeded", False))


def _traced_mb() -> float:
    gc.collect()
    return tracemalloc.get_traced_memory()[0] / 1e6 if tracemalloc.is_tracing() else 0.0


async def _start(tg: Any, agents: list[Agent]) -> None:
    for agent in agents:
        tg.start_soon(agent.run)
    # Polled: an agent says it is seeded through no event a benchmark can wait on.
    while not all(_seeded(agent) for agent in agents):  # noqa: ASYNC110
        await anyio.sleep(0.005)


async def _members(agent: Agent, count: int) -> float:
    """Make ``count`` more members beat once, each publishing what ``agent`` does (a fleet
    of identical nodes for the next agents to join); their entries outlive the run."""
    fleet = agent.lifecycle.fleet
    assert fleet is not None
    assert fleet._printed is not None
    details, fingerprint, _published = fleet._printed
    store = agent.store
    started = time.perf_counter()
    now_ms = int(time.time() * 1000)
    limiter = anyio.Semaphore(32)

    async def one(index: int) -> None:
        async with limiter:
            await store.heartbeat(
                f"m{index:04d}",
                now_ms=now_ms,
                ttl_ms=heartbeat_ttl_ms(MEMBERS_HEARTBEAT_S),
                epoch_candidate="0",
                prune=False,
                fleet=FleetRequest(fingerprint, details.to_json(), changed=True),
            )

    async with anyio.create_task_group() as tg:
        for index in range(count):
            tg.start_soon(one, index)
    return time.perf_counter() - started


async def _round(
    url: str, namespace: str, first: int, agents: int, jobs: int, members: int = 0
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    async with anyio.create_task_group() as tg:
        base_mb, base_rss = _traced_mb(), rss_mb()
        cpu = time.process_time()
        one = [_build(url, namespace, first, jobs)]
        out["build_cpu_s_first"] = round(time.process_time() - cpu, 3)
        cpu = time.process_time()
        await _start(tg, one)
        out["start_cpu_s_first"] = round(time.process_time() - cpu, 3)
        if members:  # the others join a fleet of this many (the first one's copies)
            out["members"] = members
            out["members_made_s"] = round(await _members(one[0], members - 1), 2)
            if PROFILE is not None:
                PROFILE.enable()
        first_mb = _traced_mb()
        out["memory_mb_first"] = round(first_mb - base_mb, 3)
        first_rss = rss_mb()
        out["rss_mb_first"] = round(first_rss - base_rss, 2)
        cpu = time.process_time()
        rest = [_build(url, namespace, first + i, jobs) for i in range(1, agents)]
        build_s = time.process_time() - cpu
        cpu = time.process_time()
        await _start(tg, rest)
        start_s = time.process_time() - cpu
        if PROFILE is not None:
            PROFILE.disable()
        others = max(1, agents - 1)
        out["build_cpu_s_others"] = round(build_s / others, 3)
        out["start_cpu_s_others"] = round(start_s / others, 3)
        out["memory_mb_others"] = round((_traced_mb() - first_mb) / others, 3)
        out["rss_mb_others"] = round((rss_mb() - first_rss) / others, 2)
        for agent in one + rest:
            agent.stop()
    return out


async def _main(args: argparse.Namespace) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="cronrace-startup-"))
    if args.memory:
        tracemalloc.start()  # doubles the CPU figures: memory and CPU are two runs
    with BenchServer(workdir / "redis") as server:
        rounds = []
        for index in range(args.rounds):
            row = await _round(
                server.url, "s", index * args.agents, args.agents, args.jobs, args.members
            )
            row["round"] = index + 1
            rounds.append(row)
            sys.stderr.write(json.dumps(row) + "\n")
        redis_mb = int(server.client().info("memory")["used_memory"]) / 1e6
    return {
        "agents": args.agents,
        "jobs": args.jobs,
        "tag": args.tag,
        "memory": args.memory,
        "own_jobs": args.own_jobs,
        "rounds": rounds,
        "redis_used_memory_mb": round(redis_mb, 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.node_startup", description=__doc__)
    parser.add_argument("--agents", type=int, default=10)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--tag", default="")
    parser.add_argument("--own-jobs", action="store_true", help="no definitions shared")
    parser.add_argument("--memory", action="store_true", help="tracemalloc (slows the CPU)")
    parser.add_argument("--out", type=Path, help="append the result as a JSON line here")
    parser.add_argument(
        "--members",
        type=int,
        default=0,
        help="the agents after the first join a fleet of this many live members, alike",
    )
    parser.add_argument("--profile", type=Path, help="cProfile of those agents' start, here")
    args = parser.parse_args(argv)
    global OWN_JOBS, HEARTBEAT_S, PROFILE
    OWN_JOBS = args.own_jobs
    if args.members:
        HEARTBEAT_S = MEMBERS_HEARTBEAT_S
    if args.profile:
        PROFILE = cProfile.Profile()
    result = anyio.run(_main, args)
    if PROFILE is not None:
        PROFILE.dump_stats(args.profile)
    result["loadavg"] = Path("/proc/loadavg").read_text().split()[:3]
    line = json.dumps(result)
    sys.stdout.write(line + "\n")
    if args.out is not None:
        with args.out.open("a") as handle:
            handle.write(line + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
