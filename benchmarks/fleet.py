"""Simulated fleets racing for ticks, against the same Redis's limit and against a peer.

``python -m benchmarks.fleet`` runs, in one go and on one private redis-server:

1. the limit: ``redis-benchmark`` ``SET NX PX`` unpipelined and pipelined, and the
   client-side CPU of raw redis-py and of ``Store.claim`` per pipelined SET;
2. the sweep: N agents x J 1-second jobs for N in {1, 10, 50, 200} and J in
   {1, 10, 100, 1000}; cells this machine cannot drive are stopped early and reported
   as "exceeds" with the measurement that showed it;
3. the peer: arq's cron jobs with the same numbers of workers and jobs (in its own
   virtual environment, made on demand), and a run with staggered starts and one
   worker paused for 3 s, for both systems.

``--quick`` runs a small version in under two minutes and ends with one line of
``key=value`` figures; ``--smoke`` runs only the quick mode's smallest cell (for the
test suite); ``--publish`` writes ``benchmarks/results/`` and RESULTS.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from benchmarks import limit as limits
from benchmarks import report
from benchmarks.cells import CellSpec, Context, run_cell
from benchmarks.floor import floor_cell
from benchmarks.peer import ensure_peer, uvloop_installed
from benchmarks.server import BenchServer

BENCH_DIR = Path(__file__).resolve().parent
RESULTS_DIR = BENCH_DIR / "results"
RESULTS_MD = BENCH_DIR / "RESULTS.md"

FULL_NODES = (1, 10, 50, 200)
FULL_JOBS = (1, 10, 100, 1000)
QUICK_CELLS = ((5, 1), (10, 10), (10, 100))
PEER_CELLS_FULL = ((1, 1), (5, 1), (10, 10), (10, 100))
PEER_CELLS_QUICK = ((5, 1),)
LOSER_CELLS_FULL = ((10, 10), (10, 100), (50, 100))
LOSER_CELLS_QUICK = ((10, 100),)
#: The fire-lag target cell again, with every simulated node in a process of its own.
ONE_PROCESS_PER_NODE_FULL = ((10, 100),)
CHAOS_CELL = (5, 10)
#: The cell the fire-lag target is stated for.
LAG_TARGET_CELL = (10, 100)
AGENTS_PER_PROCESS = 100
#: From this many claims per second a cell gets two fleet processes (one per core).
TWO_PROCESSES_FROM = 5000
#: racers = k beside racers = all (docs/design.md section 12): (nodes, jobs, racers).
RACER_CELLS_QUICK = ((10, 100, "2"), (10, 100, "3"), (5, 100, "all"), (5, 100, "2"))
RACER_CELLS_FULL = tuple(
    (n, j, k)
    for n, j in ((5, 1000), (200, 100), (1000, 100), (200, 1000))
    for k in ("all", "2", "3")
    if (n, j, k) not in ((200, 100, "all"), (200, 1000, "all"))  # in the sweep already
)
#: The winner's path against bare redis-py doing what a winner must (benchmarks/floor.py).
FLOOR_CELLS_FULL = ((1, 100), (1, 1000), (10, 100))
FLOOR_CELLS_QUICK = ((1, 100),)
#: The floor's background cell: the same fleet, with schedules that fire on January 1st only.
NEVER_IN_WINDOW = "0 0 0 1 1 *"
#: Nodes x jobs of the churn cell: racers = 2, one agent stopped and started again in turn.
CHURN_CELL = (6, 20)
CHURN_EVERY_S = 3.0


@dataclass
class Plan:
    cells: list[tuple[int, int]]
    peer_cells: list[tuple[int, int]]
    chaos: bool
    limit: bool
    ticks: int
    chaos_ticks: int
    quick: bool
    profile: tuple[int, int] | None = None
    agents_per_process: int = AGENTS_PER_PROCESS
    extra_ours: list[tuple[int, int]] = field(default_factory=list)
    loser_cells: list[tuple[int, int]] = field(default_factory=list)
    per_node_cells: list[tuple[int, int]] = field(default_factory=list)
    loser_repeats: int = 3
    racer_cells: list[tuple[int, int, str]] = field(default_factory=list)
    floor_cells: list[tuple[int, int]] = field(default_factory=list)
    floor_repeats: int = 3
    churn: bool = False
    churn_ticks: int = 15

    @property
    def steps(self) -> int:
        ours = (
            len(self.cells)
            + len(self.racer_cells)
            + len(self.floor_cells) * self.floor_repeats * 3  # floor, cronrace, background
            + int(self.churn)
            + len(self.extra_ours)
            + len(self.loser_cells)
            + len(self.per_node_cells)
        )
        peer = len(self.peer_cells) + (1 if self.peer_cells or self.chaos else 0)
        return ours + peer + (2 if self.chaos else 0) + (2 if self.limit else 0)


def procs_for(nodes: int, jobs: int, agents_per_process: int = AGENTS_PER_PROCESS) -> int:
    """Fleet processes for a cell: ~100 agents each, two once the load needs both cores."""
    by_agents = math.ceil(nodes / agents_per_process)
    by_load = 2 if nodes * jobs >= TWO_PROCESSES_FROM else 1
    return max(1, min(nodes, max(by_agents, by_load)))


def _cell(text: str) -> tuple[int, int]:
    nodes, _, jobs = text.lower().partition("x")
    return int(nodes), int(jobs)


def _racer_cell(text: str) -> tuple[int, int, str]:
    cell, _, racers = text.lower().partition(":")
    return (*_cell(cell), racers or "2")


def build_plan(args: argparse.Namespace) -> Plan:
    if args.smoke:
        plan = Plan(
            [QUICK_CELLS[0]], [], chaos=False, limit=False, ticks=4, chaos_ticks=0, quick=True
        )
    elif args.quick:
        plan = Plan(
            list(QUICK_CELLS),
            list(PEER_CELLS_QUICK),
            chaos=True,
            limit=True,
            ticks=5,
            chaos_ticks=8,
            quick=True,
        )
        plan.loser_cells = list(LOSER_CELLS_QUICK)
        plan.loser_repeats = 1
        plan.racer_cells = list(RACER_CELLS_QUICK)
        plan.churn = True
        plan.floor_cells = list(FLOOR_CELLS_QUICK)
        plan.floor_repeats = 1
    else:
        cells = [(n, j) for n in FULL_NODES for j in FULL_JOBS]
        plan = Plan(
            cells,
            list(PEER_CELLS_FULL),
            chaos=True,
            limit=True,
            ticks=10,
            chaos_ticks=70,
            quick=False,
        )
        plan.extra_ours = [c for c in PEER_CELLS_FULL if c not in cells]
        plan.loser_cells = list(LOSER_CELLS_FULL)
        plan.per_node_cells = list(ONE_PROCESS_PER_NODE_FULL)
        plan.racer_cells = list(RACER_CELLS_FULL)
        plan.churn = True
        plan.churn_ticks = 40
        plan.floor_cells = list(FLOOR_CELLS_FULL)
    if args.racers is not None:
        plan.racer_cells = [_racer_cell(text) for text in args.racers.split(",") if text]
    if args.cells:
        plan.cells = [_cell(text) for text in args.cells.split(",")]
        plan.extra_ours = []
        plan.loser_cells = []
        plan.per_node_cells = []
        if args.racers is None:
            plan.racer_cells = []
        plan.churn = False
        if args.floor is None:
            plan.floor_cells = []
    if args.floor is not None:
        plan.floor_cells = [_cell(text) for text in args.floor.split(",") if text]
    if args.churn:
        plan.churn = True
    if args.losers:
        plan.loser_cells = [_cell(text) for text in args.losers.split(",")]
    if args.no_peer:
        plan.peer_cells = []
    if args.no_chaos:
        plan.chaos = False
    if args.no_limit:
        plan.limit = False
    if args.ticks:
        plan.ticks = args.ticks
    if args.profile:
        plan.profile = _cell(args.profile)
    if args.agents_per_process:
        plan.agents_per_process = args.agents_per_process
    return plan


class Display:
    """A rich progress display on stderr: the whole run, and the step under way."""

    def __init__(self, total: int) -> None:
        self.console = Console(stderr=True)
        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=self.console,
            refresh_per_second=4,
        )
        self.overall: TaskID = self.progress.add_task("benchmark", total=total)
        self.step: TaskID = self.progress.add_task("", total=100)

    @contextmanager
    def running(self) -> Iterator[Display]:
        with self.progress:
            yield self

    def begin(self, text: str) -> None:
        self.progress.update(self.step, description=text, completed=0)

    def status(self, text: str, fraction: float) -> None:
        self.progress.update(self.step, description=text, completed=round(fraction * 100))

    def done(self, text: str) -> None:
        self.progress.update(self.step, completed=100)
        self.progress.advance(self.overall)
        self.console.log(text)


def _summary(row: dict[str, Any]) -> str:
    if row.get("status") != "ok":
        return f"[yellow]{row['system']} {row['nodes']}x{row['jobs']}: {row['status']}[/] " + str(
            row.get("reason", "")
        )
    return (
        f"{row['system']} {row['nodes']}x{row['jobs']}{' chaos' if row['kind'] == 'chaos' else ''}"
        f": cmds/tick {row.get('redis_cmds_sent_per_tick')}  p99 lag "
        f"{row.get('fire_lag_p99_ms')} ms  dup {row['duplicates']}  missed {row['missed']}"
    )


def run(plan: Plan, workdir: Path, display: Display) -> dict[str, Any]:
    loop = "uvloop" if uvloop_installed() else "asyncio"
    out: dict[str, Any] = {
        "machine": report.machine(),
        "commit": report.git_commit(),
        "loop": loop,
        "plan": {
            "cells": plan.cells,
            "peer_cells": plan.peer_cells,
            "ticks": plan.ticks,
            "chaos_ticks": plan.chaos_ticks,
            "quick": plan.quick,
        },
        "fleet": [],
        "racers": [],
        "floor": {},
        "losers": [],
        "per_node": [],
        "peer": [],
        "chaos": [],
        "limit": {},
        "raw": {},
        "peer_status": "not run",
    }
    started = time.time()
    with BenchServer(workdir / "redis") as server:
        out["machine"]["redis_server"] = server.version
        ctx = Context(server=server, workdir=workdir, loop=loop)
        if plan.limit:
            display.begin("limit: redis-benchmark SET NX PX (unpipelined, pipelined)")
            ctx.limit = out["limit"] = limits.redis_benchmark(server, quick=plan.quick)
            display.done(f"redis-benchmark: {json.dumps(ctx.limit)}")
            display.begin("limit: CPU per SET, raw redis-py and Store.claim")
            batches = sorted(
                {jobs for _nodes, jobs in plan.cells + plan.extra_ours + plan.loser_cells}
            )
            ctx.raw = out["raw"] = limits.raw_client(
                server, loop=loop, batches=batches, quick=plan.quick, paced=plan.loser_cells
            )
            display.done("raw client baseline done")
        for nodes, jobs in plan.cells + plan.extra_ours:
            spec = CellSpec(
                "cronrace",
                nodes,
                jobs,
                ticks=plan.ticks,
                procs=procs_for(nodes, jobs, plan.agents_per_process),
                profile=plan.profile == (nodes, jobs),
            )
            display.begin(spec.label)
            row = run_cell(spec, ctx, display.status)
            out["fleet"].append(row)
            display.done(_summary(row))
        for nodes, jobs, racers in plan.racer_cells:
            spec = CellSpec(
                "cronrace",
                nodes,
                jobs,
                ticks=plan.ticks,
                procs=procs_for(nodes, jobs, plan.agents_per_process),
                racers=racers,
                # Stable membership: every node has exchanged fingerprints with every other
                # (two heartbeats after the last start) before the window opens.
                warmup_ticks=6,
            )
            display.begin(spec.label)
            row = run_cell(spec, ctx, display.status)
            out["racers"].append(row)
            display.done(_summary(row))
        if plan.floor_cells:
            out["floor"] = floor_cells(plan, ctx, display)
        if plan.churn:
            nodes, jobs = CHURN_CELL
            spec = CellSpec(
                "cronrace",
                nodes,
                jobs,
                ticks=plan.churn_ticks,
                procs=1,
                racers="2",
                churn_every_s=CHURN_EVERY_S,
                catchup="all",
                heartbeat_s=1.0,
            )
            display.begin(spec.label)
            row = run_cell(spec, ctx, display.status)
            out["racers"].append(row)
            display.done(_summary(row))
        for nodes, jobs in plan.per_node_cells:
            spec = CellSpec("cronrace", nodes, jobs, ticks=plan.ticks, procs=nodes)
            display.begin(f"{spec.label}, one process per node")
            row = run_cell(spec, ctx, display.status)
            out["per_node"].append(row)
            display.done(_summary(row))
        for nodes, jobs in plan.loser_cells:
            spec = CellSpec(
                "cronrace",
                nodes,
                jobs,
                ticks=plan.ticks,
                procs=procs_for(nodes, jobs, plan.agents_per_process),
                losers_only=True,
                profile=plan.profile == (nodes, jobs),
            )
            display.begin(spec.label)
            row = losers_cell(spec, ctx, plan, display)
            out["losers"].append(row)
            display.done(_summary(row))
        if plan.peer_cells or plan.chaos:
            display.begin("peer: preparing arq's virtual environment")
            peer = ensure_peer(with_uvloop=loop == "uvloop")
            ctx.peer_python = peer.python
            out["peer_status"] = f"arq {peer.version}" if peer.available else peer.reason
            display.done(f"peer: {out['peer_status']}")
            for nodes, jobs in plan.peer_cells:
                spec = CellSpec("arq", nodes, jobs, ticks=plan.ticks, procs=procs_for(nodes, jobs))
                display.begin(spec.label)
                if peer.available:
                    row = run_cell(spec, ctx, display.status)
                else:
                    row = {
                        "system": "arq",
                        "nodes": nodes,
                        "jobs": jobs,
                        "status": "unavailable",
                        "reason": peer.reason,
                    }
                out["peer"].append(row)
                display.done(_summary(row))
        if plan.chaos:
            nodes, jobs = CHAOS_CELL
            for system in ("cronrace", "arq"):
                spec = CellSpec(
                    system,
                    nodes,
                    jobs,
                    ticks=plan.chaos_ticks,
                    procs=nodes,
                    chaos=True,
                    warmup_ticks=1,
                )
                display.begin(spec.label)
                if system == "arq" and ctx.peer_python is None:
                    row = {
                        "system": system,
                        "nodes": nodes,
                        "jobs": jobs,
                        "status": "unavailable",
                        "reason": out["peer_status"],
                    }
                else:
                    row = run_cell(spec, ctx, display.status)
                out["chaos"].append(row)
                display.done(_summary(row))
    out["wall_s"] = round(time.time() - started, 1)
    out["commit_end"] = report.git_commit()
    out["machine"]["loadavg_end"] = Path("/proc/loadavg").read_text().split()[:3]
    return out


def floor_cells(plan: Plan, ctx: Context, display: Display) -> dict[str, Any]:
    """Bare redis-py doing a winner's work, then cronrace, side by side, repeated.

    Each repeat runs the floor (its own process), the cronrace cell, and the same fleet
    with schedules that do not fire in the window: what its nodes spend on heartbeats, the
    control stream and loop turns with no run at all (their per-node background, which
    the floor does not do). The winner's path is the cell's CPU less that background.
    Ratios are taken within each repeat (the shared machine's load drifts) and reported
    as medians: cronrace's winner path (and its whole process) per run, and its fire lag
    p99, over the floor's.
    """
    cells = []
    for nodes, jobs in plan.floor_cells:
        repeats = []
        for repeat in range(plan.floor_repeats):
            display.begin(f"floor {nodes}x{jobs}: bare redis-py ({repeat + 1})")
            ctx.server.flush()
            bare = floor_cell(ctx.server.url, "floor", nodes, jobs, plan.ticks, ctx.loop)
            display.done(f"floor {nodes}x{jobs}: {json.dumps(bare)}")
            display.begin(f"floor {nodes}x{jobs}: cronrace ({repeat + 1})")
            spec = CellSpec("cronrace", nodes, jobs, ticks=plan.ticks, procs=1, bare=True)
            row = run_cell(spec, ctx, display.status)
            display.done(_summary(row))
            display.begin(f"floor {nodes}x{jobs}: cronrace's background, no runs ({repeat + 1})")
            idle_spec = dataclasses.replace(spec, schedule=NEVER_IN_WINDOW)
            idle = run_cell(idle_spec, ctx, display.status)
            display.done(f"floor {nodes}x{jobs}: background {idle.get('client_cpu_cores')} cores")
            if row.get("status") != "ok" or idle.get("status") != "ok":
                repeats.append({"floor": bare, "cronrace": row, "background": idle})
                continue
            # Per node-second, kept to the microsecond (client_cpu_cores is rounded to ms).
            idle_cores = idle["client_cpu_ms_per_node_s"] * nodes / 1000
            background_us = idle_cores * row["window_s"] / row["job_ticks"] * 1e6
            path_us = round(row["client_cpu_us_per_job_tick"] - background_us, 1)
            repeats.append(
                {
                    "floor": bare,
                    "cronrace_cpu_us_per_run": row["client_cpu_us_per_job_tick"],
                    "background_cpu_cores": round(idle_cores, 5),
                    "background_cpu_us_per_run": round(background_us, 1),
                    "winner_path_cpu_us_per_run": path_us,
                    "cronrace_fire_lag_p99_ms": row["fire_lag_p99_ms"],
                    "runs_per_node_max": row.get("runs_per_node_max"),
                    "cpu_over_floor": _over(path_us, bare["cpu_us_per_run"]),
                    "process_cpu_over_floor": _over(
                        row["client_cpu_us_per_job_tick"], bare["cpu_us_per_run"]
                    ),
                    "lag_p99_over_floor": _over(row["fire_lag_p99_ms"], bare["fire_lag_p99_ms"]),
                }
            )
        cells.append({"nodes": nodes, "jobs": jobs, "repeats": repeats, **_medians(repeats)})
    ratios = [c["cpu_over_floor"] for c in cells if c.get("cpu_over_floor") is not None]
    return {"cells": cells, "winner_cpu_over_floor": max(ratios, default=None)}


def _over(value: float | None, floor: float | None) -> float | None:
    return round(value / floor, 2) if value and floor else None


def _medians(repeats: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in (
        "cpu_over_floor",
        "process_cpu_over_floor",
        "lag_p99_over_floor",
        "cronrace_cpu_us_per_run",
        "winner_path_cpu_us_per_run",
        "background_cpu_us_per_run",
    ):
        values = [r[key] for r in repeats if r.get(key) is not None]
        out[key] = round(statistics.median(values), 2) if values else None
    floor_cpu = [r["floor"]["cpu_us_per_run"] for r in repeats]
    out["floor_cpu_us_per_run"] = round(statistics.median(floor_cpu), 1) if floor_cpu else None
    return out


def losers_cell(spec: CellSpec, ctx: Context, plan: Plan, display: Display) -> dict[str, Any]:
    """Alternate paced raw redis-py and the losers-only cell; report medians of the repeats.

    The machine is shared and its load drifts: a ratio is only worth something when both
    sides were measured next to each other, so each repeat measures both.
    """
    key = f"paced:{spec.nodes}x{spec.jobs}"
    rows: list[dict[str, Any]] = []
    for repeat in range(plan.loser_repeats):
        display.status(
            f"{spec.label}: paced raw redis-py ({repeat + 1}/{plan.loser_repeats})",
            repeat / plan.loser_repeats,
        )
        raw = limits.raw_client(
            ctx.server, loop=ctx.loop, batches=[], quick=plan.quick, paced=[(spec.nodes, spec.jobs)]
        )
        if key in raw:
            ctx.raw[key] = raw[key]
        row = run_cell(spec, ctx, display.status)
        if row.get("status") != "ok":
            return row
        rows.append(row)
    ratios = [r["agent_cpu_vs_paced_raw"] for r in rows if r.get("agent_cpu_vs_paced_raw")]
    result = dict(rows[0])
    for field_name in ("agent_cpu_us_per_claim", "paced_raw_cpu_us_per_set", "agent_cpu_vs_raw"):
        values = [r[field_name] for r in rows if r.get(field_name) is not None]
        result[field_name] = round(statistics.median(values), 2) if values else None
        result[f"{field_name}_repeats"] = values
    result["agent_cpu_vs_paced_raw"] = round(statistics.median(ratios), 2) if ratios else None
    result["agent_cpu_vs_paced_raw_repeats"] = ratios
    result["repeats"] = len(rows)
    result["runs_in_window"] = sum(r["runs_in_window"] for r in rows)
    return result


def headline(out: dict[str, Any]) -> str:
    """The closing line: the figures the targets are stated in."""
    ok = [r for r in out["fleet"] if r.get("status") == "ok"]
    losers = [r["loser_cmds_per_node_job_tick"] for r in ok if r["nodes"] > 1]
    claims = max(losers, key=lambda v: abs(v - 1)) if losers else None
    rtts = [r["rtt_per_node_wake"] for r in ok if r.get("rtt_per_node_wake") is not None]
    lag_row = next((r for r in ok if (r["nodes"], r["jobs"]) == LAG_TARGET_CELL), None)
    if lag_row is None and ok:
        lag_row = max(ok, key=lambda r: r["nodes_x_jobs"])
    racers = [r for r in out.get("racers", []) if r.get("status") == "ok"]
    ours = ok + [r for r in out["chaos"] if r.get("system") == "cronrace" and "duplicates" in r]
    ours += racers
    rtt = max(rtts, default=None)
    at_two = [
        r["claims_per_job_tick"] for r in racers if r["racers"] == "2" and r["kind"] == "sweep"
    ]
    spreads = [r["spread_max_over_mean"] for r in racers if r.get("spread_max_over_mean")]
    floor = out.get("floor", {}).get("winner_cpu_over_floor")
    return (
        f"claims_per_node_job_tick={_num(claims)} rtt_per_node_wake={_num(rtt)} "
        f"p99_fire_lag_ms={_num(lag_row['fire_lag_p99_ms'] if lag_row else None)} "
        f"duplicates={sum(r['duplicates'] for r in ours)} missed={sum(r['missed'] for r in ours)} "
        f"racers_claims_per_job_tick={_num(max(at_two, default=None))} "
        f"spread_max_over_mean={_num(max(spreads, default=None))} "
        f"winner_cpu_over_floor={_num(floor)}"
    )


def _num(value: float | None) -> str:
    return "nan" if value is None else f"{value:.2f}"


def write_outputs(out: dict[str, Any], out_dir: Path, *, publish: bool, plots: bool) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "results.json").write_text(json.dumps(out, indent=1, default=str))
    report.write_csv(
        out_dir / "fleet.csv",
        out["fleet"] + out["per_node"] + out["losers"] + out.get("racers", []),
    )
    report.write_csv(out_dir / "peer.csv", out["peer"] + out["chaos"])
    tables = generated_markdown(out, out_dir)
    (out_dir / "tables.md").write_text(tables)
    written = [out_dir / name for name in ("results.json", "fleet.csv", "peer.csv", "tables.md")]
    if plots:
        written += report.plots(out_dir, out["fleet"], out["peer"], out["limit"], out["chaos"])
        if out.get("racers"):
            written.append(report.racers_plot(out_dir, out["fleet"] + out["racers"]))
    if publish:
        report.update_results_md(RESULTS_MD, tables)
        written.append(RESULTS_MD)
    return written


def _background(out: dict[str, Any]) -> str:
    rates = sorted(r["background_cmds_per_node_s"] for r in out["fleet"] if r.get("status") == "ok")
    if not rates:
        return "–"
    return f"{rates[len(rates) // 2]:g}"


def _moved(out: dict[str, Any]) -> str:
    end = out.get("commit_end")
    if not end or end == out["commit"]:
        return ""
    if not report.changed_between(out["commit"], end, "cronrace"):
        return f" (HEAD moved to `{end}` during the run; `cronrace/` unchanged)"
    return f" (HEAD moved to `{end}` during the run: later cells ran newer code)"


def generated_markdown(out: dict[str, Any], out_dir: Path) -> str:
    machine = out["machine"]
    where = out_dir.resolve()
    rel = where.relative_to(BENCH_DIR) if where.is_relative_to(BENCH_DIR) else where
    comparison = [
        r
        for r in out["fleet"]
        if (r["nodes"], r["jobs"]) in {(p["nodes"], p["jobs"]) for p in out["peer"]}
    ]
    lines = [
        f"Run of commit `{out['commit']}`{_moved(out)}: {out['wall_s']} s wall, event loop "
        f"{out['loop']}, "
        f"{'quick' if out['plan']['quick'] else 'full'} mode, {out['plan']['ticks']} measured "
        "1-second ticks per cell.",
        "",
        f"Machine: {machine.get('cpu_model')}, {machine.get('cpus')} cores, "
        f"{machine.get('memory_gib')} GiB, {machine.get('platform')}; Python "
        f"{machine.get('python')}, redis-server {machine.get('redis_server')}, redis-py "
        f"{machine.get('redis')}, hiredis {machine.get('hiredis')}, uvloop "
        f"{machine.get('uvloop')}; load average {' '.join(machine.get('loadavg_start', []))} "
        f"at start, {' '.join(machine.get('loadavg_end', []))} at end (shared machine).",
        "",
        "### cronrace: the sweep",
        "",
        report.fleet_table(out["fleet"]),
        "",
        "Tick-path commands are the claims plus what the winners send (the decision, "
        "with its records, and the run's end, with the run's record); each node's "
        "background (its heartbeat pipeline and its blocking `XREAD` of the control stream: "
        f"{_background(out)} commands per node per second in this run) is counted apart. "
        "'Executed' is Redis's own `INFO commandstats` count, which also counts the commands "
        "Lua scripts run.",
        "",
        f"```\n{headline(out)}\n```",
        "",
        "### racers = k beside racers = all",
        "",
        "Claims per job-tick are every claim sent over jobs × ticks (all: N; k: at most k, "
        "plus the late claims of ticks whose racers left). Runs per node: the busiest node's "
        "runs against the mean over all N nodes (1.00 is perfectly even). The churn cell "
        f"stops one agent and starts it again every {CHURN_EVERY_S:g} s (1 s heartbeats, "
        "`catchup = all`): late runs are its ticks fired late.",
        "",
        report.racers_table(out.get("racers", [])),
        "",
        "### The winner's path against its floor",
        "",
        "The floor is bare redis-py doing what a winner must, for the same N × J on the same "
        "server, in a process of its own, measured right before cronrace in each repeat "
        "(benchmarks/floor.py: each node's claim pipelines, the preferred jobs first and the "
        "others 100 ms later as cronrace's nodes claim, the decide pipeline with cronrace's "
        "own decide.lua, the handler tasks, one pipelined end_run.lua with each run "
        "record). CPU per run is the whole process's (every node's claims too) over the runs; the "
        "winner's path is cronrace's less its background (the same fleet, measured right "
        "after, with schedules that do not fire: heartbeats, control stream, loop turns). "
        "Ratios are medians of the repeats' ratios.",
        "",
        report.floor_table(out.get("floor", {})),
        "",
        "### Where the fire lag goes",
        "",
        "The sweep's simulated agents share fleet processes (at most "
        f"{AGENTS_PER_PROCESS} each, two processes from {TWO_PROCESSES_FROM:,} claims per "
        "second); the last row repeats 10 × 100 with one process per node (10 processes on "
        "2 cores). 'Claim pipeline' and 'decide pipeline' are from sending to the reply, as "
        "the awaiting coroutine sees it, so they include waiting for the event loop.",
        "",
        report.lag_table(out["fleet"] + out["per_node"]),
        "",
        "### What a claim costs a loser",
        "",
        "Every claim of the window was taken beforehand by an outsider, so every agent loses "
        "every race: the agents' CPU is the claim path alone (plus the per-node background), "
        "compared with raw redis-py pipelining the same number of `SET NX PX` per round trip: "
        "in a hot loop (measured once, at the start) and paced like the fleet (N clients, one "
        "pipeline of J each per second, measured right before each repeat of the cell). "
        "Figures are medians of the repeats; each repeat's ratio is in brackets.",
        "",
        report.losers_table(out["losers"]),
        "",
        "### The limit of the same Redis, measured in the same run",
        "",
        report.limit_table(out["limit"], out["raw"]),
        "",
        f"### cronrace vs the peer ({out['peer_status']})",
        "",
        report.peer_table(comparison + out["peer"]),
        "",
        "### Staggered starts, one node paused for 3 s",
        "",
        report.chaos_table(out["chaos"]),
        "",
        "Plots: "
        + ", ".join(
            f"[{name}]({rel}/{name})"
            for name in ("claims_and_redis_cpu.png", "fire_lag.png", "cronrace_vs_arq.png")
        ),
        "",
        f"![claims and Redis CPU]({rel}/claims_and_redis_cpu.png)",
        f"![fire lag]({rel}/fire_lag.png)",
        f"![cronrace vs arq]({rel}/cronrace_vs_arq.png)",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.fleet",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true", help="a small run, under two minutes")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="only the quick mode's smallest cell (used by the tests)",
    )
    parser.add_argument(
        "--publish",
        action="store_true",
        help="write benchmarks/results/ and the tables of benchmarks/RESULTS.md",
    )
    parser.add_argument("--out", type=Path, help="output directory (default benchmarks/out)")
    parser.add_argument("--cells", help="cronrace cells to run instead, e.g. 10x100,50x10")
    parser.add_argument("--losers", help="losers-only cells to run instead, e.g. 10x100")
    parser.add_argument(
        "--racers",
        help="racers cells to run instead, NxJ:k, e.g. 10x100:2,10x100:all ('' for none)",
    )
    parser.add_argument("--churn", action="store_true", help="run the churn cell too")
    parser.add_argument(
        "--floor", help="winner-path floor cells to run instead, e.g. 1x100,10x100 ('' for none)"
    )
    parser.add_argument("--ticks", type=int, help="measured ticks per cell")
    parser.add_argument(
        "--agents-per-process",
        type=int,
        help=f"simulated agents per fleet process (default {AGENTS_PER_PROCESS})",
    )
    parser.add_argument("--no-peer", action="store_true", help="skip arq")
    parser.add_argument("--no-chaos", action="store_true", help="skip the stagger/pause run")
    parser.add_argument("--no-limit", action="store_true", help="skip redis-benchmark and raw")
    parser.add_argument(
        "--profile",
        metavar="NxJ",
        help="cProfile the first fleet process of this cell over the window",
    )
    parser.add_argument(
        "--from-json",
        type=Path,
        metavar="RESULTS_JSON",
        help="run nothing: redraw tables and plots from a results.json of an earlier run",
    )
    parser.add_argument(
        "--store",
        choices=("redis", "postgres", "both"),
        default="redis",
        help="redis: the sweep above; postgres or both: the store comparison "
        "(benchmarks/stores.py: 5x100 and 10x1000 on each store, pgbench beside "
        "redis-benchmark)",
    )
    parser.add_argument("--repeats", type=int, help="store comparison: repeats of each cell")
    parser.add_argument(
        "--pg-statements",
        action="store_true",
        help="store comparison: postgres's time by statement per cell (pg_stat_statements)",
    )
    args = parser.parse_args(argv)
    if args.store != "redis":
        return compare_stores(args)
    if args.from_json:
        out = json.loads(args.from_json.read_text())
        out_dir = args.out or args.from_json.parent
        written = write_outputs(out, out_dir, publish=args.publish, plots=report.can_plot())
        sys.stdout.write(f"wrote {', '.join(str(path) for path in written)}\n")
        return 0
    plan = build_plan(args)
    out_dir = args.out or (RESULTS_DIR if args.publish else BENCH_DIR / "out")
    display = Display(plan.steps)
    workdir = Path(tempfile.mkdtemp(prefix="cronrace-bench-"))
    try:
        with display.running():
            out = run(plan, workdir, display)
        plots = not args.smoke and report.can_plot()
        if not plots and not args.smoke:
            display.console.log("matplotlib is not installed: no plots (pip install -e '.[bench]')")
        written = write_outputs(out, out_dir, publish=args.publish, plots=plots)
    finally:
        if not plan.profile:
            shutil.rmtree(workdir, ignore_errors=True)
    console = Console()
    console.print(report.fleet_table(out["fleet"]), markup=False, soft_wrap=True)
    if plan.profile:
        _print_profile(out, console)
    display.console.log(f"wrote {', '.join(str(path) for path in written)} in {out['wall_s']} s")
    sys.stdout.write(headline(out) + "\n")
    sys.stdout.flush()
    return 0


STORES_BEGIN = "<!-- BEGIN GENERATED: python -m benchmarks.fleet --store both --publish -->"


def compare_stores(args: argparse.Namespace) -> int:
    """Redis and PostgreSQL side by side (benchmarks/stores.py)."""
    from benchmarks import stores, stores_report

    cells = (
        [_cell(text) for text in args.cells.split(",")]
        if args.cells
        else list(stores.SMOKE_CELLS if args.smoke else stores.CELLS)
    )
    chosen = stores.STORES if args.store == "both" else ("postgres",)
    repeats = args.repeats or (1 if args.smoke or args.quick else 3)
    ticks = args.ticks or (4 if args.smoke else 5 if args.quick else 6)
    limit = not args.no_limit
    limit_s = 3.0 if args.smoke or args.quick else 8.0
    out_dir = args.out or (RESULTS_DIR if args.publish else BENCH_DIR / "out")
    display = Display(repeats * len(cells) * len(chosen) + (len(chosen) if limit else 0))
    workdir = Path(tempfile.mkdtemp(prefix="cronrace-stores-"))
    loop = "uvloop" if uvloop_installed() else "asyncio"
    started = time.time()
    machine = report.machine()  # the load average at the start
    try:
        with display.running():
            result = stores.run_stores(
                cells,
                stores=chosen,
                repeats=repeats,
                ticks=ticks,
                quick=args.quick or args.smoke,
                limit=limit,
                limit_s=limit_s,
                workdir=workdir,
                loop=loop,
                statements=args.pg_statements,
                begin=display.begin,
                status=display.status,
                done=display.done,
            )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    result.update(
        machine=machine,
        commit=report.git_commit(),
        loop=loop,
        wall_s=round(time.time() - started, 1),
        plan={"cells": cells, "stores": chosen, "repeats": repeats, "ticks": ticks},
    )
    result["machine"]["loadavg_end"] = Path("/proc/loadavg").read_text().split()[:3]
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "stores.json").write_text(json.dumps(result, indent=1, default=str))
    report.write_csv(out_dir / "stores.csv", result["runs"])
    tables = stores_markdown(result)
    (out_dir / "stores_tables.md").write_text(tables)
    if not args.smoke and report.can_plot():
        stores_report.plot(result, out_dir / "stores_redis_vs_postgres.png")
    if args.publish:
        report.update_results_md(RESULTS_MD, tables, begin=STORES_BEGIN)
    console = Console()
    console.print(stores_report.fleet_table(result), markup=False, soft_wrap=True)
    console.print(stores_report.limit_table(result), markup=False, soft_wrap=True)
    sys.stdout.write(stores.headline(result) + "\n")
    sys.stdout.flush()
    return 0


def stores_markdown(result: dict[str, Any]) -> str:
    from benchmarks import stores, stores_report

    machine = result["machine"]
    plan = result["plan"]
    return "\n".join(
        [
            f"Run of commit `{result['commit']}`: {result['wall_s']} s wall, event loop "
            f"{result['loop']}, {plan['repeats']} repeats of {plan['ticks']} measured "
            "1-second ticks per cell and store, the stores alternating first.",
            "",
            f"Machine: {machine.get('cpu_model')}, {machine.get('cpus')} cores; "
            f"redis-server {result['servers'].get('redis')} (no persistence), PostgreSQL "
            f"{result['servers'].get('postgres')} (fsync off); load average "
            f"{' '.join(machine.get('loadavg_start', []))} at start, "
            f"{' '.join(machine.get('loadavg_end', []))} at end (shared machine).",
            "",
            "### The fleets",
            "",
            "Medians of the repeats; 'PG / Redis' is the median of each repeat's ratio, both "
            "stores measured one right after the other. A round trip on PostgreSQL is one "
            "statement (the pool's autocommit connection); on Redis one pipeline.",
            "",
            stores_report.fleet_table(result),
            "",
            f"```\n{stores.headline(result)}\n```",
            "",
            "### The claim's own limit on each server",
            "",
            "redis-benchmark: `SET bench:<random> x NX PX 60000`, 50 clients, unpipelined and "
            "pipelined by 100. pgbench: the store's claim statement (sql/statements/claim.sql, "
            "as the agents send it), 50 clients, extended protocol, one random tick per "
            "statement so that every claim inserts a row, with 1 and with 100 claims per "
            "statement. Server CPU from `INFO` (Redis) and `/proc` (every postgres process).",
            "",
            stores_report.limit_table(result),
            "",
            *(
                [
                    "### Where postgres's time goes",
                    "",
                    "`--pg-statements`: pg_stat_statements over each cell (start-up and drain "
                    "included), the median share of each statement over the repeats.",
                    "",
                    stores_report.statements_table(result),
                    "",
                ]
                if stores_report.statements_table(result)
                else []
            ),
            "![Redis and PostgreSQL](results/stores_redis_vs_postgres.png)",
        ]
    )


def _print_profile(out: dict[str, Any], console: Console) -> None:
    import io
    import pstats

    for row in out["fleet"] + out["losers"]:
        if row.get("profile"):
            buffer = io.StringIO()
            stats = pstats.Stats(row["profile"], stream=buffer)
            stats.sort_stats("tottime").print_stats(30)
            stats.sort_stats("cumulative").print_stats(40)
            console.print(buffer.getvalue(), markup=False, soft_wrap=True)
            console.print(f"profile kept at {row['profile']}", markup=False)


if __name__ == "__main__":
    raise SystemExit(main())
