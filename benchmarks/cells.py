"""One benchmark cell: N nodes x J one-second jobs, run, measured and checked.

A cell's timeline (wall clock, T0 chosen once every process is ready):

    start processes -> all ready -> warm-up ticks -> [T0 - 0.5 ... T1 - 0.5] -> stop

Redis ``INFO`` (commandstats, CPU) is read by the harness at both ends of the window; the
fleet processes snapshot their own CPU and request counters at the same instants, so the
window holds exactly ticks T0 .. T1-1 and every figure is a difference over it.
Duplicates and misses are counted from the handlers' own run log (and, for cronrace,
checked against the run records on the ``runs:{job}`` streams), never assumed.
"""

from __future__ import annotations

import asyncio
import math
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.instrument import BACKGROUND_PHASES, TICK_PHASES
from benchmarks.procs import Fleet, FleetError
from benchmarks.server import BenchServer, InfoSnapshot
from cronrace.stores.redis import Keys
from cronrace.stores.urls import open_store
from cronrace.timing.schedule import Schedule

SCHEDULE = "* * * * * *"
#: A tick is "late" when its claims are not all sent this long after it.
LATE_CLAIMS_S = 1.5
#: Wake-ups this late, or a process this busy, for this many ticks in a row: the
#: machine cannot drive the cell.
LATE_WAKE_MS = 500.0
BUSY_CPU = 0.95
BAD_TICKS_TO_ABORT = 2
SILENT_S = 4.0
#: Seconds after the window's end before the fleet is told to stop.
DRAIN_S = 1.5
#: Commands a new connection sends before any work (not part of any phase's cost).
CONNECT_COMMANDS = ("hello", "client")

Status = Callable[[str, float], None]


@dataclass
class CellSpec:
    """What to run: a system, a fleet shape, and for how long."""

    system: str  # "cronrace" or "arq"
    nodes: int
    jobs: int
    ticks: int
    procs: int
    warmup_ticks: int = 3
    chaos: bool = False  # staggered starts and one process paused
    stagger_s: float = 0.7
    pause_s: float = 3.0
    profile: bool = False
    startup_budget_s: float = 60.0
    #: Take every claim of the window beforehand, so that every agent loses every race:
    #: what a claim costs a loser, without the winners' work mixed in.
    losers_only: bool = False
    #: The agents' ``racers`` setting: "all" or k.
    racers: str = "all"
    #: The agents' ``racer_groups`` setting: "jobs" (each job placed alone) or G.
    racer_groups: str = "jobs"
    #: Stop one agent and start it again, in turn, this often (0: never): the churn cell.
    churn_every_s: float = 0.0
    #: The jobs' catch-up policy (the churn cell fires every late tick: "all").
    catchup: str = "latest"
    heartbeat_s: float = 2.0
    #: Measure the window even when the machine cannot drive the cell (the work-against-N
    #: sweep's "before": a saturated fleet's CPU is a floor of what it would need).
    measure_saturated: bool = False
    #: Start the agents one by one over this many seconds (1,000 nodes joining in a minute).
    start_spread_s: float = 0.0
    #: Stop this share of the agents at once, ``replace_after_s`` into the window, and
    #: start as many new ones under new node ids.
    replace_share: float = 0.0
    replace_after_s: float = 5.0
    #: Every job's schedule (6-field cron: seconds first); ``H`` fields hash the job name.
    schedule: str = SCHEDULE
    #: Measure the agents as bare redis-py is measured (the winner's floor): no counting
    #: connection and no 100 Hz stall sampler in the fleet process (together they cost
    #: 1 x 100 about 160 us of CPU per run); only wake-ups and claims are counted.
    bare: bool = False

    @property
    def label(self) -> str:
        suffix = " staggered+paused" if self.chaos else " losers only" if self.losers_only else ""
        if self.racers != "all":
            suffix += f" racers={self.racers}"
        if self.racer_groups != "jobs":
            suffix += f" groups={self.racer_groups}"
        if self.churn_every_s:
            suffix += f" churn every {self.churn_every_s:g}s"
        return f"{self.system} {self.nodes}x{self.jobs}{suffix}"

    @property
    def claimers(self) -> int:
        """How many nodes claim each tick."""
        return self.nodes if self.racers == "all" else min(self.nodes, int(self.racers))


@dataclass
class Context:
    """What every cell of one run shares."""

    server: BenchServer  # or a BenchCluster or BenchPostgres: the same interface
    workdir: Path
    loop: str
    peer_python: Path | None = None
    raw: dict[str, Any] = field(default_factory=dict)
    limit: dict[str, Any] = field(default_factory=dict)
    counter: int = 0
    #: Which store the server is: "redis" or "postgres".
    store: str = "redis"


def percentile(values: list[float], pct: float) -> float | None:
    """Nearest-rank percentile; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[rank - 1]


def _split(nodes: int, procs: int) -> list[list[int]]:
    return [list(range(nodes))[index::procs] for index in range(procs)]


def _argv(spec: CellSpec, ctx: Context) -> list[str]:
    if spec.system == "cronrace":
        return [sys.executable, "-m", "benchmarks.worker"]
    assert ctx.peer_python is not None
    return [str(ctx.peer_python), str(Path(__file__).with_name("peer_arq.py"))]


def run_cell(spec: CellSpec, ctx: Context, status: Status) -> dict[str, Any]:
    """Run one cell and return its row (``status`` is ok, exceeds or error)."""
    ctx.counter += 1
    namespace = f"b{ctx.counter}"
    ctx.server.flush()
    workdir = ctx.workdir / f"{ctx.counter:02d}-{spec.system}-{spec.nodes}x{spec.jobs}"
    fleet = Fleet(workdir)
    row: dict[str, Any] = {
        "system": spec.system,
        "nodes": spec.nodes,
        "jobs": spec.jobs,
        "nodes_x_jobs": spec.nodes * spec.jobs,
        "procs": spec.procs,
        "kind": "chaos"
        if spec.chaos
        else "losers"
        if spec.losers_only
        else "churn"
        if spec.churn_every_s
        else "sweep",
        "loop": ctx.loop,
        "racers": spec.racers,
        "racer_groups": spec.racer_groups,
        "store": ctx.store,
        "heartbeat_s": spec.heartbeat_s,
    }
    base = {
        "redis_url": ctx.server.url,
        "store_url": ctx.server.url,
        "port": ctx.server.port,
        "namespace": namespace,
        "jobs": spec.jobs,
        "schedule": spec.schedule,
        "loop": ctx.loop,
        "startup_timeout_s": spec.startup_budget_s,
        "racers": spec.racers,
        "racer_groups": spec.racer_groups,
        "churn_every_s": spec.churn_every_s,
        "start_spread_s": spec.start_spread_s,
        "replace_share": spec.replace_share,
        "replace_after_s": spec.replace_after_s,
        "catchup": spec.catchup,
        "heartbeat_s": spec.heartbeat_s,
        "bare": spec.bare,
    }
    try:
        return _run(spec, ctx, fleet, base, row, workdir, status)
    except FleetError as exc:
        fleet.kill()
        return {**row, "status": "error", "reason": str(exc)[:400]}
    except BaseException:
        fleet.kill()
        raise


def _run(
    spec: CellSpec,
    ctx: Context,
    fleet: Fleet,
    base: dict[str, Any],
    row: dict[str, Any],
    workdir: Path,
    status: Status,
) -> dict[str, Any]:
    argv = _argv(spec, ctx)
    status(f"{spec.label}: starting {spec.procs} process(es)", 0.0)
    started = time.time()
    for index, nodes in enumerate(_split(spec.nodes, spec.procs)):
        config = {**base, "nodes": nodes}
        if spec.profile and index == 0:
            config["profile_path"] = str(workdir / "proc0.prof")
        if spec.chaos and index:
            _wait_events(fleet, time.time() + spec.stagger_s)
        fleet.spawn(argv, config)
    deadline = started + spec.startup_budget_s
    while not all(proc.ready for proc in fleet.procs):
        got = fleet.next_event(deadline)
        if got is None:
            ready = sum(proc.ready for proc in fleet.procs)
            progress = [proc.progress for proc in fleet.procs]
            fleet.kill()
            return {
                **row,
                "status": "exceeds",
                "reason": f"start-up of {spec.nodes} agents x {spec.jobs} jobs not done after "
                f"{spec.startup_budget_s:.0f} s ({ready}/{spec.procs} processes ready)",
                # A ready process stops reporting its progress: all its agents seeded.
                "startup_seeded": sum(
                    len(nodes) if proc.ready else int(proc.progress.get("seeded", 0))
                    for proc, nodes in zip(fleet.procs, _split(spec.nodes, spec.procs), strict=True)
                ),
                "startup_cpu_s": round(
                    sum(
                        proc.startup_cpu_s if proc.ready else float(proc.progress.get("cpu_s", 0))
                        for proc in fleet.procs
                    ),
                    2,
                ),
                "loop_stall_ms_startup_max": max(
                    (float(p.get("stall_ms", 0)) for p in progress), default=None
                ),
                "startup_memory_per_node_mb": round(
                    sum(float(p.get("rss_mb", 0)) for p in progress) / spec.nodes, 2
                ),
            }
        fleet.handle(*got)
    row["startup_s"] = round(max(proc.startup_s for proc in fleet.procs), 2)
    row["startup_cpu_s"] = round(sum(proc.startup_cpu_s for proc in fleet.procs), 2)
    row["startup_cpu_s_per_node"] = round(row["startup_cpu_s"] / spec.nodes, 3)
    row["startup_memory_per_node_mb"] = round(
        sum(proc.startup_rss_mb for proc in fleet.procs) / spec.nodes, 2
    )
    t0 = math.floor(time.time()) + 1 + spec.warmup_ticks
    t1 = t0 + spec.ticks
    if spec.losers_only:
        _take_claims(ctx, base["namespace"], spec.jobs, t0 - spec.warmup_ticks + 1, t1 + 3)
    fleet.broadcast({"cmd": "window", "t0": t0, "t1": t1})
    # The chaos run stops one process on a tick boundary, mid-window, for pause_s.
    pause_at = t0 + 2.0 if spec.chaos else math.inf
    resume_at = math.inf
    pause_index = len(fleet.procs) // 2
    due = _due_by_tick(spec, t0 - spec.warmup_ticks, t1 + 1)
    ticks: dict[int, dict[int, dict[str, Any]]] = defaultdict(dict)
    bad_run = 0
    reasons: list[str] = []
    snapshots: dict[str, InfoSnapshot] = {}
    # A process too busy to report a tick for this long has a blocked event loop.
    last_report = dict.fromkeys(range(len(fleet.procs)), time.time())
    judged: set[int] = set()
    for name, at in (("start", t0 - 0.5), ("end", t1 - 0.5)):
        while True:
            got = fleet.next_event(min(at, pause_at, resume_at, time.time() + 0.5))
            now = time.time()
            if got is None:
                if now >= pause_at:
                    fleet.pause(pause_index)
                    row["paused_at_s"] = round(now - t0, 3)
                    pause_at, resume_at = math.inf, now + spec.pause_s
                if now >= resume_at:
                    fleet.resume(pause_index)
                    row["paused_for_s"] = round(now - (resume_at - spec.pause_s), 3)
                    resume_at = math.inf
                silent_s = SILENT_S * (4 if spec.measure_saturated else 1)
                silent = [i for i, seen in last_report.items() if now - seen > silent_s]
                if silent and not spec.chaos:
                    reasons.append(
                        f"fleet process(es) {silent} reported nothing for {SILENT_S:g} s "
                        "(event loop blocked)"
                    )
                    return _exceeds(fleet, row, reasons, ticks)
                if now >= at:
                    break
                continue
            index, event = got
            fleet.handle(index, event)
            if event["ev"] != "tick":
                continue
            last_report[index] = now
            tick = int(event["tick"])
            ticks[tick][index] = event
            done = ticks[tick]
            progress = min(1.0, max(0.0, (tick - t0 + 1) / spec.ticks))
            status(_tick_text(spec, tick, t0, done), progress)
            # Judge each tick once every process has reported it, from the last warm-up
            # tick on (the first ticks after start-up carry connection set-up).
            skip = spec.chaos or bool(spec.churn_every_s) or bool(spec.replace_share)
            if skip or len(done) < len(fleet.procs) or tick < t0 - 1 or tick in judged:
                continue
            judged.add(tick)
            bad = _saturation(spec, done, spec.claimers * due.get(tick, 0))
            bad_run = bad_run + 1 if bad else 0
            if bad:
                reasons.append(f"tick {tick - t0:+d}: {bad}")
            if bad_run >= BAD_TICKS_TO_ABORT and not spec.measure_saturated:
                return _exceeds(fleet, row, reasons[-BAD_TICKS_TO_ABORT:], ticks)
        snapshots[name] = ctx.server.snapshot()
    # The last tick of the window may still be running: give it time before stopping,
    # or a slow cell's last tick would count as missed (a stopping agent claims nothing).
    status(f"{spec.label}: letting the last tick finish", 1.0)
    _wait_events(fleet, t1 + DRAIN_S)
    status(f"{spec.label}: stopping", 1.0)
    results = fleet.stop()
    records = None
    detail: list[dict[str, Any]] = []
    if spec.system == "cronrace":
        records = asyncio.run(_read_records(ctx.server.url, base["namespace"], spec.jobs))
        lost = _lost(spec, results, (t0, t1))
        if lost:
            detail = asyncio.run(_lost_detail(ctx.server.url, base["namespace"], lost))
    if any(not result for result in results):
        missing = [
            proc.index for proc, result in zip(fleet.procs, results, strict=True) if not result
        ]
        raise FleetError(
            f"no result from process(es) {missing}: {fleet.procs[missing[0]].stderr_tail()}"
        )
    if spec.profile:
        row["profile"] = str(workdir / "proc0.prof")
    return {
        **row,
        **measure(spec, ctx, results, snapshots, (t0, t1), records),
        # The fleet's CPU, second by second (cores, summed over its processes): where a
        # churn's burst falls against the window's ticks.
        "fleet_cpu_by_tick": {
            tick - t0: round(sum(float(e.get("cpu", 0)) for e in done.values()), 2)
            for tick, done in sorted(ticks.items())
        },
        "saturation_notes": "; ".join(reasons),
        "missed_detail": detail,
    }


def _exceeds(
    fleet: Fleet,
    row: dict[str, Any],
    reasons: list[str],
    ticks: dict[int, dict[int, dict[str, Any]]],
) -> dict[str, Any]:
    """Stop a cell the machine cannot drive; keep the measurements that showed it."""
    fleet.stop(timeout_s=10)
    fleet.kill()
    reached = [sum(int(e.get("claims", 0)) for e in by_proc.values()) for by_proc in ticks.values()]
    return {
        **row,
        "status": "exceeds",
        "reason": "; ".join(reasons),
        "claims_per_s_reached": max(reached, default=0),
    }


def _take_claims(ctx: Context, namespace: str, jobs: int, first: int, last: int) -> None:
    """Win every claim of ticks ``first .. last`` for a node that is not in the fleet."""
    if ctx.store != "redis":
        raise FleetError("losers-only cells take the claims with Redis commands: Redis only")
    keys = Keys(namespace)
    client = ctx.server.client()
    pipe = client.pipeline(transaction=False)
    for job in range(jobs):
        for tick in range(first, last + 1):
            pipe.set(keys.claim(f"j{job:04d}", tick), "outsider:0", px=600_000)
    pipe.execute()


def _wait_events(fleet: Fleet, until_s: float) -> None:
    while (got := fleet.next_event(until_s)) is not None:
        fleet.handle(*got)


def _tick_text(spec: CellSpec, tick: int, t0: int, done: dict[int, dict[str, Any]]) -> str:
    position = tick - t0 + 1
    where = f"warm-up {position - 1:+d}" if position < 1 else f"tick {position}/{spec.ticks}"
    cpu = "/".join(f"{event.get('cpu', 0):.2f}" for event in done.values())
    return f"{spec.label}: {where}  cpu {cpu}"


def _saturation(spec: CellSpec, done: dict[int, dict[str, Any]], expected: int) -> str:
    """Why this tick shows the machine cannot drive the cell ('' when it can)."""
    out = []
    if spec.system == "cronrace":
        claims = sum(int(event.get("claims", 0)) for event in done.values())
        if claims < expected:
            out.append(
                f"only {claims}/{expected} claims sent within {LATE_CLAIMS_S:g} s of the tick"
            )
        lags = [event["wake_lag_max_ms"] for event in done.values() if event.get("wake_lag_max_ms")]
        if lags and max(lags) > LATE_WAKE_MS:
            out.append(f"wake-ups up to {max(lags):.0f} ms late")
    cpus = [float(event.get("cpu", 0)) for event in done.values()]
    if cpus and max(cpus) >= BUSY_CPU:
        out.append(f"fleet process CPU {'/'.join(f'{c:.2f}' for c in cpus)} cores")
    return ", ".join(out)


async def _read_records(url: str, namespace: str, jobs: int) -> dict[tuple[int, int], list[str]]:
    """Every run record of every job: (job index, tick) -> outcomes."""
    store = open_store(url, namespace, max_connections=16)
    out: dict[tuple[int, int], list[str]] = defaultdict(list)
    try:
        names = [f"j{index:04d}" for index in range(jobs)]
        limiter = asyncio.Semaphore(16)
        # One call first: redis-py's cluster client fails calls that race its first start.
        await store.history(names[0], 1)

        async def one(name: str) -> None:
            async with limiter:
                for record in await store.history(name, 10_000):
                    out[(int(name[1:]), record.tick_s)].append(str(record.outcome.value))

        await asyncio.gather(*(one(name) for name in names))
    finally:
        await store.aclose()
    return out


#: The most missed ticks a cell looks into (claim holder, records around the tick).
LOST_DETAIL_CAP = 40


def _lost(
    spec: CellSpec, results: list[dict[str, Any]], window: tuple[int, int]
) -> list[tuple[int, int]]:
    """The (job index, tick) pairs of the window no handler ran, the first few of them."""
    ran = {(int(e[0]), int(e[1])) for result in results for e in result["run_log"]}
    expected = expected_ticks(spec.schedule, spec.jobs, window)
    return [key for key in expected if key not in ran][:LOST_DETAIL_CAP]


async def _lost_detail(
    url: str, namespace: str, lost: list[tuple[int, int]]
) -> list[dict[str, Any]]:
    """For each tick no handler ran: who holds its claim, and the job's records around it
    (tick, node, outcome), so a loss can be traced to the nodes that raced it."""
    store = open_store(url, namespace, max_connections=4)
    keys = Keys(namespace)
    client = getattr(store, "client", None)
    out = []
    try:
        for job, tick in lost:
            name = f"j{job:04d}"
            holder = None
            if client is not None:
                raw = await client.get(keys.claim(name, tick))
                holder = raw.decode() if isinstance(raw, bytes) else raw
            near = [
                [r.tick_s - tick, r.node, str(r.outcome.value), r.count]
                for r in await store.history(name, 200)
                if abs(r.tick_s - tick) <= 3
            ]
            out.append({"job": job, "tick": tick, "claim": holder, "records": sorted(near)})
    finally:
        await store.aclose()
    return out


def _delta(results: list[dict[str, Any]], key: str) -> Any:
    total: Any = 0
    for result in results:
        start, end = result["marks"]["start"], result["marks"]["end"]
        if isinstance(end[key], dict):
            total = total or Counter()
            total.update({k: v - start[key].get(k, 0) for k, v in end[key].items()})
        else:
            total += end[key] - start[key]
    return total


def _repeated_runs(
    run_log: list[list[Any]], per: Counter[tuple[int, int]], t0: int
) -> dict[str, Any]:
    """Where duplicates fell (tick offsets from T0) and how late their extra runs started."""
    twice = {key for key, count in per.items() if count > 1}
    if not twice:
        return {}
    starts: dict[tuple[int, int], list[float]] = defaultdict(list)
    for entry in run_log:
        key = (int(entry[0]), int(entry[1]))
        if key in twice:
            starts[key].append(float(entry[3]) - key[1])
    late = sorted(lag for lags in starts.values() for lag in sorted(lags)[1:])
    by_tick = Counter(tick - t0 for (_job, tick) in twice)
    return {
        "duplicates_by_tick": dict(sorted(by_tick.items())),
        "duplicate_extra_run_lag_s": [round(late[0], 1), round(late[-1], 1)],
    }


def expected_ticks(schedule: str, jobs: int, window: tuple[int, int]) -> list[tuple[int, int]]:
    """Every (job index, tick) the window holds: each job's schedule, its ``H`` hashed."""
    t0, t1 = window
    if schedule == SCHEDULE:
        return [(job, tick) for job in range(jobs) for tick in range(t0, t1)]
    out = []
    for job in range(jobs):
        parsed = Schedule.parse(schedule, job=f"j{job:04d}")
        out += [(job, tick) for tick in parsed.ticks_between(t0 - 1, t1 - 1, t1 - t0)]
    return out


def _due_by_tick(spec: CellSpec, t0: int, t1: int) -> Counter[int]:
    return Counter(tick for _job, tick in expected_ticks(spec.schedule, spec.jobs, (t0, t1)))


def _run_checks(
    run_log: list[list[Any]], expected: list[tuple[int, int]], window: tuple[int, int]
) -> tuple[int, dict[int, int], list[float], Counter[tuple[int, int]]]:
    t0, t1 = window
    per: Counter[tuple[int, int]] = Counter((int(e[0]), int(e[1])) for e in run_log)
    duplicates = sum(count - 1 for count in per.values() if count > 1)
    missed: Counter[int] = Counter(tick - t0 for job, tick in expected if not per[(job, tick)])
    lags_ms = [(float(e[3]) - int(e[1])) * 1000 for e in run_log if t0 <= int(e[1]) < t1]
    return duplicates, missed, lags_ms, per


def _spread(run_log: list[list[Any]], nodes: int, window: tuple[int, int]) -> dict[str, Any]:
    """Runs per node in the window: the busiest node against the mean (every node counts)."""
    t0, t1 = window
    per_node = Counter(int(e[2]) for e in run_log if t0 <= int(e[1]) < t1)
    if not per_node:
        return {}
    mean = sum(per_node.values()) / nodes
    return {
        "runs_per_node_max": max(per_node.values()),
        "runs_per_node_mean": round(mean, 1),
        "spread_max_over_mean": round(max(per_node.values()) / mean, 3),
    }


def measure(
    spec: CellSpec,
    ctx: Context,
    results: list[dict[str, Any]],
    snapshots: dict[str, InfoSnapshot],
    window: tuple[int, int],
    records: dict[tuple[int, int], list[str]] | None,
) -> dict[str, Any]:
    """Turn one cell's raw counts into its row of figures."""
    t0, t1 = window
    n, j, ticks = spec.nodes, spec.jobs, t1 - t0
    wall_s, redis_cpu_s, calls = snapshots["start"].delta(snapshots["end"])
    usec = snapshots["start"].usec_per_call(snapshots["end"])
    run_log = [entry for result in results for entry in result["run_log"]]
    expected = expected_ticks(spec.schedule, j, window)
    job_ticks = max(1, len(expected))
    duplicates, missed, lags_ms, per = _run_checks(run_log, expected, window)
    repeated = _repeated_runs(run_log, per, t0)
    # Why a tick ran nowhere, from its run records: the overlap policy skipped it (the
    # previous run still held the lease: recorded), or nothing at all was recorded.
    not_run = [key for key in expected if not per[key]]
    why = [(records or {}).get(key, []) for key in not_run]
    fleet_cpu_s = _delta(results, "cpu")
    row: dict[str, Any] = {
        "status": "ok",
        "ticks": ticks,
        "window_s": round(wall_s, 3),
        "duplicates": duplicates,
        "missed": sum(missed.values()),
        "missed_by_tick": dict(sorted(missed.items())),
        "missed_skipped_overlap": sum(1 for outcomes in why if "skipped:overlap" in outcomes),
        "missed_unrecorded": sum(1 for outcomes in why if not outcomes),
        **repeated,
        "runs_in_window": sum(1 for (_job, tick) in per if t0 <= tick < t1),
        **_spread(run_log, n, window),
        "late_runs_over_1s": sum(1 for lag in lags_ms if lag > 1000),
        "fire_lag_p50_ms": _round(percentile(lags_ms, 50)),
        "fire_lag_p99_ms": _round(percentile(lags_ms, 99)),
        "fire_lag_max_ms": _round(max(lags_ms, default=None)),
        "fire_lag_samples": len(lags_ms),
        "redis_cmds_executed_per_tick": round(sum(calls.values()) / ticks, 2),
        "redis_cmds_by_command": {name: round(n_ / ticks, 2) for name, n_ in sorted(calls.items())},
        "redis_usec_per_call": usec,
        "redis_cpu_s_per_s": round(redis_cpu_s / wall_s, 4),
        "client_cpu_cores": round(fleet_cpu_s / wall_s, 3),
        "client_cpu_ms_per_node_s": round(fleet_cpu_s / (n * wall_s) * 1000, 3),
        "memory_per_node_mb": _memory_per_node_mb(results),
        **_stalls(results),
        "job_ticks": job_ticks,
        "client_cpu_us_per_job_tick": round(fleet_cpu_s / job_ticks * 1e6, 1),
    }
    if snapshots["start"].shards:
        row["shards"] = _by_shard(snapshots, wall_s, ticks)
    if spec.system == "arq":
        row["redis_cmds_sent_per_tick"] = row["redis_cmds_executed_per_tick"]
        return row
    if spec.losers_only:
        # Nothing may run: every claim was taken by an outsider before its tick.
        row["missed"] = None
    round_trips = _delta(results, "round_trips")
    if all("beats" in result["marks"]["start"] for result in results):
        # The cascade's counters: late beats and full reads cost O(N) each (heartbeat.py).
        row["beats_before_window"] = dict(
            sum((Counter(result["marks"]["start"]["beats"]) for result in results), Counter())
        )
        row["beats_in_window"] = dict(_delta(results, "beats"))
    commands = _delta(results, "commands")
    answers = _delta(results, "decide_answers") or {}
    wakeups = _delta(results, "wakeups")
    claims = _delta(results, "claims")
    by_phase: Counter[str] = Counter()
    for key, count in commands.items():
        by_phase[key.split("|", 1)[0]] += count
    # A claim is one SET on Redis; on PostgreSQL one row of the wake-up's one statement.
    claim_sets = commands.get("claim|set", 0) if ctx.store == "redis" else claims
    tick_cmds = sum(by_phase[phase] for phase in TICK_PHASES)
    background_cmds = sum(by_phase[phase] for phase in BACKGROUND_PHASES)
    winner_cmds = tick_cmds - claim_sets
    wake_lags = _window(results, "wake_lags", window)
    claim_rtts = _window(results, "claim_rtts", window)
    decide_rtts = _window(results, "decide_rtts", window)
    record_dups, record_missed, outcomes = _record_checks(records or {}, expected, window)
    raw = ctx.raw.get(f"raw:{j}", {})
    store_raw = ctx.raw.get(f"store:{j}", {})
    paced = ctx.raw.get(f"paced:{n}x{j}", {})
    cpu_per_claim_us = fleet_cpu_s / claims * 1e6 if claims else None
    limit = ctx.limit
    row.update(
        {
            "claims": claims,
            "claims_per_s": round(claims / wall_s, 1),
            "wakeups": wakeups,
            "claims_per_node_job_tick": _round(claim_sets / (n * job_ticks), 4),
            "claims_per_job_tick": _round(claim_sets / job_ticks, 3),
            "churned": sum(int(result.get("churned", 0)) for result in results),
            "loser_cmds_per_node_job_tick": _loser_cmds(spec, claim_sets, ticks),
            "winner_cmds_per_job_tick": _round(winner_cmds / job_ticks, 3),
            "redis_cmds_sent_per_tick": round((tick_cmds + background_cmds) / ticks, 2),
            "tick_cmds_sent_per_tick": round(tick_cmds / ticks, 2),
            "tick_cmds_bound": n * j + 3 * j,
            "background_cmds_per_tick": round(background_cmds / ticks, 2),
            "background_cmds_per_node_s": round(background_cmds / (n * wall_s), 3),
            "script_internal_cmds_per_tick": round(
                (
                    sum(n_ for name, n_ in calls.items() if not name.startswith(CONNECT_COMMANDS))
                    - sum(c for phase, c in by_phase.items() if phase != "connect")
                )
                / ticks,
                2,
            ),
            "connects_per_tick": round(calls.get("hello", 0) / ticks, 2),
            "rtt_per_node_wake": _round(round_trips.get("claim", 0) / wakeups, 4)
            if wakeups
            else None,
            "tick_rtt_per_node_wake": _round(
                sum(round_trips.get(p, 0) for p in TICK_PHASES) / wakeups, 3
            )
            if wakeups
            else None,
            "rtt_by_phase_per_tick": {
                phase: round(count / ticks, 2) for phase, count in sorted(round_trips.items())
            },
            "decide_answers_per_tick": {
                answer: round(count / ticks, 2) for answer, count in sorted(answers.items())
            },
            "background_rtt_per_node_s": round(
                sum(round_trips.get(p, 0) for p in BACKGROUND_PHASES) / (n * wall_s), 3
            ),
            "wake_lag_p50_ms": _round(percentile(wake_lags, 50)),
            "wake_lag_p99_ms": _round(percentile(wake_lags, 99)),
            "claim_rtt_p50_ms": _round(percentile(claim_rtts, 50)),
            "claim_rtt_p99_ms": _round(percentile(claim_rtts, 99)),
            "decide_rtt_p50_ms": _round(percentile(decide_rtts, 50)),
            "decide_rtt_p99_ms": _round(percentile(decide_rtts, 99)),
            "redis_cpu_ms_per_1k_claims": _round(redis_cpu_s / claims * 1e6, 2) if claims else None,
            "server_cpu_ms_per_1k_claims": _round(redis_cpu_s / claims * 1e6, 2)
            if claims
            else None,
            "agent_cpu_us_per_run": _round(fleet_cpu_s / row["runs_in_window"] * 1e6, 1)
            if row["runs_in_window"]
            else None,
            "agent_cpu_us_per_claim": _round(cpu_per_claim_us, 2),
            "raw_cpu_us_per_set": _round(raw.get("cpu_us_per_set"), 2),
            "store_claim_cpu_us_per_set": _round(store_raw.get("cpu_us_per_set"), 2),
            "agent_cpu_vs_raw": _round(cpu_per_claim_us / raw["cpu_us_per_set"], 2)
            if raw and cpu_per_claim_us
            else None,
            "paced_raw_cpu_us_per_set": _round(paced.get("cpu_us_per_set"), 2),
            "agent_cpu_vs_paced_raw": _round(cpu_per_claim_us / paced["cpu_us_per_set"], 2)
            if paced and cpu_per_claim_us
            else None,
            "claims_vs_limit_pipelined": _ratio(claims / wall_s, limit.get("pipelined_rps")),
            "claims_vs_limit_unpipelined": _ratio(claims / wall_s, limit.get("unpipelined_rps")),
            "record_duplicates": record_dups,
            "record_missed": record_missed,
            "record_outcomes": dict(outcomes),
        }
    )
    return row


def _stalls(results: list[dict[str, Any]]) -> dict[str, float]:
    """The longest event-loop stall of any fleet process, before and within the window."""
    stalls = [r["loop_stall_ms"] for r in results if "loop_stall_ms" in r]
    if not stalls:
        return {}
    return {
        "loop_stall_ms_startup_max": max(s["startup"] for s in stalls),
        "loop_stall_ms_window_max": max(s["window"] for s in stalls),
    }


def _memory_per_node_mb(results: list[dict[str, Any]]) -> float | None:
    """Resident memory the fleet processes grew by from before their agents were built to
    the window's end, over their agents (the shared interpreter and imports left out)."""
    grown = [(r["rss_end_mb"] - r["rss_base_mb"], r["nodes"]) for r in results if "rss_end_mb" in r]
    if not grown:
        return None
    return round(sum(mb for mb, _n in grown) / sum(n for _mb, n in grown), 3)


def _by_shard(
    snapshots: dict[str, InfoSnapshot], wall_s: float, ticks: int
) -> dict[str, dict[str, float]]:
    """Per primary of a cluster: SET calls per second (claims, and the scripts' writes),
    commands per tick, Redis CPU."""
    out = {}
    for name, start in sorted(snapshots["start"].shards.items()):
        _wall, cpu_s, calls = start.delta(snapshots["end"].shards[name])
        out[name] = {
            "sets_per_s": round(calls.get("set", 0) / wall_s, 1),
            "cmds_per_tick": round(sum(calls.values()) / ticks, 1),
            "redis_cpu_s_per_s": round(cpu_s / wall_s, 4),
        }
    return out


def _loser_cmds(spec: CellSpec, claim_sets: int, ticks: int) -> float | None:
    """Claim commands per losing node x job x tick: every claim but the winner's one."""
    n, j = spec.nodes, spec.jobs
    if spec.losers_only:
        return _round(claim_sets / (n * j * ticks), 4)
    if n < 2:
        return None
    return _round((claim_sets - j * ticks) / ((n - 1) * j * ticks), 4)


def _window(results: list[dict[str, Any]], key: str, window: tuple[int, int]) -> list[float]:
    t0, t1 = window
    return [
        seconds * 1000
        for result in results
        for tick, seconds in result.get(key, [])
        if t0 <= tick < t1
    ]


def _record_checks(
    records: dict[tuple[int, int], list[str]],
    expected: list[tuple[int, int]],
    window: tuple[int, int],
) -> tuple[int, int, Counter[str]]:
    t0, t1 = window
    outcomes: Counter[str] = Counter()
    duplicates = 0
    for (_job, tick), found in records.items():
        ok = sum(1 for outcome in found if outcome == "ok")
        duplicates += max(0, ok - 1)
        if t0 <= tick < t1:
            outcomes.update(found)
    missed = sum(1 for key in expected if "ok" not in records.get(key, []))
    return duplicates, missed, outcomes


def _round(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


def _ratio(value: float, limit: float | None) -> float | None:
    return round(value / limit, 5) if limit else None
