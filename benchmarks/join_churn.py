"""A large fleet's start-up and churn on a fake clock: each node's own loop time.

``python -m benchmarks.join_churn --nodes 1000 --jobs 100 --racers 2`` starts N real
:class:`~cronrace.Agent` one after another over ``--join-s`` (a minute) of simulated
time, lets the fleet settle, then replaces ``--replace`` of them at once (that many stop,
leaving the live set as a deploy's nodes do, and as many new ones start in the same
instant; ``--kill`` makes the old ones vanish without leaving, as a crash does), and runs
on. Every node runs every job's handler, which records who ran which tick and when.

What a real node's event loop would stall for is measured per node: each step of each of
its tasks (one callback of the event loop: a task run from one ``await`` to the next) is
timed in CPU seconds and charged to the node whose task it is (a context variable set when
the node was started and inherited by every task it starts), less what the embedded store
spent inside the step (a Redis server's share). The longest step of a node is a lower
bound of its longest stall; the most CPU it spent in one instant of the fake clock (every
step it took before the clock moved on: its round trips to the embedded store take no
time) is an upper bound. Real-Redis fleets on this 2-core machine cannot drive 1,000
nodes (benchmarks/scale.py: a process simulating 100 nodes stalls for all of them); the
fake clock measures what each node costs itself, however slow the run.

Each row also counts duplicate runs (a tick run more than once, anywhere in the run) and
missed ticks (a tick with no run, from ``--warmup-s`` after the first node started to the
end), and the latest fire (handler start less the tick) per phase. Prints one JSON line
per cell; ``--out`` appends it to a file too.
"""

from __future__ import annotations

import argparse
import asyncio
import heapq
import json
import math
import statistics
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from contextvars import ContextVar
from pathlib import Path
from typing import Any

import anyio

from benchmarks.work import (
    CLOCK_CPU_S,
    FULL_GC,
    START_S,
    STORE_CPU_S,
    _count_clock_cpu,
    _count_full_gc,
    _count_store_cpu,
    _wake_only_stream_readers,
)
from cronrace import RunContext
from cronrace.model.job import Job
from cronrace.stores.values import Claim
from cronrace.testing import FakeClock, memory_agent

#: The node whose task runs (inherited by every task a node's run starts).
NODE: ContextVar[int | None] = ContextVar("bench_node", default=None)
PHASES = ("joining", "settled", "replacing", "after")
#: How many of the run's longest steps the row names (with the callback that ran).
TOP_STEPS = 8


class Steps:
    """Each node's steps: CPU by phase, its longest step, its most CPU in one instant."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.phase = PHASES[0]
        self.cpu: dict[str, defaultdict[int, float]] = {p: defaultdict(float) for p in PHASES}
        self.longest: dict[str, defaultdict[int, float]] = {p: defaultdict(float) for p in PHASES}
        self.instant: dict[str, defaultdict[int, float]] = {p: defaultdict(float) for p in PHASES}
        self._now: dict[int, tuple[float, float]] = {}
        #: The longest steps of the run: (CPU s, node, phase, what ran).
        self.top: list[tuple[float, int, str, str]] = []

    def add(self, node: int, cpu_s: float, what: Any) -> None:
        phase = self.phase
        if phase not in self.cpu:
            return
        if len(self.top) < TOP_STEPS or cpu_s > self.top[0][0]:
            entry = (cpu_s, node, phase, _what_ran(what))
            if len(self.top) < TOP_STEPS:
                heapq.heappush(self.top, entry)
            else:
                heapq.heapreplace(self.top, entry)
        self.cpu[phase][node] += cpu_s
        if cpu_s > self.longest[phase][node]:
            self.longest[phase][node] = cpu_s
        now = self.clock.monotonic()
        at, total = self._now.get(node, (math.nan, 0.0))
        total = total + cpu_s if at == now else cpu_s
        self._now[node] = (now, total)
        if total > self.instant[phase][node]:
            self.instant[phase][node] = total


def _what_ran(handle: Any) -> str:
    """The coroutine a task's step ran (else the callback), for the longest steps."""
    task = getattr(getattr(handle, "_callback", None), "__self__", None)
    if isinstance(task, asyncio.Task):
        coro = task.get_coro()
        frames = []
        while coro is not None and len(frames) < 6:
            frames.append(getattr(coro, "__qualname__", type(coro).__name__))
            coro = getattr(coro, "cr_await", None)
        return " > ".join(frames)
    return repr(handle)[:160]


def _time_steps(steps: Steps) -> None:
    """Charge every event-loop callback that runs in a node's context to that node."""
    run = asyncio.events.Handle._run

    def timed(self: asyncio.events.Handle) -> None:
        context = self._context  # type: ignore[attr-defined]
        node = context.get(NODE) if context is not None else None
        if node is None:
            run(self)
            return
        started, store, full_gc = time.thread_time(), STORE_CPU_S[0], FULL_GC[0]
        try:
            run(self)
        finally:
            spent = time.thread_time() - started
            # Less the embedded store's share (a Redis server's) and the process's full
            # collections, which walk every simulated node's heap (benchmarks/work.py).
            steps.add(node, spent - (STORE_CPU_S[0] - store) - (FULL_GC[0] - full_gc), self)

    asyncio.events.Handle._run = timed  # type: ignore[method-assign]


def count_claims(store: Any, claims: Counter[tuple[str, int]]) -> None:
    """Count the claims ``store`` sends for each scheduled (job, tick)."""
    method = store.claim_each

    async def claim_each(batch: Sequence[Claim], *args: Any, **kwargs: Any) -> Any:
        for item in batch:
            if item.trigger_id is None:
                claims[(item.job, item.tick_s)] += 1
        return await method(batch, *args, **kwargs)

    store.claim_each = claim_each


def _summary(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    ordered = sorted(values)
    return {
        "p50_ms": round(statistics.median(ordered) * 1000, 2),
        "p99_ms": round(ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] * 1000, 2),
        "max_ms": round(ordered[-1] * 1000, 2),
    }


async def one_cell(args: argparse.Namespace) -> dict[str, Any]:
    clock = FakeClock(start_s=START_S)
    steps = Steps(clock)
    _time_steps(steps)
    runs: Counter[tuple[str, int]] = Counter()
    claims: Counter[tuple[str, int]] = Counter()  # claims sent for each scheduled tick
    lag: dict[str, float] = dict.fromkeys(PHASES, 0.0)
    url = f"memory://churn-{args.nodes}x{args.jobs}-{time.monotonic_ns()}"
    jobs: list[Job] = []  # defined once below: every node's jobs, shared as in worker.py

    async def handler(ctx: RunContext) -> None:
        runs[(ctx.job, ctx.tick_s)] += 1
        late = clock.time() - ctx.tick_s
        if late > lag[steps.phase]:
            lag[steps.phase] = late

    def agent_of(index: int) -> Any:
        agent = memory_agent(
            clock,
            store_url=url,
            node_id=f"n{index:05d}",
            racers=args.racers,
            heartbeat_s=args.heartbeat_s,
            redis_timeout_s=60.0,
        )
        count_claims(agent.store, claims)
        # What add_job does, with this process's shared definitions (frozen values).
        agent._jobs.update((job.name, job) for job in jobs)
        return agent

    jobs.extend(Job.define(handler, args.schedule, name=f"j{j:05d}") for j in range(args.jobs))
    agents: dict[int, Any] = {}
    scopes: dict[int, anyio.CancelScope] = {}
    progress = {"started": 0}

    async def run_node(index: int, *, task_status: Any) -> None:
        with anyio.CancelScope() as scope:
            scopes[index] = scope
            await agents[index].run(task_status=task_status)

    async def start(tg: Any, index: int) -> None:
        agents[index] = agent_of(index)
        token = NODE.set(index)
        try:
            await tg.start(run_node, index)
        finally:
            NODE.reset(token)
        progress["started"] += 1

    def status(text: str) -> None:
        sys.stderr.write(f"\r{text[:100]:<100}")
        sys.stderr.flush()

    async def run_phase(phase: str, seconds: int) -> None:
        steps.phase = phase
        for second in range(seconds):
            await clock.advance(1)
            status(f"{phase}: {second + 1}/{seconds} s, wall {time.perf_counter() - wall0:.0f} s")

    wall0 = time.perf_counter()
    cpu0, store0, clock0, gc0 = time.process_time(), STORE_CPU_S[0], CLOCK_CPU_S[0], FULL_GC[0]
    async with anyio.create_task_group() as tg:
        gap_s = args.join_s / args.nodes
        # Start the nodes one after another over join_s: each at its own instant.
        for index in range(args.nodes):
            target = index * gap_s
            if target > clock.monotonic():
                await clock.advance(target - clock.monotonic())
            await start(tg, index)
            if index % 50 == 0:
                status(
                    f"joining: {index + 1}/{args.nodes} nodes, simulated "
                    f"{clock.monotonic():.1f} s, wall "
                    f"{time.perf_counter() - wall0:.0f} s"
                )
        await clock.advance(args.join_s - clock.monotonic())
        await run_phase("settled", args.settle_s)
        replace = round(args.replace * args.nodes)
        steps.phase = "replacing"
        replaced_at_s = clock.time()
        for index in list(agents)[:replace]:
            if args.kill:
                scopes[index].cancel()  # gone without a word: a crash
            else:
                agents[index].stop()  # leaves the live set, as a deploy's old node does
        for index in range(args.nodes, args.nodes + replace):
            await start(tg, index)
        await run_phase("replacing", args.replace_s)
        await run_phase("after", args.after_s)
        end_s = clock.time()
        steps.phase = "stopping"  # the fleet's own shut-down: not measured
        for index, agent in agents.items():
            if index >= replace:
                agent.stop()
        await clock.advance(5)
        tg.cancel_scope.cancel()
    sys.stderr.write("\n")
    cpu_s = time.process_time() - cpu0 - (STORE_CPU_S[0] - store0) - (CLOCK_CPU_S[0] - clock0)
    cpu_s -= FULL_GC[0] - gc0
    first_s = START_S + args.warmup_s
    last_s = int(end_s) - 3
    expected = [
        (job.name, tick)
        for job in jobs
        for tick in job.schedule.ticks_between(int(first_s), last_s, 1 << 30)
    ]
    duplicates = sum(n - 1 for n in runs.values() if n > 1)
    missed = [(job, tick) for job, tick in expected if not runs[(job, tick)]]
    joined_end = START_S + args.join_s
    settled_end = joined_end + args.settle_s

    def phase_of(tick: int) -> str:
        if tick < joined_end:
            return "joining"
        if tick < settled_end:
            return "settled"
        return "replacing" if tick < replaced_at_s + args.replace_s else "after"

    missed_by_phase = Counter(phase_of(tick) for _job, tick in missed)
    expected_by_phase = Counter(phase_of(tick) for _job, tick in expected)
    claims_by_phase: Counter[str] = Counter()
    for job_tick in expected:
        claims_by_phase[phase_of(job_tick[1])] += claims[job_tick]
    phase_s = {
        "joining": args.join_s,
        "settled": args.settle_s,
        "replacing": args.replace_s,
        "after": args.after_s,
    }
    by_phase: dict[str, Any] = {}
    for phase in PHASES:
        cpu = steps.cpu[phase]
        by_phase[phase] = {
            "seconds": phase_s[phase],
            "nodes_seen": len(cpu),
            "node_cpu_ms_per_s": _summary([c / phase_s[phase] for c in cpu.values()]),
            "longest_step": _summary(list(steps.longest[phase].values())),
            "most_in_one_instant": _summary(list(steps.instant[phase].values())),
            "latest_fire_s": round(lag[phase], 3),
            "missed": missed_by_phase[phase],
            "ticks": expected_by_phase[phase],
            "claims_per_job_tick": round(
                claims_by_phase[phase] / max(1, expected_by_phase[phase]), 3
            ),
        }
    return {
        "nodes": args.nodes,
        "jobs": args.jobs,
        "racers": args.racers,
        "heartbeat_s": args.heartbeat_s,
        "join_s": args.join_s,
        "replaced": replace,
        "replace_how": "killed" if args.kill else "stopped",
        "phases": by_phase,
        "fleet_cpu_s": round(cpu_s, 2),
        "store_cpu_s": round(STORE_CPU_S[0] - store0, 2),
        "schedule": args.schedule,
        "ticks_checked": len(expected),
        "runs": sum(runs.values()),
        "duplicates": duplicates,
        "missed": len(missed),
        "missed_examples": missed[:5],
        "full_gc_s": round(FULL_GC[0] - gc0, 2),
        "longest_steps": [
            {"ms": round(cpu * 1000, 1), "node": node, "phase": phase, "callback": what}
            for cpu, node, phase, what in sorted(steps.top, reverse=True)
        ],
        "wall_s": round(time.perf_counter() - wall0, 1),
    }


def _label(row: dict[str, Any]) -> str:
    rings = "own rings" if row.get("own_rings") else "shared rings"
    jobs = f"{row['jobs']:,} {'minutely H' if row.get('schedule', '').startswith('H') else '1 s'}"
    return f"{row['nodes']:,} x {jobs}, {row['replace_how']}, {rings}"


def plot(rows_path: Path, out_path: Path) -> Path:
    """Each node's longest step and its CPU per second, by phase, one group of bars per
    row of ``rows_path`` (p50 solid, p99 lighter, max as a tick)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [json.loads(line) for line in rows_path.read_text().splitlines() if line.startswith("{")]
    fig, axes = plt.subplots(1, 2, figsize=(13, 5.4))
    width = 0.8 / max(1, len(rows))
    for ax, figure, title, unit in (
        (axes[0], "longest_step", "Each node's longest step (a lower bound of its stall)", "ms"),
        (axes[1], "node_cpu_ms_per_s", "Each node's CPU", "ms per second"),
    ):
        for i, row in enumerate(rows):
            xs = [p + (i - (len(rows) - 1) / 2) * width for p in range(len(PHASES))]
            got = [row["phases"][phase][figure] for phase in PHASES]
            bars = ax.bar(xs, [g["p99_ms"] for g in got], width, alpha=0.35)
            color = bars.patches[0].get_facecolor()
            ax.bar(xs, [g["p50_ms"] for g in got], width, color=color[:3], label=_label(row))
            ax.scatter(xs, [g["max_ms"] for g in got], marker="_", s=200, color=color[:3])
        ax.set_xticks(range(len(PHASES)), [f"{p}" for p in PHASES])
        ax.set_yscale("log")
        ax.set_ylabel(unit)
        ax.set_title(title, fontsize=10)
        ax.grid(True, axis="y", alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=2, fontsize=8)
    fig.suptitle(
        "A fleet's start-up and churn on the fake clock: p50 (solid), p99 (light), max (tick) "
        "over the nodes",
        fontsize=10,
    )
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    fig.savefig(out_path, dpi=110)
    plt.close(fig)
    return out_path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.join_churn", description=__doc__)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--racers", default="2")
    parser.add_argument(
        "--schedule",
        default="* * * * * *",
        help="every job's schedule: one-second by default; 'H * * * * *' for minutely jobs "
        "spread by H (the 1,000 x 10,000 cell)",
    )
    parser.add_argument("--heartbeat-s", type=float, default=2.0)
    parser.add_argument("--join-s", type=int, default=60, help="the nodes start over this")
    parser.add_argument("--settle-s", type=int, default=20)
    parser.add_argument("--replace", type=float, default=0.1, help="share replaced at once")
    parser.add_argument("--replace-s", type=int, default=20)
    parser.add_argument("--after-s", type=int, default=10)
    parser.add_argument("--warmup-s", type=int, default=3)
    parser.add_argument("--kill", action="store_true", help="the replaced nodes crash")
    parser.add_argument(
        "--own-rings",
        action="store_true",
        help="each node builds and splices its own rings, as a real node does (by default "
        "the agents of this process share rings of the same members, membership.py)",
    )
    parser.add_argument("--tag", default="")
    parser.add_argument("--out", type=Path, help="append the row to this JSON-lines file")
    parser.add_argument(
        "--plot", nargs=2, type=Path, metavar=("ROWS_JSONL", "PNG"), help="only draw the rows"
    )
    args = parser.parse_args(argv)
    if args.plot:
        sys.stdout.write(f"wrote {plot(*args.plot)}\n")
        return 0
    import cronrace

    if args.own_rings:
        from cronrace.fleet import rings

        rings._SHARED = False
    _count_store_cpu()
    _count_clock_cpu()
    _count_full_gc()
    _wake_only_stream_readers()
    row = anyio.run(one_cell, args)
    row["tag"] = args.tag
    row["own_rings"] = args.own_rings
    row["cronrace"] = cronrace.__file__
    row["loadavg"] = Path("/proc/loadavg").read_text().split()[:3]
    line = json.dumps(row)
    sys.stdout.write(line + "\n")
    if args.out:
        with args.out.open("a") as out:
            out.write(line + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
