"""Each node's work against N, on a fake clock: CPU seconds per simulated node-second.

``python -m benchmarks.work --nodes 10,20,50,100,200 --jobs 1000 --racers 2`` runs N real
:class:`~cronrace.Agent` (their tick loops, heartbeats, membership views, heaps and claims)
in one process, on one :class:`~cronrace.testing.FakeClock`, against one embedded store,
and steps the clock through ``--seconds`` of one-second ticks. No wall-clock deadline
binds it: a busy machine makes the run slower, not the figures different, so it measures
what the code costs rather than what a shared machine could give it (the real-Redis
benchmarks, benchmarks/scale.py, measure that). The process's CPU over the stepped
seconds, less what the embedded store spent executing commands (a Redis server's share,
measured apart) and what the fake clock spent checking that every task waits (the
simulation's own bookkeeping, O(tasks) at each of its stops), is the whole fleet's work;
each node's is that over N. Each node's control reader blocks in real time
(``XREAD BLOCK``), so it is given a long block (``--redis-timeout-s``): a run that takes
20 s of wall time per simulated second would otherwise wake every reader 40 times per
simulated second instead of once every 4 s.

Two more parts of the process's CPU are counted apart (both in each row). The embedded
store's whole handling of what a node sends (parsing the protocol, executing, encoding the
replies: a Redis server's share) is the store's; until 2026-12-04 only the execution was
(``store_exec_cpu_s_per_s``, and ``node_cpu_ms_per_s_v1`` is the old figure). And the
process's full (oldest-generation) garbage collections: they come at the rate of the
whole fleet's allocations and each walks every simulated node's heap, so their cost per
node grows with N, where a real node's full collections come at its own allocation rate
and walk its own heap only (a full collection that starts inside the store's handling is
left out of the store's figure: subtracted once). The young collections, which follow the
allocations, stay in the figure of whatever allocated when they started: the nodes' (as
``young_gc_s_per_s``) or the store's (``store_young_gc_s_per_s``).

It imports ``cronrace`` from wherever ``PYTHONPATH`` points, so the same file measures an
older checkout for a before/after pair. Prints one JSON line per N.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import anyio

from cronrace import RunContext
from cronrace.testing import FakeClock, memory_agent

START_S = 1_700_000_000
#: CPU seconds the embedded store spent handling what the nodes sent: parsing the
#: protocol, executing commands (scripts included), encoding replies. What a Redis server
#: would spend, not the nodes: counted apart, so the nodes' own work is the process's CPU
#: less this.
STORE_CPU_S = [0.0]
#: Of it, executing commands alone (what this benchmark subtracted until 2026-12-04).
STORE_EXEC_CPU_S = [0.0]


def _count_store_cpu() -> None:
    from fakeredis._socket import _base

    run = _base.BaseFakeSocket._process_command
    receive = _base.BaseFakeSocket.sendall

    # A collection can start inside the store's handling (its allocations trigger most of
    # them). A full one is counted apart (FULL_GC, subtracted from the process's CPU once):
    # it is left out of the store's figure, or it was subtracted twice and the nodes'
    # figure fell by its length (until 2026-12-07 the N = 200 rows fell in two groups, by
    # whether a ~0.3 s full collection started in the store). A young one started there
    # stays the store's, as its allocations triggered it; it is tallied (STORE_YOUNG_GC) so
    # that the young collections reported are those in the nodes' figure.

    def timed(self: Any, fields: list[bytes]) -> None:
        started, full0 = time.process_time(), FULL_GC[0]
        try:
            run(self, fields)
        finally:
            STORE_EXEC_CPU_S[0] += time.process_time() - started - (FULL_GC[0] - full0)

    def handled(self: Any, data: Any) -> None:
        started, full0, young0 = time.process_time(), FULL_GC[0], YOUNG_GC[0]
        try:
            receive(self, data)
        finally:
            STORE_CPU_S[0] += time.process_time() - started - (FULL_GC[0] - full0)
            STORE_YOUNG_GC[0] += YOUNG_GC[0] - young0

    _base.BaseFakeSocket._process_command = timed  # type: ignore[method-assign]
    _base.BaseFakeSocket.sendall = handled  # type: ignore[method-assign]


#: CPU seconds of the process's full garbage collections (generation 2), and how many.
FULL_GC = [0.0, 0]
#: The same of its young collections (generations 0 and 1): counted in the figure of
#: whatever allocated when they started (they follow the allocations), and reported apart.
YOUNG_GC = [0.0, 0]
#: CPU seconds of the young collections that started inside the store's handling: in the
#: store's figure, not the nodes'.
STORE_YOUNG_GC = [0.0]


def _count_full_gc() -> None:
    """Time every full collection: a simulation's cost, O(N) each (module docstring), and
    every young one (the nodes' own)."""
    started = [0.0]

    def timed(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[0] = time.process_time()
            return
        tally = FULL_GC if info["generation"] == 2 else YOUNG_GC
        tally[0] += time.process_time() - started[0]
        tally[1] += 1

    gc.callbacks.append(timed)


#: CPU seconds the fake clock spent finding out whether every task waits (its settle step,
#: O(tasks) per stop, and stops grow with N): the simulation's bookkeeping, which real
#: nodes do not pay. Counted apart, as the store's is.
CLOCK_CPU_S = [0.0]


def _count_clock_cpu() -> None:
    """Time the synchronous part of each of the fake clock's settle turns."""
    import asyncio

    from cronrace import testing

    async def all_tasks_blocked() -> None:
        this = asyncio.current_task()
        loop = asyncio.get_running_loop()
        ready = getattr(loop, "_ready", None)
        quiet = 0
        for _ in range(testing.SETTLE_MAX_TURNS):
            await asyncio.sleep(0)
            started, full0 = time.process_time(), FULL_GC[0]
            tasks = asyncio.all_tasks()
            blocked = all(testing._waiting(t) for t in tasks if t is not this)
            CLOCK_CPU_S[0] += time.process_time() - started - (FULL_GC[0] - full0)
            if blocked and ready is not None and not ready:
                return
            quiet = quiet + 1 if blocked else 0
            if quiet >= testing.QUIET_TURNS:
                return

    testing._all_tasks_blocked = all_tasks_blocked  # type: ignore[assignment]


def _wake_only_stream_readers() -> None:
    """Make the embedded store wake blocked readers only when a stream key is written.

    fakeredis wakes every blocked client (each node's ``XREAD BLOCK`` of the control
    stream) on every write to any key, and each woken reader re-runs its ``XREAD`` on the
    event loop, which this benchmark would count as the nodes' CPU: N readers woken by
    every claim of the fleet, O(N) per write and O(N^2) in all. A Redis server wakes an
    ``XREAD`` only on an ``XADD`` to its stream. Here readers wake on writes to keys whose
    name ends in ``:control`` (the only stream the agents block on).
    """
    from fakeredis._core._database import Database

    def notify_watch(self: Any, key: bytes) -> None:
        for sock in self._watches.get(key, set()):
            sock.notify_watch()
        if key.endswith(b":control"):
            self.wake_all()

    Database.notify_watch = notify_watch  # type: ignore[method-assign]


async def one_cell(
    nodes: int,
    jobs: int,
    racers: str,
    seconds: int,
    warmup_s: int,
    redis_timeout_s: float = 60.0,
    groups: str = "jobs",
) -> dict[str, Any]:
    clock = FakeClock(start_s=START_S)
    runs: Counter[tuple[str, int]] = Counter()
    by_node: Counter[str] = Counter()
    url = f"memory://work-{nodes}x{jobs}-{racers}-{time.monotonic_ns()}"
    # Only when grouped: a checkout from before racer_groups (a "before" row) runs too.
    grouping = {} if groups == "jobs" else {"racer_groups": groups}
    counted_from = [2**62]  # runs per node: those of the measured seconds
    agents = []
    for index in range(nodes):
        agent = memory_agent(
            clock,
            store_url=url,
            node_id=f"n{index:04d}",
            racers=racers,
            heartbeat_s=2.0,
            redis_timeout_s=redis_timeout_s,
            **grouping,
        )

        async def handler(ctx: RunContext) -> None:
            runs[(ctx.job, ctx.tick_s)] += 1
            if ctx.tick_s >= counted_from[0]:
                by_node[ctx.node_id] += 1

        for job in range(jobs):
            agent.add_job(handler, "@every 1s", name=f"j{job:05d}")
        agents.append(agent)
    async with anyio.create_task_group() as tg:
        for agent in agents:
            await tg.start(agent.run)
        await clock.advance(warmup_s)  # every node has read the others and their jobs
        first = int(clock.time()) + 1
        counted_from[0] = first
        heaps = [len(agent.scheduler.next_tick) for agent in agents if agent.scheduler]
        cpu0, wall0, store0 = time.process_time(), time.perf_counter(), STORE_CPU_S[0]
        clock0, exec0, (gc0, full0) = CLOCK_CPU_S[0], STORE_EXEC_CPU_S[0], FULL_GC
        young0, youngs0, store_young0 = *YOUNG_GC, STORE_YOUNG_GC[0]
        await clock.advance(seconds)
        cpu_s, wall_s = time.process_time() - cpu0, time.perf_counter() - wall0
        store_s = STORE_CPU_S[0] - store0
        exec_s = STORE_EXEC_CPU_S[0] - exec0
        clock_s = CLOCK_CPU_S[0] - clock0
        gc_s, full_gcs = FULL_GC[0] - gc0, FULL_GC[1] - full0
        young_s, young_gcs = YOUNG_GC[0] - young0, YOUNG_GC[1] - youngs0
        store_young_s = STORE_YOUNG_GC[0] - store_young0
        cpu_v1_s = cpu_s - exec_s - clock_s
        cpu_s -= store_s + clock_s + gc_s
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
        "racer_groups": groups,
        "simulated_s": seconds,
        "fleet_cpu_s_per_s": round(cpu_s / seconds, 4),
        "store_cpu_s_per_s": round(store_s / seconds, 4),
        "store_exec_cpu_s_per_s": round(exec_s / seconds, 4),
        "clock_cpu_s_per_s": round(clock_s / seconds, 4),
        "full_gc_s_per_s": round(gc_s / seconds, 4),
        "full_gcs": full_gcs,
        # the young collections in the nodes' figure; those started in the store's apart
        "young_gc_s_per_s": round((young_s - store_young_s) / seconds, 4),
        "store_young_gc_s_per_s": round(store_young_s / seconds, 4),
        "young_gcs": young_gcs,
        "node_cpu_ms_per_s": round(cpu_s / seconds / nodes * 1000, 3),
        "node_cpu_ms_per_s_v1": round(cpu_v1_s / seconds / nodes * 1000, 3),
        # the spread of runs over the measured seconds (every node, those that ran none too)
        "runs_per_node_max_over_mean": round(
            max(by_node.values(), default=0) * nodes / max(1, sum(by_node.values())), 2
        ),
        "nodes_that_ran": len(by_node),
        "heap_jobs_per_node_mean": round(sum(heaps) / max(1, len(heaps)), 1),
        "wall_s": round(wall_s, 2),
        "duplicates": dup,
        "missed": missed,
    }


def medians(rows: list[dict[str, Any]]) -> dict[str, list[tuple[int, float, float, int]]]:
    """Per tag, per N: (N, median CPU per node in ms/s, median fleet cores, repeats)."""
    out: dict[str, list[tuple[int, float, float, int]]] = {}
    for tag in sorted({r["tag"] for r in rows}):
        for nodes in sorted({r["nodes"] for r in rows if r["tag"] == tag}):
            sel = [r for r in rows if r["tag"] == tag and r["nodes"] == nodes]
            per_node = statistics.median(r["node_cpu_ms_per_s"] for r in sel)
            fleet = statistics.median(r["fleet_cpu_s_per_s"] for r in sel)
            out.setdefault(tag, []).append((nodes, per_node, fleet, len(sel)))
    return out


def plot(rows_path: Path, out_path: Path, ideal: str | None = None) -> Path:
    """Each node's CPU and the fleet's against N, one line per tag (before, after): the
    medians of the repeats of each cell; 1/N (and a flat total) from the first point of
    the tag ``ideal``, or else of the first that starts with ``after`` (or of the last)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [json.loads(line) for line in rows_path.read_text().splitlines() if line.startswith("{")]
    fig, (per_node, fleet) = plt.subplots(1, 2, figsize=(11, 4.5))
    by_tag = medians(rows)
    afters = [tag for tag in by_tag if tag.startswith("after")]
    ideal_tag = ideal or (afters[0] if afters else max(by_tag, default=""))
    for tag, sel in by_tag.items():
        xs = [n for n, *_ in sel]
        per_node.plot(xs, [ms for _n, ms, _c, _r in sel], "o-", label=tag)
        fleet.plot(xs, [cores for _n, _ms, cores, _r in sel], "o-", label=tag)
        if tag == ideal_tag and sel:
            falling = [sel[0][1] * sel[0][0] / n for n in xs]
            per_node.plot(xs, falling, "k:", label=f"1/N from {tag}'s first point")
            fleet.plot(xs, [sel[0][2]] * len(xs), "k:", label=f"flat from {tag}'s first point")
    jobs = rows[0]["jobs"] if rows else 0
    for ax, title, label in (
        (per_node, f"Each node's CPU ({jobs} one-second jobs, k = 2)", "ms per second"),
        (fleet, "The fleet's CPU (the store's left out)", "cores"),
    ):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("nodes N")
        ax.set_ylabel(label)
        ax.set_title(title)
        ax.legend(fontsize=8)
        ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(out_path, dpi=110)
    plt.close(fig)
    return out_path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.work", description=__doc__)
    parser.add_argument("--nodes", default="10,20,50,100,200")
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--racers", default="2")
    parser.add_argument(
        "--groups", default="jobs", help="racer_groups: 'jobs' (each job alone) or a number"
    )
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--warmup-s", type=int, default=6)
    parser.add_argument("--tag", default="")
    parser.add_argument(
        "--redis-timeout-s",
        type=float,
        default=60.0,
        help="each node's control reader blocks this less 1 s of REAL time per XREAD; a "
        "short block wakes every reader many times per simulated second on a slow run",
    )
    parser.add_argument(
        "--all-wakeups",
        action="store_true",
        help="keep fakeredis waking every blocked reader on every write (the old figures)",
    )
    parser.add_argument(
        "--plot", nargs=2, type=Path, metavar=("ROWS_JSONL", "PNG"), help="only draw the rows"
    )
    parser.add_argument("--ideal", help="with --plot: the tag the 1/N and flat lines start from")
    args = parser.parse_args(argv)
    if args.plot:
        sys.stdout.write(f"wrote {plot(*args.plot, args.ideal)}\n")
        return 0
    import cronrace

    _count_store_cpu()
    _count_clock_cpu()
    _count_full_gc()
    if not args.all_wakeups:
        _wake_only_stream_readers()
    for nodes in (int(n) for n in args.nodes.split(",")):
        row = anyio.run(
            one_cell,
            nodes,
            args.jobs,
            args.racers,
            args.seconds,
            args.warmup_s,
            args.redis_timeout_s,
            args.groups,
        )
        row["tag"] = args.tag
        row["redis_timeout_s"] = args.redis_timeout_s
        row["wakeups"] = "all" if args.all_wakeups else "stream"
        row["cronrace"] = cronrace.__file__
        row["loadavg"] = Path("/proc/loadavg").read_text().split()[:3]
        sys.stdout.write(json.dumps(row) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
