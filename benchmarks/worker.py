"""One fleet process: many simulated cronrace agents, each a real :class:`~cronrace.Agent`.

Run by :mod:`benchmarks.fleet` as ``python -m benchmarks.worker CONFIG_JSON``. It talks
JSON lines: it prints ``{"ev": "ready"}`` once every agent has connected and seeded its
schedule, then ``{"ev": "tick", ...}`` every second (the progress display and the
saturation check read them). On stdin it takes ``{"cmd": "window", "t0": T0, "t1": T1}``
(snapshot CPU and counters at ``T0 - 0.5`` and ``T1 - 0.5`` wall time, so the window holds
ticks ``T0 .. T1-1``) and ``{"cmd": "stop"}``. On stop it writes its result as JSON to
``config["result_path"]`` and prints ``{"ev": "done"}``.

Every agent gets the same ``jobs`` jobs (one-second, or the cell's ``schedule``), built
once per process and shared by its agents (frozen definitions); each handler appends
``(job, tick, node, start wall time)`` to this process's run log, from which the harness
counts duplicates, misses and the fire lag.
"""

from __future__ import annotations

import cProfile
import gc
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import orjson

from benchmarks.instrument import COUNTERS, count_claims, instrument
from cronrace import Agent, RunContext
from cronrace.model.job import Job
from cronrace.runtime.logs import configure_logging
from cronrace.settings import AgentSettings

#: (job index, tick, node index, handler start wall time) for every handler call.
RUN_LOG: list[tuple[int, int, int, float]] = []
JOB_PREFIX = "j"


def job_name(index: int) -> str:
    return f"{JOB_PREFIX}{index:04d}"


def emit(event: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def node_index_of(node_id: str) -> int:
    return int(node_id[1:])


async def log_run(ctx: RunContext) -> None:
    """Every job's handler: which node ran which tick, and when it started."""
    RUN_LOG.append(
        (int(ctx.job[len(JOB_PREFIX) :]), ctx.tick_s, node_index_of(ctx.node_id), time.time())
    )


#: The jobs of this process's agents, built once: a Job is a frozen definition (its parsed
#: schedule included), so the agents of one process share them as they share the parse
#: cache. A node of 10,000 jobs holds ~3.5 MB of them (its Job and Schedule objects); the
#: cells' memory per node leaves them out, and node_startup.py measures a node whole.
_SHARED_JOBS: dict[tuple[int, str, str], list[Job]] = {}


def shared_jobs(config: dict[str, Any]) -> list[Job]:
    key = (int(config["jobs"]), str(config["schedule"]), str(config.get("catchup", "latest")))
    jobs = _SHARED_JOBS.get(key)
    if jobs is None:
        jobs = _SHARED_JOBS[key] = [
            Job.define(log_run, key[1], name=job_name(index), catchup=key[2])
            for index in range(key[0])
        ]
    return jobs


def build_agent(config: dict[str, Any], node_index: int) -> Agent:
    settings = AgentSettings(
        store_url=config.get("store_url", config["redis_url"]),
        node_id=f"n{node_index:03d}",
        namespace=config["namespace"],
        shutdown_grace_s=5.0,
        startup_timeout_s=float(config.get("startup_timeout_s", 60.0)),
        racers=str(config.get("racers", "all")),
        racer_groups=str(config.get("racer_groups", "jobs")),
        heartbeat_s=float(config.get("heartbeat_s", 2.0)),
    )
    agent = Agent(settings=settings)
    # What add_job does, with this process's shared definitions (add_job builds its own).
    agent._jobs.update((job.name, job) for job in shared_jobs(config))
    if config.get("bare"):
        count_claims(agent.store)  # the floor's cells: no counting connection
    else:
        instrument(agent.store)
    return agent


def build_agents(config: dict[str, Any]) -> list[Agent]:
    return [build_agent(config, node_index) for node_index in config["nodes"]]


def _seeded(agent: Agent, jobs: int) -> bool:
    scheduler = agent.scheduler
    if not agent.ready or scheduler is None:
        return False
    seeded = getattr(scheduler, "seeded", None)  # a scheduler that plans only what it races
    return bool(seeded) if seeded is not None else len(scheduler.next_tick) == jobs


def beat_counts(agents: list[Agent]) -> dict[str, int]:
    """The agents' heartbeats so far: late ones, those that logged their node as joined
    again, full reads of the members, reads of the changes, and reads of changes that fell
    back to a full one."""
    beats = [agent.heartbeat for agent in agents]
    names = {
        "late": "late_beats",
        "rejoins": "rejoins",
        "full_reads": "full_reads",
        "change_reads": "change_reads",
        "forced": "full_reads_forced",
        "gaps": "gaps",
    }
    # getattr: an older checkout (a before/after pair) counts fewer of them.
    return {key: sum(getattr(b, name, 0) for b in beats) for key, name in names.items()}


def rss_mb() -> float:
    """This process's resident memory, MB (Linux: /proc/self/statm)."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 1e6


async def _sleep_until(wall_s: float) -> None:
    await anyio.sleep(max(0.0, wall_s - time.time()))


class Worker:
    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.rss_base_mb = rss_mb()
        self.agents = build_agents(config)
        self.window: tuple[int, int] | None = None
        self.window_set = anyio.Event()
        self.marks: dict[str, dict[str, Any]] = {}
        self.stop_event = anyio.Event()
        self.profiler = cProfile.Profile() if config.get("profile_path") else None
        self.churned = 0
        self.finished: dict[int, anyio.Event] = {}
        #: The event loop's longest stalls (ms): before the window (start-up, joins) and
        #: within it; a stall delays every agent of this process alike.
        self.stall_ms = {"startup": 0.0, "window": 0.0}
        self.in_window = False
        self.stall_scope: anyio.CancelScope | None = None

    def mark(self, name: str) -> None:
        self.marks[name] = {
            "wall": time.time(),
            "cpu": time.process_time(),
            "rss_mb": rss_mb(),
            **COUNTERS.snapshot(),
            "beats": beat_counts(self.agents),
        }

    async def commands(self) -> None:
        while True:
            line = await anyio.to_thread.run_sync(sys.stdin.readline, abandon_on_cancel=True)
            if not line:
                self.stop_event.set()
                return
            command = json.loads(line)
            if command["cmd"] == "window":
                self.window = (int(command["t0"]), int(command["t1"]))
                self.window_set.set()
            elif command["cmd"] == "stop":
                self.stop_event.set()
                return

    async def measure(self) -> None:
        await self.window_set.wait()
        assert self.window is not None
        t0, t1 = self.window
        await _sleep_until(t0 - 0.5)
        self.in_window = True
        self.mark("start")
        if self.profiler is not None:
            self.profiler.enable()
        await _sleep_until(t1 - 0.5)
        if self.profiler is not None:
            self.profiler.disable()
        self.mark("end")

    async def report_ticks(self) -> None:
        """Every second (mid-tick) tell how the tick just past went."""
        expected = len(self.agents) * self.config["jobs"]
        last_wall, last_cpu = time.time(), time.process_time()
        next_report = math.floor(last_wall) + 1.5
        while True:
            await _sleep_until(next_report)
            wall, cpu = time.time(), time.process_time()
            tick = int(next_report - 0.5) - 1
            lags = [lag for t, lag in COUNTERS.wake_lags[-4 * len(self.agents) :] if t == tick]
            emit(
                {
                    "ev": "tick",
                    "tick": tick,
                    "claims": COUNTERS.claims_by_tick.get(tick, 0),
                    "expected": expected,
                    "wake_lag_max_ms": round(max(lags) * 1000, 2) if lags else None,
                    "cpu": round((cpu - last_cpu) / max(wall - last_wall, 1e-6), 3),
                    "runs": len(RUN_LOG),
                }
            )
            last_wall, last_cpu = wall, cpu
            next_report = max(next_report + 1, math.floor(time.time()) + 0.5)

    async def report_start(self) -> None:
        """Until ready, every 5 s: how many agents are seeded and the CPU spent so far (a
        start-up the harness gives up on still says how far it got, and at what cost)."""
        while True:
            await anyio.sleep(5.0)
            seeded = sum(_seeded(agent, self.config["jobs"]) for agent in self.agents)
            emit(
                {
                    "ev": "starting",
                    "seeded": seeded,
                    "cpu_s": round(time.process_time(), 3),
                    "stall_ms": round(self.stall_ms["startup"], 1),
                    "rss_mb": round(rss_mb() - self.rss_base_mb, 1),
                }
            )

    async def churn(self, tg: Any, every_s: float) -> None:
        """Stop one agent (gracefully) and start it again, in turn, every ``every_s``."""
        turn = 0
        while True:
            await anyio.sleep(every_s)
            index = turn % len(self.agents)
            turn += 1
            self.agents[index].stop()
            await self.finished[index].wait()
            await anyio.sleep(every_s / 2)  # gone for a while: the others see it leave
            self.agents[index] = build_agent(self.config, self.config["nodes"][index])
            self.churned += 1
            tg.start_soon(self._run_agent, index, name=f"agent {index} again")

    async def watch_stalls(self) -> None:
        """Sleep 10 ms again and again: what the loop overshoots by is its stall."""
        self.stall_scope = anyio.CancelScope()
        with self.stall_scope:  # cancelled once the agents are told to stop
            while True:
                started = time.perf_counter()
                await anyio.sleep(0.01)
                stall_ms = (time.perf_counter() - started - 0.01) * 1000
                key = "window" if self.in_window else "startup"
                self.stall_ms[key] = max(self.stall_ms[key], stall_ms)

    async def replace(self, tg: Any, share: float) -> None:
        """``replace_after_s`` into the window, stop a share of the agents at once and start
        as many new ones (new node ids): the members change by that share in one heartbeat."""
        await self.window_set.wait()
        assert self.window is not None
        await _sleep_until(self.window[0] + float(self.config["replace_after_s"]))
        count = max(1, round(len(self.agents) * share))
        for index in range(count):
            self.agents[index].stop()
        for index in range(count):
            await self.finished[index].wait()
        for index in range(count):
            node = self.config["nodes"][index] + 100_000
            self.agents[index] = build_agent(self.config, node)
            self.churned += 1
            tg.start_soon(self._run_agent, index, name=f"agent {node}")

    async def _run_agent(self, index: int) -> None:
        self.finished[index] = anyio.Event()
        try:
            await self.agents[index].run()
        finally:
            self.finished[index].set()

    async def main(self) -> None:
        async with anyio.create_task_group() as tg:
            if not self.config.get("bare"):  # 100 wake-ups a second: not in the floor's cells
                tg.start_soon(self.watch_stalls)
            spread_s = float(self.config.get("start_spread_s", 0.0))
            progress = anyio.CancelScope()

            async def report_start() -> None:
                with progress:
                    await self.report_start()

            tg.start_soon(report_start)
            joins_from = time.time()
            for index, agent in enumerate(self.agents):
                if spread_s:  # nodes joining one by one over spread_s, by the wall clock:
                    # a busy loop's late wake-ups must not stretch the minute (each sleep
                    # relative to the last one did: 490 of 1,000 had joined after 300 s)
                    await _sleep_until(joins_from + (index + 1) * spread_s / len(self.agents))
                tg.start_soon(self._run_agent, index, name=f"agent {agent.node_id}")
            tg.start_soon(self.commands)
            started = time.monotonic()
            while not all(_seeded(agent, self.config["jobs"]) for agent in self.agents):
                if self.stop_event.is_set():
                    break
                await anyio.sleep(0.05)
            progress.cancel()
            # A node's process freezes what its start-up left once it is ready
            # (Agent.run_sync, which these agents, run side by side, do not go through).
            gc.freeze()
            emit(
                {
                    "ev": "ready",
                    "beats": beat_counts(self.agents),
                    "startup_s": round(time.monotonic() - started, 3),
                    "startup_cpu_s": round(time.process_time(), 3),
                    "startup_rss_mb": round(rss_mb() - self.rss_base_mb, 1),
                }
            )
            async with anyio.create_task_group() as watchers:
                watchers.start_soon(self.measure)
                watchers.start_soon(self.report_ticks)
                if self.config.get("replace_share"):
                    watchers.start_soon(self.replace, tg, float(self.config["replace_share"]))
                if self.config.get("churn_every_s"):
                    watchers.start_soon(self.churn, tg, float(self.config["churn_every_s"]))
                await self.stop_event.wait()
                watchers.cancel_scope.cancel()
            if self.stall_scope is not None:
                self.stall_scope.cancel()
            for agent in self.agents:
                agent.stop()
        self.write_result()
        emit({"ev": "done"})

    def write_result(self) -> None:
        if self.profiler is not None:
            self.profiler.dump_stats(self.config["profile_path"])
        result = {
            "nodes": len(self.agents),
            "marks": self.marks,
            "run_log": RUN_LOG,
            "wake_lags": COUNTERS.wake_lags,
            "claim_rtts": COUNTERS.claim_rtts,
            "decide_rtts": COUNTERS.decide_rtts,
            "claims_by_tick": {str(t): n for t, n in COUNTERS.claims_by_tick.items()},
            "final": COUNTERS.snapshot(),
            "loop": self.config.get("loop", "asyncio"),
            "churned": self.churned,
            **(
                {}
                if self.config.get("bare")
                else {"loop_stall_ms": {k: round(v, 1) for k, v in self.stall_ms.items()}}
            ),
            "rss_base_mb": self.rss_base_mb,
            "rss_end_mb": self.marks.get("end", {}).get("rss_mb", rss_mb()),
        }
        Path(self.config["result_path"]).write_bytes(orjson.dumps(result))


def main() -> None:
    config = json.loads(sys.argv[1])
    # cronrace's own text lines, with their fields (job, tick, node, fence): a duplicate or
    # a lost tick in a cell names the decisions around it.
    configure_logging("text", "WARNING")
    worker = Worker(config)
    use_uvloop = config.get("loop") == "uvloop"
    anyio.run(worker.main, backend="asyncio", backend_options={"use_uvloop": use_uvloop})


if __name__ == "__main__":
    main()
